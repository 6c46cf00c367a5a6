package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// countingMember is an HTTP/1.1 member that counts its open connections
// (and the most it had at once); /slow answers once release is closed.
type countingMember struct {
	addr          string
	open, maxOpen atomic.Int64
	release       chan struct{}
	releaseOnce   sync.Once
}

func startCountingMember(t *testing.T) *countingMember {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &countingMember{addr: ln.Addr().String(), release: make(chan struct{})}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				select {
				case <-m.release:
				case <-r.Context().Done():
				}
			}
			fmt.Fprint(w, "ok")
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				n := m.open.Add(1)
				for {
					old := m.maxOpen.Load()
					if n <= old || m.maxOpen.CompareAndSwap(old, n) {
						break
					}
				}
			case http.StateClosed, http.StateHijacked:
				m.open.Add(-1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { m.unblock(); srv.Close() })
	return m
}

func (m *countingMember) unblock() { m.releaseOnce.Do(func() { close(m.release) }) }

// h2cOwnClient is an HTTP/2 (prior knowledge) client of its own connection
// to target.
func h2cOwnClient(t *testing.T, target string) *http.Client {
	t.Helper()
	var d net.Dialer
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, target)
	}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// get returns the status of a GET of path, or an error.
func get(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// httpLB is a load balancer of tenant with an http listener on vip:port
// routing / to member.
func httpLB(tenant, name, vip string, port int, member string) *pb.LoadBalancer {
	lb := l4LB(name, vip, port, "http", member)
	lb.Tenant = tenant
	lb.Listeners[0].Pool = ""
	lb.Routes = []*pb.Route{{Path: "/", Pool: "app"}}
	return lb
}

// h2cConn is one cleartext HTTP/2 client connection with prior
// knowledge whose RoundTrip does not retry a refused stream (an attacker
// need not, and a retry hides the refusal).
func h2cConn(t *testing.T, target string) *http2.ClientConn {
	t.Helper()
	c, err := net.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(c)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// h2cGet is get on one connection: the status, or an error.
func h2cGet(cc *http2.ClientConn, url string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHTTP2FanOutStaysInTheTenantsBudget: tenant globex (quotas.connections
// 10, so 20 descriptors) opens 4 HTTP/2 connections of 50 concurrent
// streams each to a member that does not answer. At most 10 of its
// streams are in flight at once, its connection bound, whatever the
// connections carrying them: the others are refused (REFUSED_STREAM) as
// their HEADERS are read and counted as tenant-streams refusals, so its
// member connections stay within what its descriptors leave after its
// client connections and this process's descriptors stay bounded;
// tenant acme's requests all succeed meanwhile. Before member
// connections were charged, each stream held a member connection of its
// own: 200; with the charge but without the stream bound, 16 streams held
// member connections and 184 ran until they failed with 503.
func TestHTTP2FanOutStaysInTheTenantsBudget(t *testing.T) {
	const (
		quota   = 10
		clients = 4
		streams = 50
	)
	slow := startCountingMember(t)
	fast := startCountingMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, m := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	objs := append(labObjects(httpLB("acme", "a", "127.0.0.2", port, fast.addr), httpLB("globex", "b", "127.0.0.3", port, slow.addr)),
		&pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"},
			Quotas: &pb.Quotas{Connections: quota}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); len(st["globex/b"]) != 0 || len(st["acme/a"]) != 0 {
		t.Fatalf("problems: %v", st)
	}
	before := openFDs(t)

	// The most globex held at once, sampled while the streams run.
	var maxFDs, maxStreams atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if _, fds := p.TenantUse("globex"); fds > maxFDs.Load() {
				maxFDs.Store(fds)
			}
			if n := p.TenantStreams("globex"); n > maxStreams.Load() {
				maxStreams.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	bURL := "http://" + vipAddr("127.0.0.3", port) + "/slow"
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var refused int
	var failures []error
	var done atomic.Int64
	var cs []*http2.ClientConn
	for range clients { // open the connections first: the streams then spend the budget
		c := h2cConn(t, vipAddr("127.0.0.3", port))
		if _, err := h2cGet(c, "http://"+vipAddr("127.0.0.3", port)+"/"); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		for range streams {
			wg.Go(func() {
				code, err := h2cGet(c, bURL)
				mu.Lock()
				switch {
				case err != nil && strings.Contains(err.Error(), "REFUSED_STREAM"):
					refused++
				case err != nil:
					failures = append(failures, err)
				default:
					statuses[code]++
				}
				mu.Unlock()
				done.Add(1)
			})
		}
	}
	// Every stream past the bound has its answer; the others wait on
	// the member.
	waitFor(t, 20*time.Second, "the streams beyond the bound to be refused", func() bool {
		return done.Load() >= clients*streams-quota || slow.open.Load() > quota
	})
	if n := slow.open.Load(); n > quota {
		t.Errorf("the member holds %d connections of globex, whose streams in flight are bounded at %d", n, quota)
	}
	fdsDuring := openFDs(t)

	// Tenant acme is served meanwhile.
	a := h2cOwnClient(t, vipAddr("127.0.0.2", port))
	for i := range 50 {
		if code, err := get(a, "http://"+vipAddr("127.0.0.2", port)+"/"); err != nil || code != 200 {
			t.Fatalf("acme's request %d while globex is at its bound: %d %v", i, code, err)
		}
	}

	slow.unblock()
	wg.Wait()
	close(stopSampling)
	<-sampled
	t.Logf("globex: %v, %d refused, %d other errors; member connections at most %d; streams in flight at most %d; globex held at most %d descriptors; process descriptors %d before, %d during",
		statuses, refused, len(failures), slow.maxOpen.Load(), maxStreams.Load(), maxFDs.Load(), before, fdsDuring)
	if len(failures) > 0 {
		t.Errorf("%d requests failed without a status or a refusal, first: %v", len(failures), failures[0])
	}
	if statuses[200] != quota || refused != clients*streams-quota {
		t.Errorf("statuses %v, %d refused: want %d answered and the other %d refused", statuses, refused, quota, clients*streams-quota)
	}
	var counted int64
	for _, l := range m.Report().Listeners {
		if l.LB == "globex/b" {
			counted += l.Refused[RefusedTenantStreams]
		}
	}
	if n := counted; n != int64(refused) {
		t.Errorf("%d refusals counted as %s, want %d", n, RefusedTenantStreams, refused)
	}
	if n := maxStreams.Load(); n > quota {
		t.Errorf("globex had %d streams in flight, over its bound of %d", n, quota)
	}
	if n := slow.maxOpen.Load(); n > quota {
		t.Errorf("the member had %d connections of globex at once, whose streams are bounded at %d", n, quota)
	}
	if n := maxFDs.Load(); n > 2*quota {
		t.Errorf("globex held %d descriptors, over its budget of %d", n, 2*quota)
	}
	// Every descriptor charged comes back: the clients leave, and the
	// idle member connections close with the engine.
	for _, c := range cs {
		c.Close()
	}
	a.CloseIdleConnections()
	waitFor(t, 10*time.Second, "the client connections to close", func() bool {
		conns, _ := p.TenantUse("globex")
		return conns == 0 && p.TenantStreams("globex") == 0
	})
	srv.Close()
	waitFor(t, 10*time.Second, "the member connections to give their descriptors back", func() bool {
		_, fds := p.TenantUse("globex")
		return fds == 0 && p.HostDescriptors() == 0
	})
	// Each client and member connection costs this process two
	// descriptors (both ends are here): a bound on what globex made it
	// open, whatever the streams.
	if grew := fdsDuring - before; grew > 2*(2*quota)+16 {
		t.Errorf("descriptors grew by %d while globex's streams ran", grew)
	}
}

// TestMembersPerClientConnection: one HTTP/2 connection's streams hold at
// most MaxMembersPerConn member connections at once, even with a tenant
// budget to spare; the other streams wait for one and are all answered.
func TestMembersPerClientConnection(t *testing.T) {
	const (
		perConn = 4
		streams = 40
	)
	slow := startCountingMember(t)
	srv := l7.New(l7.Config{MaxMembersPerConn: perConn})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	update(t, p, httpLB("acme", "a", "127.0.0.2", port, slow.addr))
	c := h2cOwnClient(t, vipAddr("127.0.0.2", port))
	if _, err := get(c, "http://"+vipAddr("127.0.0.2", port)+"/"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range streams {
		wg.Go(func() {
			if code, err := get(c, "http://"+vipAddr("127.0.0.2", port)+"/slow"); err != nil || code != 200 {
				bad.Add(1)
			}
		})
	}
	waitFor(t, 10*time.Second, "the member to hold the connection's share", func() bool { return slow.open.Load() >= perConn })
	slow.unblock()
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of %d streams failed", n, streams)
	}
	if n := slow.maxOpen.Load(); n > perConn {
		t.Errorf("one client connection made %d member connections, want at most %d", n, perConn)
	}
}

// TestTCPChargesItsMemberConnection: a TCP connection holds two of its
// tenant's descriptors (client and member) while it is open, and gives
// them back when it closes.
func TestTCPChargesItsMemberConnection(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	port := freePort(t)
	update(t, p, l4LB("a", "127.0.0.2", port, "tcp", be.addr))
	var cs []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := roundTrip(c, []byte("x")); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if conns, fds := p.TenantUse("acme"); conns != 3 || fds != 6 {
		t.Errorf("3 connections hold %d connections and %d descriptors of the tenant, want 3 and 6", conns, fds)
	}
	for _, c := range cs {
		c.Close()
	}
	eventually(t, "the tenant's descriptors back", func() bool {
		conns, fds := p.TenantUse("acme")
		return conns == 0 && fds == 0 && p.HostDescriptors() == 0
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleMemberConnectionMakesRoom: a tenant whose budget is spent, in
// part by an idle pooled connection to one member, still reaches another:
// the dial closes the idle connection to make room (quotas.connections 1:
// two descriptors, the client's and one member connection).
func TestIdleMemberConnectionMakesRoom(t *testing.T) {
	x, y := startCountingMember(t), startCountingMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "a", "127.0.0.2", port, x.addr)
	lb.Pools["y"] = &pb.BackendPool{Members: []*pb.Member{{Address: y.addr}}}
	lb.Routes = []*pb.Route{{Path: "/x", Pool: "app"}, {Path: "/y", Pool: "y"}}
	objs := labObjects(lb)
	objs[0].GetTenant().Quotas = &pb.Quotas{Connections: 1}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 10 {
		path := []string{"/x", "/y"}[i%2]
		if code, err := get(c, "http://"+vipAddr("127.0.0.2", port)+path); err != nil || code != 200 {
			t.Fatalf("request %d to %s: %d %v", i, path, code, err)
		}
		if _, fds := p.TenantUse("acme"); fds > 2 {
			t.Fatalf("the tenant holds %d descriptors, its budget is 2", fds)
		}
	}
}
