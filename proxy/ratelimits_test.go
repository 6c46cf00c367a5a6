package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// sourceClient is an HTTP/1.1 client whose connections come from the
// loopback address src.
func sourceClient(t *testing.T, src string) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialFrom("tcp", src, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// burst sends n GETs and returns how many got 200, the last 429's
// response, and the time it took.
func burst(t *testing.T, c *http.Client, url string, n int) (ok int, refused *http.Response, took time.Duration) {
	t.Helper()
	start := time.Now()
	for range n {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			ok++
		case 429:
			refused = resp
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	return ok, refused, time.Since(start)
}

// within checks that passed is the burst plus what the rate refilled
// while the requests ran (the machine may be slow).
func within(t *testing.T, what string, passed, burst int, rate float64, took time.Duration) {
	t.Helper()
	if hi := burst + int(rate*took.Seconds()) + 1; passed < burst || passed > hi {
		t.Fatalf("%s: %d passed in %v; want %d to %d", what, passed, took, burst, hi)
	}
}

// TestRouteRateLimitPerClient: over real sockets, a client past a route's
// requestsPerSecond gets 429 with Retry-After and RateLimit fields, and
// the member sees only the requests within the limit; another client
// keeps its own budget, and another route of the same listener is not
// limited. Over HTTP/2 (the fast path) the same limit holds.
func TestRouteRateLimitPerClient(t *testing.T) {
	member := startCountingMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "web", "127.0.0.2", port, member.addr)
	lb.Routes = []*pb.Route{
		{Path: "/api", Pool: "app", RateLimit: &pb.RateLimit{RequestsPerSecond: 1, Burst: 3}},
		{Path: "/", Pool: "app"},
	}
	update(t, p, lb)
	if st := p.Status()["acme/web"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	base := "http://" + vipAddr("127.0.0.2", port)
	a := sourceClient(t, "127.0.0.3")
	passed, refused, took := burst(t, a, base+"/api", 10)
	within(t, "client a on /api", passed, 3, 1, took)
	if refused == nil {
		t.Fatal("no 429")
	}
	ra, _ := strconv.Atoi(refused.Header.Get("Retry-After"))
	if ra < 1 || refused.Header.Get("RateLimit-Limit") != "1" || refused.Header.Get("RateLimit-Remaining") != "0" || refused.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("429 fields: %v", refused.Header)
	}
	if ok, _, _ := burst(t, a, base+"/other", 10); ok != 10 {
		t.Fatalf("the unlimited route served %d of 10", ok)
	}
	passed, _, took = burst(t, sourceClient(t, "127.0.0.4"), base+"/api", 5)
	within(t, "client b on /api", passed, 3, 1, took)

	// HTTP/2 with prior knowledge from 127.0.0.1: its own budget, on the
	// HTTP/2 fast path.
	h2 := h2cOwnClient(t, vipAddr("127.0.0.2", port))
	passed, refused, took = burst(t, h2, base+"/api", 8)
	within(t, "HTTP/2 client on /api", passed, 3, 1, took)
	if refused == nil || refused.Header.Get("Retry-After") == "" {
		t.Fatal("HTTP/2: no 429 with Retry-After")
	}
	if st := p.RateLimitStats("acme"); st.Keys != 3 || st.Refused == 0 {
		t.Fatalf("table %+v, want 3 keys (three clients) and refusals", st)
	}
}

// TestListenerConnectionRate: a tcp listener's connectionsPerSecond resets
// a client's connections past it at accept (no member connection), counted
// as refused reason rate-limit; another client is served.
func TestListenerConnectionRate(t *testing.T) {
	be, accepted := countingEcho(t)
	p, m := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("db", "127.0.0.2", port, "tcp", be.addr)
	lb.Listeners[0].RateLimit = &pb.RateLimit{ConnectionsPerSecond: 1, Burst: 2}
	update(t, p, lb)
	addr := vipAddr("127.0.0.2", port)
	start := time.Now()
	served := 0
	for range 6 {
		if servedTCP(t, "127.0.0.3", addr) {
			served++
		}
	}
	within(t, "connections from a", served, 2, 1, time.Since(start))
	if !servedTCP(t, "127.0.0.4", addr) {
		t.Fatal("another client was refused")
	}
	if got, want := refusedFor(m, RefusedRateLimit), int64(6-served); got != want {
		t.Fatalf("refused %d, want %d", got, want)
	}
	if got := accepted.Load(); got != int64(served+1) {
		t.Fatalf("the member accepted %d connections, want %d", got, served+1)
	}
}

// TestRateLimitTableBoundedPerTenant: a tenant's rate-limit keys on a
// host are bounded by its quotas.rateLimitKeys; clients past a full table
// are refused as over the limit (and counted), and a neighbour tenant's
// table is its own.
func TestRateLimitTableBoundedPerTenant(t *testing.T) {
	member := startCountingMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	limited := httpLB("globex", "web", "127.0.0.2", port, member.addr)
	limited.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 1, Burst: 100}
	other := httpLB("acme", "web", "127.0.0.5", port, member.addr)
	other.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: 1, Burst: 100}
	objs := append(labObjects(limited, other), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"},
		Quotas: &pb.Quotas{RateLimitKeys: 2}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for i := 3; i <= 6; i++ {
		src := fmt.Sprintf("127.0.0.%d", i+10)
		code, err := get(sourceClient(t, src), "http://"+vipAddr("127.0.0.2", port)+"/")
		if err != nil {
			t.Fatal(err)
		}
		codes[src] = code
		if code, err := get(sourceClient(t, src), "http://"+vipAddr("127.0.0.5", port)+"/"); err != nil || code != 200 {
			t.Fatalf("the neighbour tenant's client %s got %d, %v", src, code, err)
		}
	}
	n429 := 0
	for _, c := range codes {
		if c == 429 {
			n429++
		}
	}
	if n429 != 2 {
		t.Fatalf("codes %v; want the two clients past the table of 2 refused", codes)
	}
	if st := p.RateLimitStats("globex"); st.Keys != 2 || st.Max != 2 || st.Full != 2 {
		t.Fatalf("globex table %+v", st)
	}
	if st := p.RateLimitStats("acme"); st.Keys != 4 || st.Full != 0 {
		t.Fatalf("acme table %+v", st)
	}
}
