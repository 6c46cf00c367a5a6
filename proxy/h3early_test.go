package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// gatedConn is a client's UDP socket whose reads wait until open is
// called: a client that dials on it sends its first flight (ClientHello
// and 0-RTT packets) and cannot finish its handshake until then. It
// counts the Retry packets it reads.
type gatedConn struct {
	c       *net.UDPConn
	gate    chan struct{}
	done    chan struct{}
	kicked  chan struct{} // a read deadline in the past was set
	once    sync.Once
	kick    sync.Once
	opened  sync.Once
	retries atomic.Int64
	// control is closed once the client sent its HTTP/3 control stream
	// in 0-RTT (controlSent).
	control     chan struct{}
	controlOnce sync.Once
}

func newGatedConn(t testing.TB, open bool) *gatedConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedConn{c: c, gate: make(chan struct{}), done: make(chan struct{}), kicked: make(chan struct{}), control: make(chan struct{})}
	if open {
		g.open()
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func (g *gatedConn) open() { g.opened.Do(func() { close(g.gate) }) }

func (g *gatedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case <-g.gate:
	case <-g.done:
		return 0, nil, net.ErrClosed
	case <-g.kicked:
		return 0, nil, os.ErrDeadlineExceeded
	}
	n, a, err := g.c.ReadFrom(b)
	if n > 0 && b[0]&0xf0 == 0xf0 { // long header, type Retry
		g.retries.Add(1)
	}
	return n, a, err
}

func (g *gatedConn) WriteTo(b []byte, a net.Addr) (int, error) { return g.c.WriteTo(b, a) }
func (g *gatedConn) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.c.Close()
}
func (g *gatedConn) LocalAddr() net.Addr           { return g.c.LocalAddr() }
func (g *gatedConn) SetDeadline(t time.Time) error { return g.c.SetDeadline(t) }

// SetReadDeadline with a time past ends a read held at the gate too, as
// quic-go's Transport.Close expects of it.
func (g *gatedConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		g.kick.Do(func() { close(g.kicked) })
	}
	return g.c.SetReadDeadline(t)
}
func (g *gatedConn) SetWriteDeadline(t time.Time) error { return g.c.SetWriteDeadline(t) }

// controlSent is the qlog trace of a client connection dialled over g:
// it closes g.control once a 0-RTT packet carried the client's HTTP/3
// control stream (stream 2, its SETTINGS). http3.ClientConn opens that
// stream on a goroutine of its own; quic-go's client reads the server's
// transport parameters as it opens a stream without a lock
// (quic-go#4303), and a control stream opened after a 0-RTT rejection
// fails and closes the connection. Waiting for it before opening the
// gate orders both before the client reads the server's handshake.
type controlSent struct{ g *gatedConn }

func (c controlSent) AddProducer() qlogwriter.Recorder { return c }
func (c controlSent) RecordEvent(ev qlogwriter.Event) {
	ps, ok := ev.(qlog.PacketSent)
	if !ok || ps.Header.PacketType != qlog.PacketType0RTT {
		return
	}
	for _, f := range ps.Frames {
		if sf, ok := f.Frame.(*qlog.StreamFrame); ok && sf.StreamID == 2 {
			c.g.controlOnce.Do(func() { close(c.g.control) })
		}
	}
}
func (controlSent) Close() error { return nil }

// waitControl waits until the client's control stream went out in 0-RTT.
func (g *gatedConn) waitControl(t testing.TB) {
	t.Helper()
	select {
	case <-g.control:
	case <-time.After(15 * time.Second):
		t.Fatal("the client's control stream was not sent in 0-RTT")
	}
}

// ticketCache is a client's session cache that counts the tickets put
// in it.
type ticketCache struct {
	tls.ClientSessionCache
	puts atomic.Int64
}

func (c *ticketCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.puts.Add(1)
	}
	c.ClientSessionCache.Put(key, cs)
}

// resumingClient is a quic-go client that keeps its session tickets.
type resumingClient struct {
	t      *testing.T
	target *net.UDPAddr
	cache  *ticketCache
	tls    *tls.Config
	qconf  *quic.Config
}

func newResumingClient(t *testing.T, target string) *resumingClient {
	cache := &ticketCache{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	return &resumingClient{t: t, target: net.UDPAddrFromAddrPort(mustAddrPort(t, target)), cache: cache,
		tls:   &tls.Config{InsecureSkipVerify: true, ServerName: "gw.acme.example", NextProtos: []string{http3.NextProtoH3}, ClientSessionCache: cache},
		qconf: &quic.Config{HandshakeIdleTimeout: 10 * time.Second}}
}

// dial connects over g (0-RTT when early and the client holds a ticket
// that allows it) and returns the connection and an HTTP/3 client on it.
// An early connection is traced by controlSent (g.waitControl).
func (rc *resumingClient) dial(g *gatedConn, early bool) (*quic.Conn, *http3.ClientConn) {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := quic.Dial
	if early {
		dial = quic.DialEarly
	}
	qconf := rc.qconf
	if early {
		qconf = qconf.Clone()
		qconf.Tracer = func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return controlSent{g} }
	}
	c, err := dial(ctx, g, rc.target, rc.tls, qconf)
	if err != nil {
		rc.t.Fatalf("dial (early %v): %v", early, err)
	}
	rc.t.Cleanup(func() { _ = c.CloseWithError(0, "") })
	return c, (&http3.Transport{}).NewClientConn(c)
}

// waitTicket waits until the client holds more than n tickets.
func (rc *resumingClient) waitTicket(n int64) {
	rc.t.Helper()
	waitFor(rc.t, 10*time.Second, "a session ticket", func() bool { return rc.cache.puts.Load() > n })
}

// prime makes a full connection, a request on it, and waits for its
// session ticket.
func (rc *resumingClient) prime() {
	rc.t.Helper()
	n := rc.cache.puts.Load()
	c, cc := rc.dial(newGatedConn(rc.t, true), false)
	resp, err := h3Get(cc, http.MethodGet, "/prime")
	if err != nil || resp.StatusCode != 200 {
		rc.t.Fatalf("priming request: %v %v", resp, err)
	}
	rc.waitTicket(n)
	_ = c.CloseWithError(0, "")
}

// h3Get sends a request without a body on cc (http3.MethodGet0RTT sends
// it at once, in 0-RTT when the handshake is not complete) and reads
// the response.
func h3Get(cc *http3.ClientConn, method, path string) (*http.Response, error) {
	req, err := http.NewRequest(method, "https://gw.acme.example"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cc.RoundTrip(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
	}
	return resp, err
}

// getEarly sends a GET in 0-RTT on c, dialled over g whose reads are
// held: the request stream is opened before the client can take the
// server's handshake (quic-go's client races opening a stream in 0-RTT
// with installing the server's transport parameters, quic-go#4303).
// ready runs before g is opened. When the server rejected the early
// data (quic-go's client leaves the retry to its caller), it checks that
// the connection went on resumed without 0-RTT and sends the GET again
// on a new connection; rejected says so.
//
// The response is read only when the 0-RTT was accepted. On a rejected
// attempt quic-go's client (v0.65.0) ends the streams of the attempt
// without marking a stream whose FIN was queued as ended, and the
// ReadResponse that fails with Err0RTTRejected calls CancelWrite on it:
// a RESET_STREAM for stream 0 goes out in 1-RTT, where stream 0 is not
// open on the client's side. The server takes it for the client's
// stream 0 and resets its side too, as it must to free the stream; the
// client then closes its connection with "STREAM_STATE_ERROR (local):
// peer attempted to open stream 0", which NextConnection returns when
// the close comes first (on a loaded machine).
func (rc *resumingClient) getEarly(g *gatedConn, c *quic.Conn, cc *http3.ClientConn, path string, ready func()) (resp *http.Response, rejected bool, err error) {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		rc.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://gw.acme.example"+path, http.NoBody)
	if err := str.SendRequestHeader(req); err != nil {
		rc.t.Fatal(err)
	}
	_ = str.Close()
	ready()
	g.waitControl(rc.t)
	g.open()
	select {
	case <-c.HandshakeComplete():
	case <-ctx.Done():
		return nil, false, fmt.Errorf("handshake: %w", ctx.Err())
	}
	if c.Context().Err() == nil && !c.ConnectionState().Used0RTT {
		return rc.afterEarly(c, path, nil, quic.Err0RTTRejected)
	}
	resp, err = str.ReadResponse()
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
	}
	return rc.afterEarly(c, path, resp, err)
}

// afterEarly is getEarly once the GET sent in 0-RTT was answered (resp)
// or failed (err).
func (rc *resumingClient) afterEarly(c *quic.Conn, path string, resp *http.Response, err error) (*http.Response, bool, error) {
	if !errors.Is(err, quic.Err0RTTRejected) {
		return resp, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next, err := c.NextConnection(ctx)
	if err != nil {
		return nil, true, err
	}
	if st := next.ConnectionState(); st.Used0RTT || !st.TLS.DidResume {
		return nil, true, fmt.Errorf("after the rejection: used 0-RTT %v, resumed %v", st.Used0RTT, st.TLS.DidResume)
	}
	_, again := rc.dial(newGatedConn(rc.t, true), false)
	resp, err = h3Get(again, http.MethodGet, path)
	return resp, true, err
}

// h3Statuses records the statuses of the HTTP/3 requests the engine
// answered.
type h3Statuses struct {
	mu  sync.Mutex
	got []int
}

func (s *h3Statuses) Request(st l7.RequestStats) {
	if st.HTTP3 {
		s.mu.Lock()
		s.got = append(s.got, st.Status)
		s.mu.Unlock()
	}
}
func (*h3Statuses) Conn(*l7.ConnInfo, bool) {}

func (s *h3Statuses) count(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.got {
		if g == status {
			n++
		}
	}
	return n
}

// startH3Early serves an https listener with http3 (and http3ZeroRtt
// when zeroRTT) whose one route goes to the returned member.
func startH3Early(t *testing.T, cfg Config, zeroRTT bool) (*Proxy, string, *routingBackend, *h3Statuses, *pb.LoadBalancer) {
	t.Helper()
	main := startRoutingBackend(t, "main")
	rec := &h3Statuses{}
	srv := l7.New(l7.Config{Metrics: rec})
	t.Cleanup(func() { srv.Close() })
	cfg.HTTP = newH3Term(t, srv)
	p, _ := newProxy(t, cfg)
	port := freePort(t)
	lb := h3LB(port, map[string]*routingBackend{"main": main})
	lb.Routes = lb.Routes[:1]
	lb.Pools = map[string]*pb.BackendPool{"main": lb.Pools["main"]}
	lb.Listeners[0].Http3ZeroRtt = zeroRTT
	update(t, p, lb)
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	return p, vipAddr("127.0.0.2", port), main, rec, lb
}

// nextSeen returns the next request the member saw.
func nextSeen(t *testing.T, rb *routingBackend) seen {
	t.Helper()
	select {
	case s := <-rb.got:
		return s
	case <-time.After(15 * time.Second):
		t.Fatal("the member saw no request")
		return seen{}
	}
}

// TestHTTP3ZeroRTTSafeMethodsOnly: on a listener with http3ZeroRtt, a
// resuming client whose handshake cannot complete (its reads are held)
// sends a GET and a POST in 0-RTT. The GET reaches the member with
// Early-Data: 1 before the handshake completed (it was served from early
// data) and is answered 200; the POST never reaches the member and is
// answered 425. Once the handshake completed, a POST on the same
// connection is served, without Early-Data.
func TestHTTP3ZeroRTTSafeMethodsOnly(t *testing.T) {
	t.Parallel()
	p, target, main, rec, _ := startH3Early(t, Config{}, true)
	rc := newResumingClient(t, target)
	rc.prime()
	if s := nextSeen(t, main); s.Path != "/prime" || s.Header.Get("Early-Data") != "" {
		t.Fatalf("priming request seen as %+v", s)
	}

	g := newGatedConn(t, false)
	c, cc := rc.dial(g, true) // returns at once only when 0-RTT is on
	got := make(chan *http.Response, 1)
	errs := make(chan error, 2)
	go func() {
		resp, err := h3Get(cc, http3.MethodGet0RTT, "/early")
		if err != nil {
			errs <- err
			return
		}
		got <- resp
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	post, _ := http.NewRequest(http.MethodPost, "https://gw.acme.example/early-post", http.NoBody)
	if err := str.SendRequestHeader(post); err != nil {
		t.Fatal(err)
	}
	_ = str.Close()

	s := nextSeen(t, main)
	if s.Method != "GET" || s.Path != "/early" || s.Header.Get("Early-Data") != "1" {
		t.Fatalf("the member saw %s %s with Early-Data %q, want GET /early with 1", s.Method, s.Path, s.Header.Get("Early-Data"))
	}
	waitFor(t, 15*time.Second, "the POST answered 425", func() bool { return rec.count(http.StatusTooEarly) == 1 })
	select {
	case <-c.HandshakeComplete():
		t.Fatal("the handshake completed while the client's reads were held")
	default:
	}
	g.waitControl(t)
	g.open()

	select {
	case resp := <-got:
		if resp.StatusCode != 200 {
			t.Errorf("GET in 0-RTT: status %d", resp.StatusCode)
		}
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(15 * time.Second):
		t.Fatal("no answer to the GET")
	}
	resp, err := str.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooEarly {
		t.Errorf("POST in 0-RTT: status %d, want 425", resp.StatusCode)
	}
	if !c.ConnectionState().Used0RTT {
		t.Error("the client's 0-RTT was not accepted")
	}
	if n := p.h3Limits("acme").earlyAccepted.Load(); n != 1 {
		t.Errorf("%d 0-RTT connections counted, want 1", n)
	}

	// After the handshake: a POST is served, nothing is early.
	req, _ := http.NewRequest(http.MethodPost, "https://gw.acme.example/late-post", strings.NewReader("x"))
	resp, err = cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s = nextSeen(t, main)
	if resp.StatusCode != 200 || s.Method != "POST" || s.Path != "/late-post" || s.Header.Get("Early-Data") != "" {
		t.Errorf("POST after the handshake: status %d, the member saw %s %s with Early-Data %q", resp.StatusCode, s.Method, s.Path, s.Header.Get("Early-Data"))
	}
	if n := main.n.Load(); n != 3 {
		t.Errorf("the member saw %d requests, want 3 (the POST in 0-RTT never reached it)", n)
	}
}

// TestHTTP3ZeroRTTOffWithoutField: a client holds a ticket that allows
// early data (from the listener while it had http3ZeroRtt); once the
// field is removed, its 0-RTT is rejected: the GET it sent in 0-RTT is
// sent again after the handshake and reaches the member without
// Early-Data.
func TestHTTP3ZeroRTTOffWithoutField(t *testing.T) {
	t.Parallel()
	p, target, main, _, lb := startH3Early(t, Config{}, true)
	rc := newResumingClient(t, target)
	rc.prime()
	nextSeen(t, main)
	off := clone(lb)
	off.Listeners[0].Http3ZeroRtt = false
	update(t, p, off)

	g := newGatedConn(t, false)
	c, cc := rc.dial(g, true)
	resp, rejected, err := rc.getEarly(g, c, cc, "/after", func() {})
	if err != nil {
		t.Fatal(err)
	}
	s := nextSeen(t, main)
	if !rejected || resp.StatusCode != 200 || s.Path != "/after" || s.Header.Get("Early-Data") != "" {
		t.Errorf("0-RTT rejected %v, status %d, the member saw %s with Early-Data %q; want rejected, 200 and none", rejected, resp.StatusCode, s.Path, s.Header.Get("Early-Data"))
	}
	if n := p.h3Limits("acme").earlyAccepted.Load(); n != 0 {
		t.Errorf("%d 0-RTT connections accepted", n)
	}
}

// TestHTTP3ZeroRTTBoundedPerTenant: with a bucket of 2 0-RTT connections
// (refilled once in 1,000 s), a tenant's third resuming client has its
// 0-RTT rejected (it is served after the handshake) and counted.
func TestHTTP3ZeroRTTBoundedPerTenant(t *testing.T) {
	t.Parallel()
	p, target, main, _, _ := startH3Early(t, Config{H3EarlyRate: 0.001, H3EarlyBurst: 2}, true)
	rc := newResumingClient(t, target)
	rc.prime()
	nextSeen(t, main)
	acct := p.h3Limits("acme")
	for i, want := range []bool{true, true, false} {
		n := rc.cache.puts.Load()
		// The client's reads are held until the server has decided on
		// its 0-RTT and, when accepted, served the GET from early data:
		// a client that finished its handshake first would send the GET
		// after it, not in 0-RTT.
		g := newGatedConn(t, false)
		accepted, refused := acct.earlyAccepted.Load(), acct.earlyRejected.Load()
		c, cc := rc.dial(g, true)
		var s seen
		early := false
		resp, rejected, err := rc.getEarly(g, c, cc, "/bounded", func() {
			waitFor(t, 15*time.Second, "the server's decision on 0-RTT", func() bool {
				return acct.earlyAccepted.Load() > accepted || acct.earlyRejected.Load() > refused
			})
			if early = acct.earlyAccepted.Load() > accepted; early {
				s = nextSeen(t, main)
			}
		})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("connection %d: %v %v", i, resp, err)
		}
		if !early {
			s = nextSeen(t, main)
		}
		if rejected == want || (s.Header.Get("Early-Data") == "1") != want {
			t.Errorf("connection %d: 0-RTT rejected %v, Early-Data %q; want 0-RTT accepted %v", i, rejected, s.Header.Get("Early-Data"), want)
		}
		rc.waitTicket(n)
		_ = c.CloseWithError(0, "")
	}
	// The third client's GET sent again on a new connection resumes
	// without offering early data (quic.Dial): nothing is charged for it,
	// though its ticket allows 0-RTT.
	if a, r := acct.earlyAccepted.Load(), acct.earlyRejected.Load(); a != 2 || r != 1 {
		t.Errorf("0-RTT accepted %d, rejected %d; want 2 and 1", a, r)
	}
}

// TestHTTP3ZeroRTTOneReadingPerConnection: the listener changes between
// the QUIC layer's reading of it for a new connection (quicConfig, which
// sets Allow0RTT) and the rest of the connection's setup. The connection
// is decided by that one reading: with http3ZeroRtt when it was read,
// its 0-RTT is accepted and charged to the tenant; without, rejected and
// not charged. Before, the TLS layer read the listener again: 0-RTT was
// accepted uncharged in the first case, and charged though rejected in
// the second.
func TestHTTP3ZeroRTTOneReadingPerConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		read, then   bool // http3ZeroRtt at the reading, and after it
		wantAccepted bool
	}{
		{"off after the reading", true, false, true},
		{"on after the reading", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, target, main, _, lb := startH3Early(t, Config{}, true)
			rc := newResumingClient(t, target)
			rc.prime()
			nextSeen(t, main)
			at := clone(lb)
			at.Listeners[0].Http3ZeroRtt = tc.read
			update(t, p, at)
			then := clone(lb)
			then.Listeners[0].Http3ZeroRtt = tc.then
			var once sync.Once
			changed := make(chan error, 1)
			hook := func() {
				once.Do(func() {
					err := p.Update(labObjects(then), 1)
					if errors.Is(err, ErrNoChanges) {
						err = nil
					}
					changed <- err
				})
			}
			hs := h3SocketOf(t, p)
			hs.afterQUICConfig.Store(&hook)

			acct := p.h3Limits("acme")
			g := newGatedConn(t, false)
			c, cc := rc.dial(g, true)
			resp, rejected, err := rc.getEarly(g, c, cc, "/changed", func() {})
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET: %v %v", resp, err)
			}
			select {
			case err := <-changed:
				if err != nil {
					t.Fatalf("update in the hook: %v", err)
				}
			default:
				t.Fatal("the listener was not changed after the QUIC layer's reading")
			}
			if accepted := !rejected; accepted != tc.wantAccepted {
				t.Errorf("0-RTT accepted %v, want %v", accepted, tc.wantAccepted)
			}
			charged := int64(0)
			if tc.wantAccepted {
				charged = 1
			}
			if n := acct.earlyAccepted.Load(); n != charged {
				t.Errorf("%d 0-RTT connections charged to the tenant, want %d", n, charged)
			}
		})
	}
}

// h3SocketOf returns p's one HTTP/3 socket.
func h3SocketOf(t *testing.T, p *Proxy) *h3Socket {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sockets {
		if s.h3 != nil {
			return s.h3
		}
	}
	t.Fatal("no HTTP/3 socket")
	return nil
}
