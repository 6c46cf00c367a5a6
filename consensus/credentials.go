package consensus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// credentials are this host's identity in the cluster, kept in DATA/pki.
type hostCreds struct {
	clusterID string
	nodeID    string
	ca        *pki.CA
	certPEM   []byte
	keyPEM    []byte
	serverTLS *tls.Config
	clientTLS *tls.Config
}

const (
	fileCACert    = "ca.crt"
	fileCAKey     = "ca.key"
	fileNodeCert  = "node.crt"
	fileNodeKey   = "node.key"
	fileClusterID = "cluster-id"
	fileNodeID    = "node-id"
)

func pkiDir(dataDir string) string { return filepath.Join(dataDir, "pki") }

// loadCredentials reads DATA/pki; os.ErrNotExist means a new host.
func loadCredentials(dataDir string) (*hostCreds, error) {
	dir := pkiDir(dataDir)
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
	cert, err := read(fileNodeCert)
	if err != nil {
		return nil, err // includes os.ErrNotExist
	}
	var files [5][]byte
	for i, name := range []string{fileNodeKey, fileCACert, fileCAKey, fileClusterID, fileNodeID} {
		if files[i], err = read(name); err != nil {
			return nil, fmt.Errorf("data dir %s is incomplete: %w", dataDir, err)
		}
	}
	ca, err := pki.LoadCA(files[1], files[2])
	if err != nil {
		return nil, err
	}
	return buildCredentials(strings.TrimSpace(string(files[3])), strings.TrimSpace(string(files[4])), ca, cert, files[0])
}

func buildCredentials(clusterID, nodeID string, ca *pki.CA, certPEM, keyPEM []byte) (*hostCreds, error) {
	server, err := pki.ServerTLS(ca.CertPEM, certPEM, keyPEM, false)
	if err != nil {
		return nil, err
	}
	client, err := pki.ClientTLS(ca.CertPEM, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &hostCreds{clusterID: clusterID, nodeID: nodeID, ca: ca, certPEM: certPEM, keyPEM: keyPEM, serverTLS: server, clientTLS: client}, nil
}

func (c *hostCreds) save(dataDir string) error {
	dir := pkiDir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	files := []struct {
		name string
		data []byte
	}{
		{fileCACert, c.ca.CertPEM}, {fileCAKey, c.ca.KeyPEM}, {fileNodeKey, c.keyPEM},
		{fileClusterID, []byte(c.clusterID + "\n")}, {fileNodeID, []byte(c.nodeID + "\n")},
		{fileNodeCert, c.certPEM}, // last: its presence marks the directory complete
	}
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func nodeCertRequest(cfg Config) pki.IssueRequest {
	req := pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleNode, Name: cfg.NodeID}, Server: true}
	for _, a := range []string{cfg.RaftAddr, cfg.APIAddr} {
		if ip := hostIP(a); ip != nil {
			req.IPs = append(req.IPs, ip)
		}
	}
	return req
}

// newClusterCredentials creates the CA of a new cluster and this host's
// certificate.
func newClusterCredentials(cfg Config) (*hostCreds, error) {
	clusterID := randomID()
	ca, err := pki.NewCA(clusterID)
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.Issue(nodeCertRequest(cfg))
	if err != nil {
		return nil, err
	}
	c, err := buildCredentials(clusterID, cfg.NodeID, ca, cert, key)
	if err != nil {
		return nil, err
	}
	return c, c.save(cfg.DataDir)
}

// join asks an existing cluster for credentials with a join token. The
// token's CA fingerprint authenticates the cluster to us; the token's
// secret authenticates us to the cluster.
func (n *Node) join(ctx context.Context) (*hostCreds, error) {
	tok, err := pki.ParseJoinToken(n.cfg.Token)
	if err != nil {
		return nil, fmt.Errorf("--token: %w (get one with `teapot-lb cluster join-token` on a cluster host)", err)
	}
	csr, key, err := pki.NewCSR(pki.Identity{Role: pki.RoleNode, Name: n.cfg.NodeID})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(n.cfg.Join, grpc.WithTransportCredentials(grpccreds.NewTLS(pki.PinnedTLS(tok.CAFingerprint))))
	if err != nil {
		return nil, fmt.Errorf("--join %s: %w", n.cfg.Join, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := &pb.JoinRequest{Token: n.cfg.Token, NodeId: n.cfg.NodeID, RaftAddr: n.cfg.RaftAddr, ApiAddr: n.cfg.APIAddr, CsrPem: csr}
	var resp *pb.JoinResponse
	for {
		resp, err = pb.NewClusterClient(conn).Join(ctx, req)
		if err == nil {
			break
		}
		// A host that is still starting is worth waiting for; a cluster
		// whose CA does not match the token is not.
		s := status.Convert(err)
		if s.Code() != codes.Unavailable || strings.Contains(s.Message(), "fingerprint") || ctx.Err() != nil {
			return nil, fmt.Errorf("join through %s: %s", n.cfg.Join, s.Message())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("join through %s: %s", n.cfg.Join, s.Message())
		case <-time.After(200 * time.Millisecond):
		}
	}
	ca, err := pki.LoadCA(resp.GetCaCertPem(), resp.GetCaKeyPem())
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if ca.Fingerprint() != tok.CAFingerprint {
		return nil, errors.New("join: the cluster's CA does not match the token")
	}
	c, err := buildCredentials(resp.GetClusterId(), n.cfg.NodeID, ca, resp.GetNodeCertPem(), key)
	if err != nil {
		return nil, err
	}
	if err := c.save(n.cfg.DataDir); err != nil {
		return nil, err
	}
	n.log.Info("joined cluster", "cluster", c.clusterID, "through", n.cfg.Join)
	return c, nil
}

func dialPeer(addr string, t *tls.Config) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(grpccreds.NewTLS(t)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	)
}
