// Package clienttest runs admin API servers with real mTLS on loopback for
// tests of code that uses package client.
package clienttest

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Env is a set of running servers sharing one cluster CA.
type Env struct {
	CA *pki.CA
	// Config reaches every server with an admin certificate.
	Config  *client.Config
	Servers []*Server
}

// Server is one running admin API server.
type Server struct {
	Addr string
	gs   *grpc.Server
}

// Stop closes the server's listener and connections.
func (s *Server) Stop() { s.gs.Stop() }

// Start runs one server for each AdminServer on 127.0.0.1 with a fresh CA.
// The servers require a client certificate with the admin role. They stop
// when the test ends.
func Start(t testing.TB, admins ...pb.AdminServer) *Env {
	t.Helper()
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{CA: ca, Config: &client.Config{CA: string(ca.CertPEM), Cert: string(certPEM), Key: string(keyPEM)}}
	for _, admin := range admins {
		s := serve(t, ca, admin)
		env.Servers = append(env.Servers, s)
		env.Config.Servers = append(env.Config.Servers, s.Addr)
	}
	return env
}

// WriteConfig saves the environment's admin config in a temporary
// directory and returns its path.
func (e *Env) WriteConfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), client.ConfigFileName)
	if err := client.SaveConfig(path, e.Config); err != nil {
		t.Fatal(err)
	}
	return path
}

func serve(t testing.TB, ca *pki.CA, admin pb.AdminServer) *Server {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(pki.IssueRequest{
		Identity: pki.Identity{Role: pki.RoleNode, Name: "test"},
		Server:   true,
		IPs:      []net.IP{net.IPv4(127, 0, 0, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ServerTLS(ca.CertPEM, certPEM, keyPEM, true)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)), grpc.ChainUnaryInterceptor(requireAdmin))
	pb.RegisterAdminServer(gs, admin)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return &Server{Addr: lis.Addr().String(), gs: gs}
}

func requireAdmin(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, status.Error(codes.Unauthenticated, "client certificate required")
	}
	id, err := pki.IdentityOf(info.State.PeerCertificates[0])
	if err != nil || id.Role != pki.RoleAdmin {
		return nil, status.Error(codes.PermissionDenied, "admin certificate required")
	}
	return handler(ctx, req)
}
