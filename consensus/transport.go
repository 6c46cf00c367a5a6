package consensus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

// tlsStreamLayer carries Raft traffic over mutual TLS: both ends present a
// certificate from the cluster CA with a node identity.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

func newTLSStreamLayer(bind string, server, client *tls.Config) (*tlsStreamLayer, error) {
	server = server.Clone()
	server.ClientAuth = tls.RequireAndVerifyClientCert
	server.VerifyConnection = requireNode
	client = client.Clone()
	client.VerifyConnection = requireNode
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen for raft on %s: %w", bind, err)
	}
	return &tlsStreamLayer{Listener: tls.NewListener(ln, server), advertise: ln.Addr(), client: client}, nil
}

func requireNode(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raft peer sent no certificate")
	}
	id, err := pki.IdentityOf(cs.PeerCertificates[0])
	if err != nil || id.Role != pki.RoleNode {
		return fmt.Errorf("raft peer %q is not a cluster node", cs.PeerCertificates[0].Subject.CommonName)
	}
	return nil
}

func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(address), l.client)
}

func newHCLogger(w *raftLogWriter) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           hclog.Info,
		Output:          w,
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// newTransport is the Raft transport over layer.
//
// It replicates without pipelining (MaxRPCsInFlight 1: each AppendEntries
// waits for its answer). hashicorp/raft's pipeline (the default, 2 in
// flight, over unbuffered channels) can wedge: when a follower answers
// Success=false its decoder returns, and if the sender's next select picks
// a new entry or the commit timeout instead of the decoder's end, that
// send waits for a reader that never comes. Replication to that follower
// then stops for good while its heartbeats go on, so it never calls an
// election, and Shutdown waits for the sender forever. The commit barrier
// after each write made such sends frequent enough to hang a recovery test
// (a follower rejects entries while hosts stop and leadership moves). On a
// LAN, pipelining gains nothing measurable.
func newTransport(layer raft.StreamLayer, logger hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 5, Timeout: 5 * time.Second, Logger: logger, MaxRPCsInFlight: 1,
	})
}
