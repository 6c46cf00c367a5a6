package certs

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/mholt/acmez/v3"

	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// HandshakeTimeout bounds a TLS handshake on an https listener.
const HandshakeTimeout = 10 * time.Second

// Terminator is the data plane's ConnHandler for http and https
// listeners: it hands http connections to the L7 handler as they are, and
// https connections once their TLS handshake completed, as *tls.Conn.
type Terminator struct {
	m     *Manager
	inner proxy.ConnHandler
}

var _ proxy.ConnHandler = (*Terminator)(nil)

// Terminator wraps the L7 handler with TLS termination by m.
func (m *Manager) Terminator(inner proxy.ConnHandler) *Terminator {
	return &Terminator{m: m, inner: inner}
}

// ServeConn implements proxy.ConnHandler.
func (t *Terminator) ServeConn(ctx context.Context, c net.Conn, current func() *proxy.ListenerSnapshot) {
	l := current()
	if l == nil {
		return
	}
	if l.Protocol != snapshot.ProtoHTTPS {
		t.inner.ServeConn(ctx, c, current)
		return
	}
	tc := tls.Server(l7.ClientTransport(c), t.m.ServerConfig(l.Listener))
	// A drain or a handover ends ctx; the handshake of a client that
	// arrived meanwhile still completes (the drain applies after it).
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		t.m.handshakeFailed(err)
		return
	}
	if tc.ConnectionState().NegotiatedProtocol == acmez.ACMETLS1Protocol {
		// A TLS-ALPN-01 validation ends with the handshake.
		_ = tc.Close()
		return
	}
	if s := t.m.ClientSubject(l.Listener, tc.ConnectionState()); s != "" {
		ctx = proxy.WithClientSubject(ctx, s)
	}
	t.inner.ServeConn(ctx, tc, current)
}
