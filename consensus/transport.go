package consensus

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
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

// hclogWriter carries hashicorp/raft's log lines into slog.
type hclogWriter struct{ log *slog.Logger }

func (w hclogWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		line := sc.Text()
		level := slog.LevelInfo
		switch {
		case strings.Contains(line, "[ERROR]"):
			level = slog.LevelError
		case strings.Contains(line, "[WARN]"):
			level = slog.LevelWarn
		case strings.Contains(line, "[DEBUG]"), strings.Contains(line, "[TRACE]"):
			level = slog.LevelDebug
		}
		if i := strings.Index(line, "]"); i >= 0 && i+1 < len(line) {
			line = strings.TrimSpace(line[i+1:])
		}
		w.log.Log(context.Background(), level, line)
	}
	return len(p), nil
}

func newHCLogger(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           hclog.Info,
		Output:          hclogWriter{log: log.With("component", "raft")},
		DisableTime:     true,
		IncludeLocation: false,
	})
}
