package l7

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/teapot-lb/teapot-lb/proxy/internal/splice"
)

// Server proxies HTTP connections handed to it by listeners. Its member
// connection pools are keyed by member address and outlive config swaps.
type Server struct {
	cfg   Config
	pools pools
	// h2up carries the requests to HTTP/2 members without PROXY protocol.
	h2up *h2Client
	// mirrors bounds the mirrored requests in flight.
	mirrors mirrorSlots
	// retries bounds the retrying requests of each tenant.
	retries retryBudget
	// inspected holds, per tenant, the body bytes read for routes'
	// Inspect and kept until their requests end.
	inspected tenantBytes
	// h2bodies holds, per tenant, the HTTP/2 request body bytes its
	// clients sent that its members have not read yet.
	h2bodies tenantBytes

	conns sync.Pool // *clientConn
	// h2work hands an HTTP/2 stream of any client connection to an idle
	// stream worker; h2parked counts those, at most h2idleMax (h2Worker).
	h2work    chan *h2Stream
	h2parked  atomic.Int32
	h2idleMax int32
	h2started atomic.Int64 // workers started
	// pipes, once set, carries the bytes of WebSocket tunnels (SetPipes).
	pipes atomic.Pointer[splice.Pool]
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// New returns a server with cfg's zero fields defaulted. Close releases
// its member connections.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg.withDefaults(), stop: make(chan struct{}), h2work: make(chan *h2Stream), h2idleMax: h2IdleWorkers}
	s.h2up = newH2Client(s, nil)
	s.wg.Add(1)
	go s.janitor()
	return s
}

// SetPipes makes tunnels (WebSocket and other upgrades) between bare TCP
// connections splice through pl, the host's bounded pipe pool, taking a
// pipe only while bytes move; until it is called they take Go's splice
// path, which holds a pipe per direction for the tunnel's life.
func (s *Server) SetPipes(pl *splice.Pool) { s.pipes.Store(pl) }

// Close closes idle member connections and stops the pool janitor. It does
// not close client connections: their listeners own them.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.pools.closeAll()
		s.h2up.close()
	})
	return nil
}

// janitor closes member connections left idle too long.
func (s *Server) janitor() {
	defer s.wg.Done()
	every := s.cfg.UpstreamIdleTimeout / 4
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			n := nowNano()
			s.pools.prune(n-int64(s.cfg.UpstreamIdleTimeout), n-int64(4*s.cfg.UpstreamIdleTimeout))
		}
	}
}

// ServeConn serves one client connection until it ends and closes it. c is
// plain TCP or a *tls.Conn (handshaken or not); HTTP/2 is spoken when TLS
// negotiated "h2" through ALPN or, without TLS, when the client opens with
// the HTTP/2 preface (prior knowledge, as gRPC clients do); HTTP/1.x
// otherwise. Pass bare
// *net.TCPConn and *tls.Conn values: wrappers disable splice.
//
// Cancelling ctx drains the connection: a busy HTTP/1.x connection closes
// after its response, an idle one after its next response or, without a
// request, after DrainIdleGrace (responses say Connection: close); HTTP/2
// clients get a
// GOAWAY and their open streams finish. Upgraded connections (WebSocket)
// keep running until the caller closes c.
func (s *Server) ServeConn(ctx context.Context, c net.Conn, info ConnInfo) {
	s.cfg.Metrics.Conn(&info, true)
	defer s.cfg.Metrics.Conn(&info, false)
	client, local := info.Client, info.Local
	if !client.IsValid() {
		client = addrPortOf(c.RemoteAddr())
	}
	client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	if !local.IsValid() {
		local = addrPortOf(c.LocalAddr())
	}
	if tc, ok := c.(*tls.Conn); ok {
		info.TLS = true
		if !tc.ConnectionState().HandshakeComplete {
			hctx, cancel := context.WithTimeout(ctx, s.cfg.HeaderTimeout)
			err := tc.HandshakeContext(hctx)
			cancel()
			if err != nil {
				_ = c.Close()
				return
			}
		}
		if tc.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
			s.serveH2(ctx, tc, &info, client, local)
			return
		}
	}
	cc := s.getConn()
	cc.ctx, cc.nc, cc.info = ctx, c, &info
	cc.cpuW, cc.reqM, cc.respM = cpuWeight(&info), meter{}, meter{}
	cc.tcp, _ = c.(*net.TCPConn)
	cc.client, cc.local = client, local
	cc.ca = newClientAddrs(client, info.TLS, s.trusted(&info))
	cc.ca.clientCert(&info)
	cc.idle = info.IdleTimeout
	if cc.idle <= 0 {
		cc.idle = s.cfg.IdleTimeout
	}
	if !info.TLS {
		h2c, ok := cc.sniffH2C()
		if !ok || h2c {
			if h2c {
				// The bytes read so far (the preface, perhaps frames) are
				// read again by the HTTP/2 server.
				pre := append([]byte(nil), cc.rb[cc.r:cc.w]...)
				_ = c.SetReadDeadline(time.Time{})
				s.serveH2Conn(ctx, &replayConn{Conn: c, pre: pre}, c, tls.ConnectionState{}, &info, client, local)
			} else {
				_ = c.Close()
			}
			cc.nc = nil
			s.putConn(cc)
			return
		}
	}
	if !info.TLS {
		cc.rx.rc = rawConnOf(cc.tcp)
	} else if tc, ok := c.(*tls.Conn); ok {
		if tr, ok := tc.NetConn().(*tlsTransport); ok {
			cc.rx.rc, cc.rx.tr = tr.rc, tr
		}
	}
	cc.serve()
	cc.close()
	s.putConn(cc)
}

func (s *Server) getConn() *clientConn {
	if c, ok := s.conns.Get().(*clientConn); ok {
		return c
	}
	c := &clientConn{s: s, readBuf: readBuf{rb: make([]byte, clientBufSize)}, wb: make([]byte, 0, 4096)}
	c.rx.step = c.stepRaw
	return c
}

func (s *Server) putConn(c *clientConn) {
	if len(c.rb) != clientBufSize {
		c.rb = make([]byte, clientBufSize)
	}
	c.state.Store(connIdle)
	c.up, c.scope, c.nc, c.tcp, c.info, c.ctx = nil, nil, nil, nil, nil, nil
	c.r, c.w, c.closing, c.linger, c.rdl, c.wdl, c.bodyN = 0, 0, false, false, 0, 0, 0
	c.wb, c.hostBuf, c.pathBuf = c.wb[:0], c.hostBuf[:0], c.pathBuf[:0]
	c.h.reset()
	c.stats = RequestStats{}
	c.rx = rawServe{step: c.rx.step}
	s.conns.Put(c)
}

// addrPortOf returns the address of a TCP, UDP or textual net.Addr.
func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort()
	case nil:
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
