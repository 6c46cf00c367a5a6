package proxy

import (
	"net"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/tlspass"
)

// RefusedNotTLS: a tls-passthrough connection did not start with a valid
// ClientHello within HelloTimeout (a reason for ConnRefused).
const RefusedNotTLS = "not-tls"

// HelloTimeout bounds the wait for a tls-passthrough client's ClientHello.
const HelloTimeout = 10 * time.Second

// servePassthrough reads the ClientHello of a tls-passthrough connection
// without terminating TLS, picks the pool by server name (the route whose
// host matches it for path "/": of the listener's sniRoutes when it has
// some, else of the load balancer's routes; the listener's pool when none
// matches), and forwards the connection, starting with the bytes read.
// Both ends stay bare TCP connections, spliced; a route with Terminate
// has its TLS terminated here first (serveTerminated).
func (p *Proxy) servePassthrough(l *ListenerSnapshot, c *net.TCPConn, t *tracked) {
	hello, read, err := tlspass.Read(c, nil, time.Now().Add(HelloTimeout))
	if err != nil {
		p.metrics.ConnRefused(l.LB, l.Name, RefusedNotTLS)
		refuse(c)
		return
	}
	pool := l.Backend()
	if hello.ServerName != "" && l.Routes != nil {
		if r := l.Routes.Match(hello.ServerName, "/"); r != nil {
			if rp := l.Pool(r.Pool); rp != nil {
				pool = rp
			}
			if r.Terminate {
				p.serveTerminated(l, c, pool, read)
				return
			}
		}
	}
	p.forwardTCP(l, c, pool, read, t)
}
