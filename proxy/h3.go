package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/freebind"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// QUICHandler is what the ConnHandler of the L7 listeners (Config.HTTP)
// implements when it serves HTTP/3 on https listeners with http3: the TLS
// configuration of a QUIC handshake on listener l (its certificates
// chosen by server name, ALPN h3, TLS 1.3, the tenant's handshake CPU
// budget; nil when it has none), and the serving of one QUIC connection's
// HTTP/3 requests until it ends or ctx does (then it finishes its
// requests and closes with H3_NO_ERROR).
type QUICHandler interface {
	QUICConfig(l *snapshot.Listener) *tls.Config
	QUICServer
}

// QUICServer serves one QUIC connection's HTTP/3 requests (HTTP does).
type QUICServer interface {
	ServeQUIC(ctx context.Context, c *quic.Conn, current func() *ListenerSnapshot)
}

// QUICKeys is what a QUICHandler implements when the hosts of the
// cluster share keys: a stateless reset key, so that a host that takes a
// VIP over resets the QUIC connections it does not know (their clients
// reconnect at once instead of at their idle timeout), and a token key,
// so that a Retry token or an address token one host gave is valid on
// the others.
type QUICKeys interface {
	QUICKeys() (reset quic.StatelessResetKey, token quic.TokenGeneratorKey)
}

// HTTP/3 bounds of one QUIC connection and one UDP socket.
const (
	// H3MaxStreams is how many request streams one QUIC connection may
	// have open at once (quic.Config.MaxIncomingStreams); the client
	// waits for credit beyond it.
	H3MaxStreams = 100
	// H3MaxUniStreams bounds the unidirectional streams (HTTP/3 uses 3:
	// control and the QPACK encoder and decoder).
	H3MaxUniStreams = 8
	// H3StreamWindow and H3ConnWindow bound the request body a stream,
	// and all streams of a connection, may have in flight unread.
	H3StreamWindow = 512 << 10
	H3ConnWindow   = 2 << 20
	// H3InitialConnWindow is a connection's receive window until it
	// grows (as its requests' bodies are read fast); what it grows by is
	// charged to its tenant (MaxTenantH3WindowGrowth).
	H3InitialConnWindow = 256 << 10
	// MaxTenantH3WindowGrowth bounds what one tenant's QUIC connections
	// on a host may grow their receive windows by, together: the request
	// body bytes a client may have sent and no member read yet, past each
	// connection's initial window (which its connection bound charges).
	// Every connection may grow to H3ConnWindow, and the tenant's
	// connection bound follows the host's descriptors, so without it a
	// tenant whose members read fast, then stop, makes a host hold
	// gigabytes. At the bound a window stops growing: that tenant's
	// uploads slow down, its neighbours' do not.
	MaxTenantH3WindowGrowth = 32 << 20
	// H3HandshakeTimeout bounds a QUIC handshake.
	H3HandshakeTimeout = 5 * time.Second
	// H3RetryAbove is how many handshakes may be in flight on one UDP
	// socket before new clients must prove their address with a Retry
	// (RFC 9000 section 8.1.2): above it, a spoofed-source flood costs
	// the host one stateless Retry per Initial, no connection state.
	H3RetryAbove = 64
	// h3CodeNoError is H3_NO_ERROR.
	h3CodeNoError = 0x100
)

// AltSvcMaxAge is the ma= of the Alt-Svc field that advertises HTTP/3.
const AltSvcMaxAge = 86400

// errH3Refused refuses a QUIC connection at its first packet (quic-go
// answers CONNECTION_REFUSED); the reason went to the metrics.
var errH3Refused = errors.New("proxy: quic connection refused")

// h3Socket serves HTTP/3 on the UDP port of an https listener's socket.
type h3Socket struct {
	s  *socket
	h  QUICHandler
	pc h3UDP
	tr *quic.Transport
	// ln returns connections once their client's transport parameters
	// are in (before the handshake completes), so that 0-RTT requests
	// are served; acceptLoop holds the others until it completes.
	ln *quic.EarlyListener
	// reading is the listener quicConfig read for the connection it
	// configures, which admit takes up (see h3Reading).
	reading atomic.Pointer[h3Reading]
	// afterQUICConfig, when set, runs after quicConfig read the
	// listener (tests change the listener there).
	afterQUICConfig atomic.Pointer[func()]
	// handshakes counts the QUIC handshakes in flight.
	handshakes atomic.Int64
	// retryAbove is H3RetryAbove (tests lower it).
	retryAbove atomic.Int64
	// opened is when the port was bound.
	opened time.Time

	mu     sync.Mutex
	conns  map[*h3Conn]struct{}
	closed bool
}

// h3Conn is one QUIC connection in service.
type h3Conn struct {
	c      *quic.Conn
	lb     string
	ctx    context.Context
	cancel context.CancelFunc
	// active counts its requests in progress.
	active atomic.Int64
}

type h3ConnKey struct{}

// h3Admitted is what ConnContext admitted: the listener the connection
// is decided by and what undoes the charges.
type h3Admitted struct {
	// l is the one reading of the listener that every decision about the
	// connection takes: its quic.Config (idle timeout, window charged to
	// the tenant, 0-RTT), its admission, its TLS configuration and
	// whether its early data is accepted and charged. A listener changed
	// while the connection is set up changes the next connection.
	l *ListenerSnapshot
	// early is whether the connection may accept 0-RTT: the quic.Config
	// of the same reading allowed it (the listener has http3ZeroRtt).
	early bool
	hs    sync.Once
	done  func()
}

// h3Reading hands the listener that quicConfig read for a client's first
// Initial to admit: quic-go asks quic.Config.GetConfigForClient and then
// Transport.ConnContext, with the same ClientInfo, on the goroutine that
// reads the socket's Initials, one connection after the other.
type h3Reading struct {
	info *quic.ClientInfo
	l    *ListenerSnapshot
}

// take returns the listener quicConfig read for info, and whether it did:
// when it did not (quic-go asked in another order), admit reads the
// listener itself and the connection rejects 0-RTT, which its quic.Config
// might not have allowed.
func (hs *h3Socket) take(info *quic.ClientInfo) (*ListenerSnapshot, bool) {
	if r := hs.reading.Swap(nil); r != nil && r.info == info {
		return r.l, true
	}
	return hs.listener(), false
}

// openH3 binds the UDP port of s's key (or, with Config.Steer, steers
// it to tenant's shared socket) and serves HTTP/3 on it.
func (p *Proxy) openH3(s *socket, h QUICHandler, tenant string) (*h3Socket, error) {
	k := s.key
	hs := &h3Socket{s: s, h: h, conns: map[*h3Conn]struct{}{}, opened: time.Now()}
	if p.steering != nil && k.Space == "" {
		c := newH3SteeredConn(p, k, tenant)
		if err := p.steerUDP(c.d, tenant); err != nil {
			return nil, fmt.Errorf("steer udp %s: %w", k.Addr, err)
		}
		hs.pc = c
	} else {
		lc := net.ListenConfig{Control: freebind.Control}
		var c net.PacketConn
		err := p.inSpace(k, func() (err error) {
			c, err = lc.ListenPacket(context.Background(), "udp"+family(k), k.Addr.String())
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bind udp %s: %w", k.Addr, err)
		}
		hs.pc = newBoundH3(c.(*net.UDPConn))
	}
	hs.retryAbove.Store(H3RetryAbove)
	hs.tr = &quic.Transport{
		Conn:                  newH3PacketConn(hs.pc, hs),
		ConnectionIDGenerator: h3ConnIDs{hs},
		VerifySourceAddress:   func(net.Addr) bool { return hs.handshakes.Load() >= hs.retryAbove.Load() },
		ConnContext:           hs.admit,
	}
	if ks, ok := h.(QUICKeys); ok {
		reset, token := ks.QUICKeys()
		hs.tr.StatelessResetKey, hs.tr.TokenGeneratorKey = &reset, &token
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"h3"}, GetConfigForClient: hs.tlsConfig}
	qc := &quic.Config{
		HandshakeIdleTimeout:           H3HandshakeTimeout,
		MaxIdleTimeout:                 30 * time.Second,
		MaxIncomingStreams:             H3MaxStreams,
		MaxIncomingUniStreams:          H3MaxUniStreams,
		InitialStreamReceiveWindow:     64 << 10,
		MaxStreamReceiveWindow:         H3StreamWindow,
		InitialConnectionReceiveWindow: H3InitialConnWindow,
		MaxConnectionReceiveWindow:     H3ConnWindow,
		Allow0RTT:                      false,
		GetConfigForClient:             hs.quicConfig,
	}
	var err error
	hs.ln, err = hs.tr.ListenEarly(tlsConf, qc)
	if err != nil {
		hs.pc.Close()
		return nil, fmt.Errorf("http3: listen %s: %w", k.Addr, err)
	}
	s.p.wg.Go(hs.acceptLoop)
	return hs, nil
}

// listener is the https listener in service on the socket, nil when it
// does not serve HTTP/3 now.
func (hs *h3Socket) listener() *ListenerSnapshot {
	l := hs.s.p.current.Load().listener(hs.s.key)
	if l == nil || !l.HTTP3 {
		return nil
	}
	return l
}

// tlsConfig is the QUIC TLS configuration for a ClientHello of the
// listener its connection was admitted on, after the admission of its
// own GetConfigForClient (the tenant's handshake CPU budget), which
// crypto/tls asks only of the first. quic-go starts the handshake with
// the connection's context, which carries what admit decided.
func (hs *h3Socket) tlsConfig(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	ad, _ := hello.Context().Value(h3ConnKey{}).(*h3Admitted)
	if ad == nil || ad.l == nil {
		return nil, errH3Refused
	}
	l := ad.l
	cfg := hs.h.QUICConfig(l.Listener)
	if cfg == nil {
		return nil, errH3Refused
	}
	if cfg.GetConfigForClient != nil {
		c, err := cfg.GetConfigForClient(hello)
		if err != nil {
			return nil, err
		}
		if c != nil {
			cfg = c
		}
	}
	if ad.early && offersEarlyData(hello) {
		return hs.earlyTLS(cfg, ad), nil
	}
	return cfg, nil
}

// quicConfig reads the listener for a new connection (the reading admit
// and the TLS configuration take up) and takes its idle timeout and
// 0-RTT from it.
func (hs *h3Socket) quicConfig(info *quic.ClientInfo) (*quic.Config, error) {
	l := hs.listener()
	if l == nil {
		hs.reading.Store(nil)
		return nil, errH3Refused
	}
	hs.reading.Store(&h3Reading{info: info, l: l})
	if f := hs.afterQUICConfig.Load(); f != nil {
		(*f)()
	}
	w := &h3Window{t: hs.s.p.tenantBudget(l.Tenant), limit: hs.s.p.cfg.Limits.H3WindowGrowthPerTenant, lb: l.LB, name: l.Name}
	if w.limit <= 0 {
		w.limit = MaxTenantH3WindowGrowth
	}
	return &quic.Config{
		HandshakeIdleTimeout:           H3HandshakeTimeout,
		MaxIdleTimeout:                 max(l.Limits.IdleTimeout, time.Second),
		MaxIncomingStreams:             H3MaxStreams,
		MaxIncomingUniStreams:          H3MaxUniStreams,
		InitialStreamReceiveWindow:     64 << 10,
		MaxStreamReceiveWindow:         H3StreamWindow,
		InitialConnectionReceiveWindow: H3InitialConnWindow,
		MaxConnectionReceiveWindow:     H3ConnWindow,
		AllowConnectionWindowIncrease:  w.grow,
		Allow0RTT:                      l.HTTP3ZeroRTT,
	}, nil
}

// admit charges a new QUIC connection, at its first Initial and before
// any handshake work, as a TCP connection is charged at accept: the
// listener's source ranges and connection rate, its connection bound,
// and its tenant's (and the host's) connections and descriptors. A
// refusal costs the client a CONNECTION_REFUSED and its neighbours
// nothing. The charges end with the connection (or its failed handshake).
// It charges the listener quicConfig read for the connection, and keeps
// that reading for the TLS configuration and the 0-RTT decision.
func (hs *h3Socket) admit(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	p := hs.s.p
	l, read := hs.take(info)
	if l == nil {
		return nil, errH3Refused
	}
	ua, _ := info.RemoteAddr.(*net.UDPAddr)
	if ua == nil {
		return nil, errH3Refused
	}
	a := ua.AddrPort().Addr().Unmap()
	if !p.admitSourceAddr(l, a) || !p.admitConnRateAddr(l, a) {
		return nil, errH3Refused
	}
	if n := hs.s.active.Add(1); n > int64(l.Limits.MaxConnections) {
		hs.s.active.Add(-1)
		p.metrics.ConnRefused(l.LB, l.Name, RefusedListenerLimit)
		return nil, errH3Refused
	}
	tenantDone, reason := p.admitTenant(l.Tenant, l.Limits.TenantConnections)
	if tenantDone == nil {
		hs.s.active.Add(-1)
		p.metrics.ConnRefused(l.LB, l.Name, reason)
		return nil, errH3Refused
	}
	hs.handshakes.Add(1)
	ad := &h3Admitted{l: l, early: read && l.HTTP3ZeroRTT}
	ad.done = func() {
		hs.handshakeDone(ad)
		hs.s.active.Add(-1)
		tenantDone()
	}
	context.AfterFunc(ctx, ad.done)
	return context.WithValue(ctx, h3ConnKey{}, ad), nil
}

// handshakeDone ends a connection's handshake count once.
func (hs *h3Socket) handshakeDone(ad *h3Admitted) {
	if ad == nil {
		return
	}
	ad.hs.Do(func() { hs.handshakes.Add(-1) })
}

// acceptLoop serves each connection whose handshake completed, or whose
// 0-RTT was accepted.
func (hs *h3Socket) acceptLoop() {
	for {
		c, err := hs.ln.Accept(context.Background())
		if err != nil {
			return
		}
		hs.s.p.wg.Go(func() { hs.serve(c) })
	}
}

// serve serves one connection once awaitHandshake lets it.
func (hs *h3Socket) serve(c *quic.Conn) {
	p := hs.s.p
	ad, _ := c.Context().Value(h3ConnKey{}).(*h3Admitted)
	if !hs.awaitHandshake(c, ad) {
		return
	}
	l := hs.listener()
	if l == nil {
		_ = c.CloseWithError(h3CodeNoError, "")
		return
	}
	hc := &h3Conn{c: c, lb: l.LB}
	hc.ctx, hc.cancel = context.WithCancel(context.Background())
	hc.ctx = context.WithValue(hc.ctx, h3ActiveKey{}, &hc.active)
	hs.mu.Lock()
	if hs.closed {
		hs.mu.Unlock()
		hc.cancel()
		_ = c.CloseWithError(h3CodeNoError, "")
		return
	}
	hs.conns[hc] = struct{}{}
	hs.mu.Unlock()
	if p.handover.handingOver(hs.s.key.Addr.Addr()) {
		hc.cancel() // it gets a GOAWAY at once
	}
	start := time.Now()
	p.metrics.ConnOpened(l.LB, l.Name)
	hs.h.ServeQUIC(hc.ctx, c, p.currentFunc(hs.s.key, l.LB))
	_ = c.CloseWithError(h3CodeNoError, "")
	hs.mu.Lock()
	delete(hs.conns, hc)
	hs.mu.Unlock()
	hc.cancel()
	p.metrics.ConnClosed(l.LB, l.Name, time.Since(start))
}

// drain tells the matching connections to finish (GOAWAY, their requests
// end, then CONNECTION_CLOSE with H3_NO_ERROR) and closes them after the
// drain timeout.
func (hs *h3Socket) drain(match func(lb string) bool) {
	hs.mu.Lock()
	var cs []*h3Conn
	for c := range hs.conns {
		if match(c.lb) {
			cs = append(cs, c)
		}
	}
	hs.mu.Unlock()
	if len(cs) == 0 {
		return
	}
	for _, c := range cs {
		c.cancel()
	}
	time.AfterFunc(hs.s.p.cfg.DrainTimeout, func() {
		for _, c := range cs {
			_ = c.c.CloseWithError(h3CodeNoError, "")
		}
	})
}

// count is how many connections are in service.
func (hs *h3Socket) count() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.conns)
}

// close stops accepting, drains the connections and frees the port once
// they ended (or the drain timeout passed).
func (hs *h3Socket) close() {
	hs.mu.Lock()
	hs.closed = true
	hs.mu.Unlock()
	_ = hs.ln.Close()
	hs.drain(func(string) bool { return true })
	p := hs.s.p
	p.wg.Go(func() {
		deadline := time.Now().Add(p.cfg.DrainTimeout + time.Second)
		for hs.count() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		_ = hs.tr.Close()
		_ = hs.pc.Close()
	})
}

// syncH3 opens or closes the HTTP/3 side of an https listener's socket
// as the listener in service asks: a change of anything else keeps the
// QUIC connections (they read the listener in service per request). A
// UDP port that cannot be bound is recorded (status, observation, no
// Alt-Svc) and tried again by the bind retry timer, with its backoff,
// until it is bound or the listener no longer asks for it. It reports
// whether it opened the port.
func (p *Proxy) syncH3(s *socket, l *snapshot.Listener) bool {
	h, ok := p.cfg.HTTP.(QUICHandler)
	want := ok && l.Protocol == snapshot.ProtoHTTPS && l.HTTP3
	switch {
	case want && s.h3 == nil:
		hs, err := p.openH3(s, h, l.Tenant)
		if err != nil {
			if p.h3Failed(s.key, err) {
				p.log.Warn("http3 not served; tried again with backoff", "lb", l.LB, "listener", l.Name, "error", err)
				p.failedAnew = true
			}
			return false
		}
		if p.h3Failed(s.key, nil) {
			p.log.Info("http3 served after failing", "lb", l.LB, "listener", l.Name)
		}
		s.h3 = hs
		p.h3Flag(s.key).Store(true)
		return true
	case !want && s.h3 != nil:
		p.h3Flag(s.key).Store(false)
		s.h3.close()
		s.h3 = nil
		p.h3Failed(s.key, nil)
	case !want:
		p.h3Failed(s.key, nil)
	case s.h3 != nil:
		// Connections of a former owner of the address drain.
		s.h3.drain(func(lb string) bool { return lb != l.LB })
	}
	return false
}

// h3Flag returns the flag that says whether k's HTTP/3 port is served
// (under p.mu).
func (p *Proxy) h3Flag(k snapshot.Key) *atomic.Bool {
	if p.h3up == nil {
		p.h3up = map[snapshot.Key]*atomic.Bool{}
	}
	f := p.h3up[k]
	if f == nil {
		f = new(atomic.Bool)
		p.h3up[k] = f
	}
	return f
}

// h3Failed records (err not nil) or clears why the HTTP/3 port of
// listener k is not served, for h3Problem and the retry timer. It reports
// whether that changed whether k is failing.
func (p *Proxy) h3Failed(k snapshot.Key, err error) bool {
	p.h3mu.Lock()
	defer p.h3mu.Unlock()
	_, was := p.h3failed[k]
	if err == nil {
		delete(p.h3failed, k)
		return was
	}
	if p.h3failed == nil {
		p.h3failed = map[snapshot.Key]string{}
	}
	p.h3failed[k] = err.Error()
	return !was
}

// h3Missing returns the keys of the listeners whose HTTP/3 port is not
// served though they ask for it.
func (p *Proxy) h3Missing() map[snapshot.Key]bool {
	p.h3mu.Lock()
	defer p.h3mu.Unlock()
	out := make(map[snapshot.Key]bool, len(p.h3failed))
	for k := range p.h3failed {
		out[k] = true
	}
	return out
}

// h3Problem says why an https listener with http3 does not serve HTTP/3
// on this host ("" when it does, or does not ask to).
func (p *Proxy) h3Problem(l *snapshot.Listener) string {
	if !l.HTTP3 || l.Protocol != snapshot.ProtoHTTPS {
		return ""
	}
	if _, ok := p.cfg.HTTP.(QUICHandler); !ok {
		return "this host's L7 handler does not serve HTTP/3; only HTTP/1.1 and HTTP/2 are served"
	}
	p.h3mu.Lock()
	defer p.h3mu.Unlock()
	if why, ok := p.h3failed[l.Key]; ok {
		return "cannot serve HTTP/3 on udp " + l.Key.Addr.String() + ": " + why + "; retried with backoff, Alt-Svc not advertised meanwhile (free the UDP port or remove http3)"
	}
	return ""
}

// altSvc is the Alt-Svc value of an https listener that serves HTTP/3.
func altSvc(port uint16) string {
	return fmt.Sprintf("h3=\":%d\"; ma=%d", port, AltSvcMaxAge)
}

// h3Addr returns the UDP address a listener's HTTP/3 is served on, for
// tests; false when it is not.
func (p *Proxy) h3Addr(k snapshot.Key) (netip.AddrPort, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sockets[k]
	if s == nil || s.h3 == nil {
		return netip.AddrPort{}, false
	}
	return s.h3.pc.LocalAddr().(*net.UDPAddr).AddrPort(), true
}

// h3Sockets returns the HTTP/3 sockets open now on the addresses in vips.
func (p *Proxy) h3Sockets(vips map[netip.Addr]bool) []*h3Socket {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*h3Socket
	for _, s := range p.sockets {
		if s.h3 != nil && vips[s.key.Addr.Addr()] {
			out = append(out, s.h3)
		}
	}
	return out
}

// goAway sends every connection a GOAWAY: its requests in progress
// finish, new ones go to a new connection.
func (hs *h3Socket) goAway() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for c := range hs.conns {
		c.cancel()
	}
}

// closeIdle closes with H3_NO_ERROR the connections without a request
// in progress (every one with force); it returns how many are left busy.
func (hs *h3Socket) closeIdle(force bool) (busy int) {
	hs.mu.Lock()
	var cs []*h3Conn
	for c := range hs.conns {
		if force || c.active.Load() == 0 {
			cs = append(cs, c)
		} else {
			busy++
		}
	}
	hs.mu.Unlock()
	for _, c := range cs {
		c.cancel()
		_ = c.c.CloseWithError(h3CodeNoError, "")
	}
	return busy
}

// h3Handshakes is how many QUIC handshakes are in flight on k's socket.
func (p *Proxy) h3Handshakes(k snapshot.Key) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sockets[k]; s != nil && s.h3 != nil {
		return s.h3.handshakes.Load()
	}
	return 0
}

// observeH3 is the observation of an https listener's HTTP/3 port (the
// same listener index, protocol "http3"), under p.mu.
func (p *Proxy) observeH3(l *snapshot.Listener, s *socket) *pb.ListenerObservation {
	lo := &pb.ListenerObservation{LoadBalancer: l.LB, Index: uint32(l.Index), Address: l.Key.Addr.String(), Protocol: "http3"}
	if s != nil && s.h3 != nil {
		lo.Bound, lo.Since = true, timestamppb.New(s.h3.opened)
	} else if why := p.h3Problem(l); why != "" {
		lo.Error = why
	} else {
		lo.Error = "not opened"
	}
	return lo
}

// h3Window charges what one QUIC connection grows its receive window by
// to its tenant (MaxTenantH3WindowGrowth), from quic-go's flow controller
// (quic.Config.AllowConnectionWindowIncrease, on the connection's own
// goroutine), and gives it back when the connection ends. A growth
// refused is counted against the listener (RefusedTenantWindow).
type h3Window struct {
	t        *tenantBudget
	limit    int64
	lb, name string
	charged  atomic.Int64
	once     sync.Once
	ended    atomic.Bool
}

// grow allows the window to grow by delta while the tenant's growth stays
// within its bound.
func (w *h3Window) grow(c *quic.Conn, delta uint64) bool {
	w.once.Do(func() { context.AfterFunc(c.Context(), w.end) })
	d := int64(delta)
	if w.ended.Load() {
		return false
	}
	if !takeUnderBy(&w.t.h3grown, d, w.limit) {
		w.t.h3stopped.Add(1)
		w.t.p.metrics.ConnRefused(w.lb, w.name, RefusedTenantWindow)
		return false
	}
	w.charged.Add(d)
	if w.ended.Load() {
		// The connection ended meanwhile: end gave back what it saw.
		w.t.h3grown.Add(-w.charged.Swap(0))
	}
	return true
}

// end gives back what the connection's window grew by.
func (w *h3Window) end() {
	w.ended.Store(true)
	w.t.h3grown.Add(-w.charged.Swap(0))
}
