package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/freebind"
	"github.com/teapot-lb/teapot-lb/proxy/internal/uring"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// connStateKey carries a tracked connection's l7.ConnState in the context
// the ConnHandler gets, for HTTP.ServeConn to hand to the engine.
type connStateKey struct{}

// socket is one listening socket, shared by every snapshot that serves its
// key and closed when the last one releases it. It tracks the connections
// it accepted so that they can be drained.
type socket struct {
	p    *Proxy
	key  snapshot.Key
	refs int // guarded by p.mu
	// owner is the load balancer served, guarded by p.mu.
	owner string
	tcp   *net.TCPListener
	udp   *udpSocket
	// h3 serves HTTP/3 on the UDP port of an https listener with http3
	// (guarded by p.mu).
	h3 *h3Socket
	// shared is the socket a steered TCP listener's connections come to
	// (Config.Steer; guarded by p.mu).
	shared *sharedSocket
	// opened is when the socket was bound.
	opened time.Time

	mu     sync.Mutex
	conns  map[*tracked]struct{}
	closed bool
	active atomic.Int64
}

// tracked is one accepted connection.
type tracked struct {
	c      net.Conn
	lb     string
	l7     bool
	ctx    context.Context
	cancel context.CancelFunc
	// pending: it was open when the handover began (guarded by the
	// socket's mu).
	pending bool
	// state is what the L7 engine says of an http or https connection
	// (nil for the others).
	state *l7.ConnState
	// relay is the io_uring relay of a tcp or tls-passthrough
	// connection while it moves bytes there (nil on epoll).
	relay atomic.Pointer[uring.Handle]
	// closing: close was called (the relay, set after, stops at once).
	closing atomic.Bool
	// recheck: the handover looks at the connection again when its last
	// answer is HandoverQuiet old (guarded by the socket's mu).
	recheck *time.Timer
	// handoverClosed: the handover closes it, by CloseConnections or its
	// timer (guarded by the socket's mu): closing is set only once the
	// close begins, after the mu is let go.
	handoverClosed bool
}

// close closes the connection: one in an io_uring relay leaves its ring
// too (a ring holds its socket open past a Close of the descriptor).
// closing is set before relay is read, and pipeRing reads closing after
// it sets relay, so that one of the two stops a relay that starts while
// the connection closes.
func (t *tracked) close() {
	t.closing.Store(true)
	if h := t.relay.Load(); h != nil {
		h.Stop()
	}
	t.c.Close()
}

// cut ends the connection's exchange with a member, if any, before a
// forced close (l7.ConnState.Cut): closing an HTTP connection served from
// its socket's read callback waits for the callback to return, which
// would otherwise wait for the member's answer.
func (t *tracked) cut() {
	if t.state != nil {
		t.state.Cut()
	}
}

// acquireSocket returns the socket for l's key, opening it when no
// snapshot holds it yet; isNew reports that it was opened now.
func (p *Proxy) acquireSocket(l *snapshot.Listener) (s *socket, isNew bool, err error) {
	k := l.Key
	if s := p.sockets[k]; s != nil {
		s.refs++
		return s, false, nil
	}
	s = &socket{p: p, key: k, refs: 1, conns: map[*tracked]struct{}{}, opened: time.Now()}
	switch {
	case k.Network == snapshot.TCP && p.steering != nil && k.Space == "":
		// (Steering serves the host's namespace; a listener in a
		// tenant's attachment has a socket of its own there.)
		if err := p.steerListener(s, l.Tenant); err != nil {
			return nil, false, err
		}
		return s, true, nil
	case k.Network == snapshot.UDP && p.steering != nil && k.Space == "":
		if s.udp, err = p.steerUDPSocket(s, l.Tenant); err != nil {
			return nil, false, err
		}
		p.wg.Add(1)
		go s.udp.janitor()
		return s, true, nil
	case k.Network == snapshot.TCP:
		err = p.inSpace(k, func() (err error) {
			s.tcp, err = listenTCP(k)
			return err
		})
	case k.Network == snapshot.UDP:
		err = p.inSpace(k, func() (err error) {
			s.udp, err = p.listenUDP(s)
			return err
		})
	}
	if err != nil {
		return nil, false, err
	}
	p.wg.Add(1)
	if s.tcp != nil {
		go s.acceptLoop()
	} else {
		go s.udp.readLoop()
	}
	return s, true, nil
}

// releaseSocket drops a reference; the last one stops accepting and drains
// the connections.
func (p *Proxy) releaseSocket(s *socket) {
	if s.refs--; s.refs > 0 {
		return
	}
	if s.shared != nil {
		p.unsteerListener(s)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	switch {
	case s.tcp != nil:
		s.tcp.Close()
	case s.udp != nil:
		if s.udp.dest != nil {
			p.unsteerUDP(s.udp.dest)
		}
		s.udp.close()
	}
	if s.h3 != nil {
		s.h3.close()
		s.h3 = nil
	}
	if f := p.h3up[s.key]; f != nil {
		f.Store(false)
		delete(p.h3up, s.key)
	}
	p.h3Failed(s.key, nil)
	s.drain(func(string) bool { return true })
}

// setOwner records the load balancer now served; connections of a former
// owner drain.
func (s *socket) setOwner(lb string) {
	if s.owner != "" && s.owner != lb {
		s.drain(func(owner string) bool { return owner != lb })
		if s.udp != nil {
			s.udp.closeFlows(func(f *flow) bool { return f.l.LB != lb })
		}
	}
	s.owner = lb
}

// drain tells the matching connections to finish (their context ends) and
// closes them after the drain timeout.
func (s *socket) drain(match func(lb string) bool) {
	s.mu.Lock()
	var ts []*tracked
	for t := range s.conns {
		if match(t.lb) {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	if len(ts) == 0 {
		return
	}
	for _, t := range ts {
		t.cancel()
	}
	time.AfterFunc(s.p.cfg.DrainTimeout, func() {
		for _, t := range ts {
			t.cut()
			t.close()
		}
	})
}

// track registers an accepted connection; nil when the socket is closing.
func (s *socket) track(c net.Conn, lb string, isL7 bool) *tracked {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tracked{c: c, lb: lb, l7: isL7, ctx: ctx, cancel: cancel}
	if isL7 {
		t.state = new(l7.ConnState)
		t.ctx = context.WithValue(ctx, connStateKey{}, t.state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel()
		return nil
	}
	s.conns[t] = struct{}{}
	return t
}

func (s *socket) untrack(t *tracked) {
	t.cancel()
	s.mu.Lock()
	delete(s.conns, t)
	if t.pending {
		t.pending = false
		s.p.handover.pending.Add(-1)
	}
	s.mu.Unlock()
}

func family(k snapshot.Key) string {
	if k.Addr.Addr().Is4() {
		return "4"
	}
	return "6"
}

func listenTCP(k snapshot.Key) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: freebind.Control}
	l, err := lc.Listen(context.Background(), "tcp"+family(k), k.Addr.String())
	if err != nil {
		return nil, err
	}
	return l.(*net.TCPListener), nil
}

func (s *socket) acceptLoop() {
	defer s.p.wg.Done()
	acceptEach(s.p, s.tcp, s.key.String(), func(c *net.TCPConn) { s.p.acceptFor(s, c, "") })
}

// acceptEach hands each connection ln accepts to accept, until ln is
// closed.
func acceptEach(p *Proxy, ln *net.TCPListener, name string, accept func(*net.TCPConn)) {
	var delay time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or a transient accept error: back
			// off as net/http does, up to a second.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("accept failed", "listener", name, "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		accept(c)
	}
}

// refuse closes a connection at once with a reset.
func refuse(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// acceptFor hands one connection to its protocol, reading the snapshot in
// service now. A connection that came through tenant's shared socket
// (tenant is "" for a socket of the listener's own) is refused unless the
// listener is that tenant's.
func (p *Proxy) acceptFor(s *socket, c *net.TCPConn, tenant string) {
	l := p.current.Load().listener(s.key)
	if l == nil || tenant != "" && l.Tenant != tenant {
		refuse(c)
		return
	}
	if !p.admitSource(l, c) || !p.admitConnRate(l, c) {
		refuse(c)
		return
	}
	if n := s.active.Add(1); n > int64(l.Limits.MaxConnections) {
		s.active.Add(-1)
		p.metrics.ConnRefused(l.LB, l.Name, RefusedListenerLimit)
		refuse(c)
		return
	}
	tenantDone, refused := p.admitTenant(l.Tenant, l.Limits.TenantConnections)
	if tenantDone == nil {
		s.active.Add(-1)
		p.metrics.ConnRefused(l.LB, l.Name, refused)
		refuse(c)
		return
	}
	t := s.track(c, l.LB, l.Protocol.L7())
	if t == nil {
		s.active.Add(-1)
		tenantDone()
		refuse(c)
		return
	}
	if t.l7 && p.handover.handingOver(s.key.Addr.Addr()) {
		t.cancel() // its answers say Connection: close
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer s.active.Add(-1)
		defer tenantDone()
		defer s.untrack(t)
		// A tenant in debt of its host CPU budget has its new
		// connections wait here, its neighbours' never. A drain (a
		// handover, the listener removed) ends an HTTP connection's
		// context so that its answers say Connection: close; it does not
		// end this wait, or the client would lose its connection without
		// an answer. A forced close closes the connection under the wait,
		// which the tenant's debt bounds.
		wait := t.ctx
		if t.l7 && l.cpu != nil {
			wait = context.WithoutCancel(t.ctx)
		}
		if !l.cpu.ThrottleCtx(wait) {
			c.Close()
			return
		}
		start := time.Now()
		p.metrics.ConnOpened(l.LB, l.Name)
		switch {
		case l.Protocol.L7():
			p.cfg.HTTP.ServeConn(t.ctx, c, p.currentFunc(s.key, l.LB))
			c.Close()
		case l.Protocol == snapshot.ProtoTLSPassthrough:
			p.servePassthrough(l, c, t)
		default:
			p.serveTCP(l, c, t)
		}
		p.metrics.ConnClosed(l.LB, l.Name, time.Since(start))
	}()
}

// currentFunc returns what an L7 connection calls to read its listener's
// snapshot in service: nil once the listener or its load balancer is gone.
func (p *Proxy) currentFunc(k snapshot.Key, lb string) func() *ListenerSnapshot {
	return func() *ListenerSnapshot {
		if l := p.current.Load().listener(k); l != nil && l.LB == lb {
			return l
		}
		return nil
	}
}
