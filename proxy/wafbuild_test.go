package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/waf"
)

// TestWAFRuleChurnChargedToItsTenant: a tenant that changes its own WAF
// rules as fast as the host takes changes (an attacker holding its
// credentials: 31 regex rules and one that denies X-Evil with the
// change's number) pays the builds of their engines from its WAF CPU
// budget. Past it, its builds wait (counted deferred, in the metric) and
// its route answers 503 with Retry-After until built, and its builds are
// charged no more CPU than its budget allows over the run. The
// neighbour's WAF route keeps serving at its latency, and once the churn
// stops the churner's last list is in force.
func TestWAFRuleChurnChargedToItsTenant(t *testing.T) {
	if _, err := waf.Get(1); err != nil { // the Core Rule Set's load, charged to no one here
		t.Fatal(err)
	}
	addr, _ := wafMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	const (
		budget = 20 // millicores: a burst of 4 ms of CPU (200 ms of budget time), then 20 ms a second
		run    = 3 * time.Second
		pace   = 10 * time.Millisecond
	)
	churner := func(gen int) *pb.LoadBalancer {
		lb := httpLB("globex", "web", "127.0.0.2", port, addr)
		rules := append(expensiveRules()[:31], fmt.Sprintf(`SecRule REQUEST_HEADERS:X-Evil "@streq %d" "id:1001,phase:1,deny,status:403"`, gen))
		lb.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: rules}
		return lb
	}
	quiet := httpLB("acme", "web", "127.0.0.5", port, addr)
	quiet.Routes[0].Waf = &pb.WAF{Mode: "block"}
	objs := func(gen int) []*pb.Object {
		return append(wafRoomy(labObjects(churner(gen), quiet)), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"},
			Quotas: &pb.Quotas{WafCpuMillicores: budget}}}})
	}
	if err := p.Update(objs(0), 1); err != nil {
		t.Fatal(err)
	}
	c := sourceClient(t, "127.0.0.3")
	quietGet := func() time.Duration {
		start := time.Now()
		if code, err := get(c, "http://"+vipAddr("127.0.0.5", port)+"/?page=1"); err != nil || code != 200 {
			t.Errorf("acme's WAF route: %d %v", code, err)
		}
		return time.Since(start)
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	quietGet()
	var alone []time.Duration
	for range 21 {
		alone = append(alone, quietGet())
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var busy []time.Duration
	var building atomic.Int64 // the churner's 503s with Retry-After
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			d := quietGet()
			mu.Lock()
			busy = append(busy, d)
			mu.Unlock()
		}
	})
	wg.Go(func() {
		gc := sourceClient(t, "127.0.0.4")
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			resp, err := gc.Get("http://" + vipAddr("127.0.0.2", port) + "/")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				building.Add(1)
			}
		}
	})
	start := time.Now()
	gen := 0
	var updates []time.Duration
	// A change every 10 ms: what a tenant's stream may write (its
	// changes are small), and 100 builds a second, five times what
	// the budget pays for.
	for next := start; time.Since(start) < run; next = next.Add(pace) {
		time.Sleep(time.Until(next))
		gen++
		u := time.Now()
		if err := p.Update(objs(gen), uint64(gen+1)); err != nil {
			t.Fatal(err)
		}
		updates = append(updates, time.Since(u))
	}
	elapsed := time.Since(start)
	g := p.WAFStats("globex")
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	perBuild := g.BuildCPU / time.Duration(max(g.Built, 1))
	t.Logf("%d changes in %v (update median %v, max %v); globex %+v (%v a build); its route answered 503 while building %d times; acme's median %v alone, %v over %d requests beside the churn",
		gen, elapsed.Round(time.Millisecond), median(updates), slices.Max(updates), g, perBuild, building.Load(), median(alone), median(busy), len(busy))
	if g.Deferred == 0 {
		t.Fatalf("none of %d changes' builds waited for globex's budget of %d millicores: %+v", gen, budget, g)
	}
	// Its budget over the run, the burst (200 ms of budget time), and the
	// builds in progress when the run began and ended.
	if limit := elapsed*budget/1000 + 200*time.Millisecond*budget/1000 + 3*perBuild; g.BuildCPU > limit {
		t.Fatalf("globex's builds were charged %v of CPU in %v; its budget allows %v", g.BuildCPU, elapsed, limit)
	}
	if building.Load() == 0 {
		t.Fatal("globex's route never answered 503 with Retry-After while its rules waited")
	}
	// The host's own share (an Update every 10 ms, about 7 ms each under
	// the race detector) slows acme too; 60 ms covers it on a loaded
	// 2-core machine, where builds outside the budget would add more.
	if m, a := median(busy), median(alone); m > 3*a+60*time.Millisecond {
		t.Fatalf("acme's median latency %v beside the churn, %v alone", m, a)
	}
	// The last list is built once the budget pays for it, and enforced.
	gc := sourceClient(t, "127.0.0.4")
	waitFor(t, 20*time.Second, "globex's last rules in force", func() bool {
		req, _ := http.NewRequest("GET", "http://"+vipAddr("127.0.0.2", port)+"/", nil)
		req.Header.Set("X-Evil", fmt.Sprint(gen))
		resp, err := gc.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusForbidden
	})
	// Without the header it is served, once its budget has paid for the
	// inspections the wait above made (429 until then).
	waitFor(t, 20*time.Second, "globex served without the header", func() bool {
		code, err := get(gc, "http://"+vipAddr("127.0.0.2", port)+"/")
		return err == nil && code == 200
	})
	// The metric counts what the stats do.
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.EdgeCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var deferred float64 = -1
	for _, mf := range mfs {
		if mf.GetName() != "teapot_lb_waf_rule_builds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, l := range m.GetLabel() {
				lbl[l.GetName()] = l.GetValue()
			}
			if lbl["tenant"] == "globex" && lbl["outcome"] == "deferred" {
				deferred = m.GetCounter().GetValue()
			}
		}
	}
	if now := p.WAFStats("globex").Deferred; deferred != float64(now) {
		t.Fatalf("teapot_lb_waf_rule_builds_total{tenant=globex,outcome=deferred} = %v, want %d", deferred, now)
	}
}
