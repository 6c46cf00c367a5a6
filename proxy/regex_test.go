package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// twoTenants is the lab with tenants a and b (loopback networks and
// VIPs) and their load balancers.
func twoTenants(lbs ...*pb.LoadBalancer) []*pb.Object {
	out := []*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lab", Cidrs: []string{"127.0.0.0/8"}, Mode: "static"}}},
	}
	for _, n := range []string{"a", "b"} {
		out = append(out, &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: n, Domains: []string{n + ".example"},
			Networks: []string{"127.0.0.0/8"}}}})
	}
	for _, lb := range lbs {
		out = append(out, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	}
	return out
}

// hostileRegexLB is tenant b's load balancer: regular expressions at the
// per-LB instruction budget that keep hundreds of threads alive on every
// byte of a path (about 17 ms of a core per 1 KiB path), in front of a
// catch-all.
func hostileRegexLB(vip string, port int, member string) *pb.LoadBalancer {
	lb := l4LB("regex", vip, port, "http", member)
	lb.Tenant = "b"
	lb.Listeners[0].Pool = ""
	for i := range 4 {
		lb.Routes = append(lb.Routes, &pb.Route{Path: fmt.Sprintf("/(?:[a-z/]?){240}x{9}%d", i), PathType: "regex", Pool: "app"})
	}
	lb.Routes = append(lb.Routes, &pb.Route{Path: "/", Pool: "app"})
	return lb
}

// latencies times n sequential requests to url, one every 5 ms.
func latencies(t *testing.T, c *http.Client, url string, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for range n {
		<-tick.C
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("tenant a: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("tenant a: %s", resp.Status)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

func pct(d []time.Duration, p int) time.Duration { return d[(len(d)-1)*p/100] }

// TestRegexRoutesDoNotSlowOtherTenants: tenant b's regex routes, at the
// bounds the API allows, hammered by 8 clients over real sockets (160
// requests a second of 1 KiB paths: about 2.7 cores of matching without a
// budget) leave tenant a's latency near its quiet baseline: b's matching
// is charged to its regex CPU budget (quotas.regexCpuMillicores, 100
// thousandths of a core by default), and once it is spent b's requests
// that need a regex get 429 at once.
func TestRegexRoutesDoNotSlowOtherTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	member := startHTTPMember(t)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil)})
	port := freePort(t)
	a := l4LB("plain", "127.0.0.2", port, "http", member)
	a.Tenant = "a"
	a.Listeners[0].Pool = ""
	a.Routes = []*pb.Route{{Path: "/", Pool: "app"}}
	if err := p.Update(twoTenants(a, hostileRegexLB("127.0.0.3", port, member)), 1); err != nil {
		t.Fatal(err)
	}
	for lb, ps := range p.StatusOf([]string{"a/plain", "b/regex"}) {
		if len(ps) > 0 {
			t.Fatalf("%s: %v", lb, ps)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	urlA := "http://" + vipAddr("127.0.0.2", port) + "/api/v1/items"
	long := "/" + strings.Repeat("abcdefghi/", 102)[:1020]
	urlB := "http://" + vipAddr("127.0.0.3", port) + long

	latencies(t, client, urlA, 50) // warm up
	quiet := latencies(t, client, urlA, 400)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, refused, other atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second}
			tick := time.NewTicker(50 * time.Millisecond) // 20 requests a second each
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				resp, err := c.Get(urlB)
				if err != nil {
					other.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					if resp.Header.Get("Retry-After") == "" {
						t.Errorf("429 without Retry-After")
					}
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	eventually(t, "tenant b's regex budget to be spent", func() bool { return p.RegexRefused("b") > 0 })
	abused := latencies(t, client, urlA, 400)
	close(stop)
	wg.Wait()

	qp50, qp99, ap50, ap99 := pct(quiet, 50), pct(quiet, 99), pct(abused, 50), pct(abused, 99)
	t.Logf("tenant a quiet p50 %v p99 %v; with b's regex routes hammered p50 %v p99 %v; b: %d served, %d refused (429), %d other",
		qp50, qp99, ap50, ap99, ok.Load(), refused.Load(), other.Load())
	// Generous for a loaded 2-core machine under -race: without the
	// budget a's p50 rises to about 110 ms here.
	if limit := max(3*qp50, qp50+10*time.Millisecond); ap50 > limit {
		t.Errorf("tenant a's p50 went from %v to %v (limit %v)", qp50, ap50, limit)
	}
	// p99 as the goal has it; under the race detector one of b's
	// lookups runs about ten times longer (a few hundred ms of one
	// core) before it is charged, and the tail shows it.
	slack := 50 * time.Millisecond
	if raceEnabled {
		slack = 250 * time.Millisecond
	}
	if limit := max(3*qp99, qp99+slack); ap99 > limit {
		t.Errorf("tenant a's p99 went from %v to %v (limit %v)", qp99, ap99, limit)
	}
	if ok.Load() == 0 || refused.Load() == 0 {
		t.Errorf("tenant b: %d served, %d refused; want both (the budget serves some, refuses the rest)", ok.Load(), refused.Load())
	}
}

// The budget lets a tenant spend its millicores of a core on regexes,
// after a burst of regexBurst of budget time, and refuses past that
// until time refills it; a tenant's quota sets the rate.
func TestRegexBudgetRate(t *testing.T) {
	t.Parallel()
	b := &regexBudget{}
	b.millicores.Store(100) // a tenth of a core
	ms := int64(time.Millisecond)
	now := int64(0)
	n := 0
	for b.reserve(now, ms) {
		n++
	}
	// 1 ms of CPU is 10 ms of budget time: 20 fit in the 200 ms burst.
	if n != 20 {
		t.Errorf("%d lookups of 1 ms in a burst, want 20", n)
	}
	now += 100 * ms // a tenth of a core for 100 ms: 10 ms of CPU
	for n = 0; b.reserve(now, ms); n++ {
	}
	if n != 10 {
		t.Errorf("%d lookups of 1 ms after 100 ms, want 10", n)
	}
	b.settle(ms, 0) // a lookup that took nothing gives its reservation back
	if !b.reserve(now, ms) {
		t.Error("settling did not give the reservation back")
	}
	b.millicores.Store(1000) // a whole core: 1 ms of CPU is 1 ms of budget time
	now += 1000 * ms
	for n = 0; b.reserve(now, ms); n++ {
	}
	if n != 200 {
		t.Errorf("%d lookups at 1000 millicores, want 200", n)
	}
	// A lookup dearer than the whole burst runs from a full budget only,
	// and alone.
	now += 1000 * ms
	if !b.reserve(now, 300*ms) || b.reserve(now, int64(time.Microsecond)) {
		t.Error("a reservation over the burst: want it taken from a full budget, and nothing after it")
	}
}

// quotas.regexCpuMillicores reaches the tenant's budget on the host.
func TestRegexBudgetFollowsTheQuota(t *testing.T) {
	member := startHTTPMember(t)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil)})
	port := freePort(t)
	objs := twoTenants(hostileRegexLB("127.0.0.3", port, member))
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	budget := func() int64 {
		v, _ := p.regexBudgets.Load("b")
		if v == nil {
			return -1
		}
		return v.(*regexBudget).millicores.Load()
	}
	if got := budget(); got != 0 {
		t.Errorf("budget of a tenant without the quota: %d millicores, want 0 (the default)", got)
	}
	for i, o := range objs { // the store replaces an object, never changes it
		if o.GetTenant().GetName() == "b" {
			objs[i] = &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "b", Domains: []string{"b.example"},
				Networks: []string{"127.0.0.0/8"}, Quotas: &pb.Quotas{RegexCpuMillicores: 500}}}}
		}
	}
	if err := p.Update(objs, 2); err != nil {
		t.Fatal(err)
	}
	if got := budget(); got != 500 {
		t.Errorf("budget after quotas.regexCpuMillicores 500: %d", got)
	}
}

// BenchmarkRegexLookup is what the budget adds to a lookup in a table
// with typical regexes: two clock reads and two atomic operations.
func BenchmarkRegexLookup(b *testing.B) {
	lb := l4LB("re", "127.0.0.2", 80, "http", "127.0.0.1:1")
	lb.Listeners[0].Pool = ""
	lb.Routes = []*pb.Route{{Path: "/", Pool: "app"}}
	for i := range 10 {
		lb.Routes = append(lb.Routes, &pb.Route{Path: fmt.Sprintf("/api/v[0-9]+/svc%d/[0-9a-f]{8}-[0-9a-f]{4}/.*", i), PathType: "regex", Pool: "app"})
	}
	p, _ := newProxy(b, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil)})
	objs := labObjects(lb)
	objs[0].GetTenant().Quotas = &pb.Quotas{RegexCpuMillicores: 1 << 30}
	if err := p.Update(objs, 1); err != nil {
		b.Fatal(err)
	}
	var ls *ListenerSnapshot
	for _, l := range p.current.Load().listeners.All() {
		ls = l
	}
	if ls == nil || ls.regex == nil {
		b.Fatal("no listener with a regex budget")
	}
	const path = "/api/v2/svc9/0123abcd-ef01/x"
	b.Run("match", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ls.Routes.Match("", path)
		}
	})
	b.Run("lookup-charged", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ls.lookup("", path, nil)
		}
	})
}

// Over HTTP/2 too, a tenant past its regex budget gets 429 with
// Retry-After for the requests that need a regex, and its exact routes
// are still served.
func TestRegexBudgetRefusesHTTP2(t *testing.T) {
	member := startHTTPMember(t)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil)})
	port := freePort(t)
	lb := hostileRegexLB("127.0.0.3", port, member)
	lb.Routes = append(lb.Routes, &pb.Route{Path: "/health", PathType: "exact", Pool: "app"})
	objs := twoTenants(lb)
	for i, o := range objs {
		if o.GetTenant().GetName() == "b" {
			objs[i] = &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "b", Domains: []string{"b.example"},
				Networks: []string{"127.0.0.0/8"}, Quotas: &pb.Quotas{RegexCpuMillicores: 1}}}}
		}
	}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	base := "http://" + vipAddr("127.0.0.3", port)
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s over HTTP/%d", path, resp.ProtoMajor)
		}
		return resp
	}
	long := "/" + strings.Repeat("abcdefghi/", 102)[:1020]
	var refused *http.Response
	for range 20 {
		if r := get(long); r.StatusCode == http.StatusTooManyRequests {
			refused = r
			break
		}
	}
	if refused == nil || refused.Header.Get("Retry-After") != "1" {
		t.Fatalf("20 requests at 1 thousandth of a core: no 429 with Retry-After: 1 (%v)", refused)
	}
	if r := get("/health"); r.StatusCode != 200 {
		t.Errorf("an exact route while the budget is spent: %s, want 200", r.Status)
	}
	if p.RegexRefused("b") == 0 {
		t.Error("no refusal counted")
	}
}
