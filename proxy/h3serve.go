package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

var _ QUICServer = (*HTTP)(nil)

// h3ActiveKey carries a QUIC connection's count of requests in progress
// from the socket to ServeQUIC, for the handover's CloseConnections.
type h3ActiveKey struct{}

// ServeQUIC serves the HTTP/3 requests of one QUIC connection of an https
// listener: quic-go's HTTP/3 server is the codec (frames, QPACK, request
// streams) and hands each request, as a net/http value, to the engine's
// H3Conn, which routes it as the listener's HTTP/2 requests are routed.
// When ctx ends (a drain, a handover, a removed listener) the client
// gets a GOAWAY, the requests in progress finish, and the connection
// closes with H3_NO_ERROR. On a connection whose 0-RTT was accepted, a
// request served before the handshake completed may have come in early
// data: H3Conn.ServeEarly serves it (safe methods, marked Early-Data) or
// answers 425.
func (h *HTTP) ServeQUIC(ctx context.Context, c *quic.Conn, current func() *ListenerSnapshot) {
	ls := current()
	if ls == nil {
		return
	}
	info := h.connInfo(ctx, ls, current)
	if ls.TLS != nil && len(ls.TLS.SNIScopes) > 0 {
		h.scopeToSNI(&info, c.ConnectionState().TLS.ServerName, current)
	}
	client, _ := c.RemoteAddr().(*net.UDPAddr)
	local, _ := c.LocalAddr().(*net.UDPAddr)
	var ca, la netip.AddrPort
	if client != nil {
		ca = netip.AddrPortFrom(client.AddrPort().Addr().Unmap(), client.AddrPort().Port())
	}
	if local != nil {
		la = netip.AddrPortFrom(local.AddrPort().Addr().Unmap(), local.AddrPort().Port())
	}
	hc := h.srv.NewH3Conn(&info, ca, la)
	defer hc.Close()
	zeroRTT := h3Early(c) && c.ConnectionState().Used0RTT
	n, _ := ctx.Value(h3ActiveKey{}).(*atomic.Int64)
	var handler http.Handler = hc
	if n != nil || zeroRTT {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n != nil {
				n.Add(1)
				defer n.Add(-1)
			}
			if zeroRTT && h3Early(c) {
				hc.ServeEarly(w, r)
				return
			}
			hc.ServeHTTP(w, r)
		})
	}
	srv := &http3.Server{Handler: handler, MaxHeaderBytes: hc.MaxHeaderBytes()}
	stop := context.AfterFunc(ctx, func() {
		// GOAWAY now; the requests in progress finish; the socket's
		// drain timeout closes what is left.
		_ = srv.Shutdown(context.WithoutCancel(ctx))
	})
	defer stop()
	_ = srv.ServeQUICConn(c)
}
