package connguard

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

func TestDeriveLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		nofile uint64
		want   Limits
	}{
		{1024, Limits{Unauthenticated: 153, PerSource: 9, Authenticated: 154, Tenants: 116, PerTenant: 8}},
		{20000, Limits{Unauthenticated: 628, PerSource: 39, Authenticated: 628, Tenants: 471, PerTenant: 19}},
		{1048576, Limits{Unauthenticated: 26342, PerSource: 64, Authenticated: 26342, Tenants: 19757, PerTenant: 32}},
		{64, Limits{Unauthenticated: 129, PerSource: 8, Authenticated: 130, Tenants: 98, PerTenant: 8}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.nofile), func(t *testing.T) {
			tt.want.HandshakeTimeout, tt.want.AnonymousLifetime = DefaultHandshakeTimeout, DefaultAnonymousLifetime
			got := DeriveLimits(tt.nofile)
			if got != tt.want {
				t.Fatalf("DeriveLimits(%d) = %+v, want %+v", tt.nofile, got, tt.want)
			}
			// The API port stays within what the data plane leaves.
			if used := got.Unauthenticated + got.Authenticated; uint64(used) > (tt.nofile/10+512)/2 {
				t.Fatalf("%d connections, more than half the reserve", used)
			}
		})
	}
}

func TestSourceKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want string
	}{
		{"192.0.2.7:1234", "192.0.2.7/32"},
		{"[::ffff:192.0.2.7]:1234", "192.0.2.7/32"},
		{"[2001:db8:1:2:3:4:5:6]:1234", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:99", "2001:db8:1:2::/64"},
	}
	for _, tt := range tests {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := sourceKey(a); got != netip.MustParsePrefix(tt.want) {
			t.Errorf("sourceKey(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
}

// TestFloodIsBounded floods a guarded mTLS gRPC server with idle TCP
// connections from one loopback source and then six, and checks from the kernel's
// view (the server's socket descriptors) that no source holds more than
// PerSource and all together no more than Unauthenticated, while a
// client with an admin certificate, connecting anew for every call,
// completes each call quickly.
func TestFloodIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	lim := Limits{Unauthenticated: 48, PerSource: 16}
	s := newServer(t, lim, true)
	admin := pki.Identity{Role: pki.RoleAdmin, Name: "operator"}
	adminCalls := func(n int) (p50, p99 time.Duration) {
		t.Helper()
		var took []time.Duration
		for range n {
			start := time.Now()
			cc := s.client(t, admin, "127.0.0.1")
			if err := call(cc, 10*time.Second); err != nil {
				t.Fatalf("admin call: %v (stats %+v)", err, s.g.Stats())
			}
			took = append(took, time.Since(start))
			cc.Close()
		}
		slices.Sort(took)
		return took[len(took)/2], took[len(took)*99/100]
	}
	quiet50, quiet99 := adminCalls(10)
	f := newFlood(s.addr)
	defer f.stop()
	// One source alone reaches its bound.
	f.from(s.addr, "127.0.1.1", 100)
	waitFor(t, 20*time.Second, "one source at its bound", func() error {
		if st := s.g.Stats(); st.Refused[ReasonSource] == 0 || st.Handshaking != lim.PerSource {
			return fmt.Errorf("stats %+v", st)
		}
		if _, by := serverSockets(t, s.port); by["127.0.1.1"] != lim.PerSource {
			return fmt.Errorf("%d descriptors for its connections", by["127.0.1.1"])
		}
		return nil
	})
	// Five more reach the total bound.
	for _, src := range []string{"127.0.1.2", "127.0.1.3", "127.0.2.1", "127.0.2.2", "127.0.3.1"} {
		f.from(s.addr, src, 100)
	}
	waitFor(t, 20*time.Second, "the flood at the total bound", func() error {
		if st := s.g.Stats(); st.Refused[ReasonUnauth] == 0 || st.Handshaking != lim.Unauthenticated {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})

	// The kernel's view, sampled while the admin calls.
	sampled := make(chan struct{})
	var peakTotal, peakSource, samples int
	go func() {
		defer close(sampled)
		for i := 0; i < 40; i++ {
			total, by := serverSockets(t, s.port)
			// Admin connections are authenticated: not in the bound.
			total -= by["127.0.0.1"]
			delete(by, "127.0.0.1")
			peakTotal = max(peakTotal, total)
			for _, n := range by {
				peakSource = max(peakSource, n)
			}
			samples++
			time.Sleep(25 * time.Millisecond)
		}
	}()
	p50, p99 := adminCalls(30)
	<-sampled
	// At rest (no new connections), the descriptors match the counts.
	f.paused.Store(true)
	var held int
	var bySource map[string]int
	waitFor(t, 10*time.Second, "descriptors match the counts at rest", func() error {
		held, bySource = serverSockets(t, s.port)
		if st := s.g.Stats(); held != st.Handshaking {
			return fmt.Errorf("%d descriptors, %d counted", held, st.Handshaking)
		}
		return nil
	})
	opened := f.stop()
	st := s.g.Stats()
	t.Logf("flood opened %d connections; server held at most %d (most %d from one source) in %d samples, counted at most %d (%d), %d at rest %v; admin call (a new connection each) p50/p99 quiet %v/%v, flooded %v/%v; refused %v",
		opened, peakTotal, peakSource, samples, st.PeakUnauthenticated, st.PeakSource, held, bySource, quiet50, quiet99, p50, p99, st.Refused)
	if held > lim.Unauthenticated {
		t.Errorf("server held %d connections at rest, bound %d", held, lim.Unauthenticated)
	}
	for src, n := range bySource {
		if n > lim.PerSource {
			t.Errorf("server held %d connections from %s at rest, bound %d", n, src, lim.PerSource)
		}
	}
	// A connection is counted until its descriptor is closed, but for
	// an evicted one, which a goroutine resets after its place was taken
	// (at most MaxClosing of those), and the one the listener has just
	// accepted and is closing at a bound (an unguarded server holds
	// every connection).
	if peakTotal > lim.Unauthenticated+MaxClosing+1 || peakSource > lim.PerSource+MaxClosing+1 {
		t.Errorf("server held %d unauthenticated connections (most %d from one source), bounds %d and %d", peakTotal, peakSource, lim.Unauthenticated, lim.PerSource)
	}
	if st.PeakUnauthenticated > lim.Unauthenticated || st.PeakSource > lim.PerSource {
		t.Errorf("counted peaks %d and %d, bounds %d and %d", st.PeakUnauthenticated, st.PeakSource, lim.Unauthenticated, lim.PerSource)
	}
	// Generous for -race on a loaded 2-core machine, where the flood's
	// goroutines share the test's process with the server.
	if p99 > max(3*time.Second, 5*quiet99) {
		t.Errorf("admin call p99 %v during the flood, %v quiet", p99, quiet99)
	}
}

// TestFloodUnguarded shows what the Guard changes: without it the same
// flood holds every connection it opens.
func TestFloodUnguarded(t *testing.T) {
	s := newServer(t, Limits{}, false)
	f := newFlood(s.addr)
	defer f.stop()
	f.from(s.addr, "127.0.4.1", 100)
	f.from(s.addr, "127.0.4.2", 100)
	waitFor(t, 20*time.Second, "200 connections held", func() error {
		if n, _ := serverSockets(t, s.port); n < 200 {
			return fmt.Errorf("%d held", n)
		}
		return nil
	})
}

// TestHandshakeDeadline: a connection that sends nothing, one that stalls
// inside its ClientHello, and one through TLS without a certificate that
// never sends gRPC's preface are each closed at the handshake deadline.
//
// The deadline is 2 s: the third client's own TLS handshake must finish
// within it, and under the race detector on a loaded 2-core machine one
// took more than 500 ms (its client got EOF).
func TestHandshakeDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	s := newServer(t, Limits{HandshakeTimeout: timeout}, true)
	start := time.Now() // before every accept
	silent, err := dialFrom(context.Background(), "127.0.5.1", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	partial, err := dialFrom(context.Background(), "127.0.5.2", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer partial.Close()
	if _, err := partial.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil { // a record header and a byte
		t.Fatal(err)
	}
	raw, err := dialFrom(context.Background(), "127.0.5.3", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	noPreface := tls.Client(raw, s.clientTLS(t, pki.Identity{}))
	defer noPreface.Close()
	if err := noPreface.Handshake(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for name, c := range map[string]net.Conn{"silent": silent, "partial ClientHello": partial, "TLS without preface": noPreface} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, closed := closedWithin(c, 20*timeout)
			if open := time.Since(start); !closed || open < timeout {
				t.Errorf("%s connection: closed %v after %v, want closed after about %v", name, closed, open, timeout)
			}
		}()
	}
	wg.Wait()
	waitFor(t, 5*time.Second, "all uncounted", func() error {
		if st := s.g.Stats(); st.Handshaking+st.Anonymous != 0 || st.Refused[ReasonTimeout] != 3 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// TestAnonymousLifetime: a client without a certificate (a joining host)
// gets through the handshake and may call, counted as unauthenticated,
// and is closed at the end of its lifetime.
func TestAnonymousLifetime(t *testing.T) {
	t.Parallel()
	s := newServer(t, Limits{AnonymousLifetime: time.Second, PerSource: 2}, true)
	cc := s.client(t, pki.Identity{}, "127.0.6.1")
	if err := call(cc, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := s.g.Stats(); st.Anonymous != 1 {
		t.Fatalf("stats %+v, want one anonymous connection", st)
	}
	waitFor(t, 10*time.Second, "anonymous connection closed", func() error {
		if st := s.g.Stats(); st.Anonymous != 0 || st.Refused[ReasonLifetime] != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// TestAuthenticatedBounds: one tenant's connections beyond PerTenant and
// all tenants' beyond Tenants are refused; admin certificates still get
// the room left up to Authenticated, and no more; a closed connection
// frees its place.
func TestAuthenticatedBounds(t *testing.T) {
	t.Parallel()
	s := newServer(t, Limits{Authenticated: 6, Tenants: 4, PerTenant: 2}, true)
	tenant := func(name string) pki.Identity { return pki.Identity{Role: pki.RoleTenant, Name: name} }
	admin := pki.Identity{Role: pki.RoleAdmin, Name: "operator"}
	steps := []struct {
		id     pki.Identity
		ok     bool
		reason string
	}{
		{tenant("a"), true, ""},
		{tenant("a"), true, ""},
		{tenant("a"), false, ReasonTenant},
		{tenant("b"), true, ""},
		{tenant("b"), true, ""},
		{tenant("c"), false, ReasonTenants},
		{admin, true, ""},
		{admin, true, ""},
		{admin, false, ReasonAuthenticated},
	}
	var first func()
	for i, st := range steps {
		cc := s.client(t, st.id, "127.0.7.1")
		err := call(cc, 10*time.Second)
		if (err == nil) != st.ok {
			t.Fatalf("step %d (%s): call error %v, want ok=%v", i, st.id, err, st.ok)
		}
		if !st.ok {
			if n := s.g.Stats().Refused[st.reason]; n != 1 {
				t.Fatalf("step %d (%s): %d refused for %s, want 1 (%+v)", i, st.id, n, st.reason, s.g.Stats().Refused)
			}
			cc.Close()
		}
		if i == 0 {
			first = func() { cc.Close() }
		}
	}
	if st := s.g.Stats(); st.Tenants != 4 || st.Admin != 2 {
		t.Fatalf("stats %+v", st)
	}
	first()
	waitFor(t, 5*time.Second, "a's first connection uncounted", func() error {
		if st := s.g.Stats(); st.Tenants != 3 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if err := call(s.client(t, tenant("a"), "127.0.7.1"), 10*time.Second); err != nil {
		t.Fatalf("tenant a after closing one: %v", err)
	}
}

// TestCountedUntilClosed: a connection reset by another goroutine (an
// eviction, the end of an anonymous lifetime) while its owner closes it
// is uncounted when both Closes have returned, in either order: the
// second Close of a descriptor returns at once, maybe before the first
// has closed it.
func TestCountedUntilClosed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ownerFirst bool
		anonymous  bool // expired, not evicted
	}{
		{"evicted, owner closes first", true, false},
		{"evicted, reset returns first", false, false},
		{"expired, owner closes first", true, true},
		{"expired, reset returns first", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := New(Config{Limits: Limits{Unauthenticated: 1, PerSource: 2}})
			held := func() int {
				st := g.Stats()
				g.mu.Lock()
				defer g.mu.Unlock()
				return st.Handshaking + st.Anonymous + g.closing
			}
			c := pipeConn(t, g, "192.0.2.1")
			if _, reason := g.admit(c); reason != "" {
				t.Fatal(reason)
			}
			if tt.anonymous {
				if err := g.promote(c, pki.Identity{}, false); err != nil {
					t.Fatal(err)
				}
				// expire, up to its reset.
				g.mu.Lock()
				c.resets++
				g.mu.Unlock()
			} else if victim, _ := g.admit(pipeConn(t, g, "192.0.2.2")); victim != c {
				t.Fatalf("victim %v, want the first connection", victim)
			}
			want := held()
			first, second := func() { g.reset(c) }, func() { c.Close() }
			if tt.ownerFirst {
				first, second = second, first
			}
			first()
			if n := held(); n != want {
				t.Fatalf("%d held after the first Close returned, want %d", n, want)
			}
			second()
			if n := held(); n != want-1 {
				t.Fatalf("%d held after both returned, want %d", n, want-1)
			}
		})
	}
}

// pipeConn is a connection of g from src, over a pipe.
func pipeConn(t *testing.T, g *Guard, src string) *conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &conn{Conn: addrConn{a, &net.TCPAddr{IP: net.ParseIP(src), Port: 1}}, g: g, deadline: time.Now().Add(time.Hour)}
}

// addrConn is a net.Conn with the remote address given.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// TestEviction: over a source's bound the newcomer is closed; at the total
// bound a newcomer from a source holding at most one connection, fewer
// than the heaviest source, takes the place of that source's oldest, and
// others are closed.
func TestEviction(t *testing.T) {
	t.Parallel()
	s := newServer(t, Limits{Unauthenticated: 4, PerSource: 3}, true)
	testEviction(t, s)
	// Sources that hold two or more do not take each other's places.
	s = newServer(t, Limits{Unauthenticated: 5, PerSource: 3}, true)
	a := []net.Conn{}
	for range 3 {
		c, err := dialFrom(context.Background(), "127.0.9.1", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a = append(a, c)
	}
	for range 3 {
		c, err := dialFrom(context.Background(), "127.0.9.2", s.addr)
		if err != nil {
			continue // the third is refused: the reset may reach the dial
		}
		defer c.Close()
	}
	waitFor(t, 5*time.Second, "the third of the lighter source refused", func() error {
		if st := s.g.Stats(); st.Accepted != 6 || st.Refused[ReasonUnauth] != 1 || st.Refused[ReasonEvicted] != 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if _, closed := closedWithin(a[0], 100*time.Millisecond); closed {
		t.Fatal("the heaviest source's oldest was closed")
	}
}

func testEviction(t *testing.T, s *testServer) {
	dial := func(src string) net.Conn {
		t.Helper()
		c, err := dialFrom(context.Background(), src, s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accepted := func(n uint64) {
		t.Helper()
		waitFor(t, 5*time.Second, fmt.Sprintf("%d accepted", n), func() error {
			if st := s.g.Stats(); st.Accepted != n {
				return fmt.Errorf("stats %+v", st)
			}
			return nil
		})
	}
	closed := func(what string, c net.Conn) {
		t.Helper()
		if _, ok := closedWithin(c, 5*time.Second); !ok {
			t.Fatalf("%s is still open", what)
		}
	}
	// refused dials a connection the server closes at once (a reset may
	// reach the dial itself).
	refused := func(what, src string) {
		t.Helper()
		c, err := dialFrom(context.Background(), src, s.addr)
		if err != nil {
			return
		}
		defer c.Close()
		closed(what, c)
	}
	a := []net.Conn{dial("127.0.8.1"), dial("127.0.8.1"), dial("127.0.8.1")}
	accepted(3)
	refused("a 4th connection of one source", "127.0.8.1")
	b := dial("127.0.8.2")
	accepted(5)
	// At the total bound (4): c holds none, a holds 3: a's oldest goes.
	dial("127.0.8.3")
	closed("the heaviest source's oldest", a[0])
	// a and b now hold 2 and 1: b's second takes a's next.
	dial("127.0.8.2")
	closed("the heaviest source's next", a[1])
	// a, b and c hold 1, 2 and 1: b's third is refused.
	refused("a newcomer of the heaviest source", "127.0.8.2")
	_ = b
	st := s.g.Stats()
	if st.Handshaking != 4 || st.Refused[ReasonSource] != 1 || st.Refused[ReasonEvicted] != 2 || st.Refused[ReasonUnauth] != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The metrics say so.
	want := fmt.Sprintf(`# HELP teapot_lb_api_connections_accepted_total %s
# TYPE teapot_lb_api_connections_accepted_total counter
teapot_lb_api_connections_accepted_total 8
# HELP teapot_lb_api_connections_refused_total %s
# TYPE teapot_lb_api_connections_refused_total counter
teapot_lb_api_connections_refused_total{reason="anonymous_lifetime"} 0
teapot_lb_api_connections_refused_total{reason="authenticated"} 0
teapot_lb_api_connections_refused_total{reason="evicted"} 2
teapot_lb_api_connections_refused_total{reason="handshake_timeout"} 0
teapot_lb_api_connections_refused_total{reason="source"} 1
teapot_lb_api_connections_refused_total{reason="tenant"} 0
teapot_lb_api_connections_refused_total{reason="tenants"} 0
teapot_lb_api_connections_refused_total{reason="unauthenticated"} 1
# HELP teapot_lb_api_connections %s
# TYPE teapot_lb_api_connections gauge
teapot_lb_api_connections{state="admin"} 0
teapot_lb_api_connections{state="anonymous"} 0
teapot_lb_api_connections{state="handshake"} 4
teapot_lb_api_connections{state="node"} 0
teapot_lb_api_connections{state="tenant"} 0
`, helpOf(descAccepted), helpOf(descRefused), helpOf(descOpen))
	if err := testutil.CollectAndCompare(s.g.Collector(), strings.NewReader(want),
		"teapot_lb_api_connections_accepted_total", "teapot_lb_api_connections_refused_total", "teapot_lb_api_connections"); err != nil {
		t.Error(err)
	}
}

// helpOf is the help text of d.
func helpOf(d interface{ String() string }) string {
	_, h, _ := strings.Cut(d.String(), `help: "`)
	h, _, _ = strings.Cut(h, `"`)
	return h
}

// BenchmarkRefused measures the listener's refusals: every connection
// but the first is over its source's bound.
func BenchmarkRefused(b *testing.B) {
	for _, guarded := range []bool{true, false} {
		b.Run(fmt.Sprintf("guarded=%v", guarded), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			g := New(Config{Limits: Limits{PerSource: 1}})
			if guarded {
				ln = g.Listener(ln)
			}
			defer ln.Close()
			held, err := dialFrom(context.Background(), "127.0.10.1", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer held.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					if !guarded {
						abort(c)
					}
					_ = c // the one admitted stays open
				}
			}()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c, err := dialFrom(context.Background(), "127.0.10.1", ln.Addr().String())
					if err != nil {
						continue
					}
					_, _ = c.Read(make([]byte, 1))
					c.Close()
				}
			})
		})
	}
}
