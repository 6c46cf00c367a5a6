package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/accesslog"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []accesslog.Line {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []accesslog.Line
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var ln accesslog.Line
		if json.Unmarshal(sc.Bytes(), &ln) == nil {
			out = append(out, ln)
		}
	}
	return out
}

// evilRule denies a request with the header X-Evil: yes.
const evilRule = `SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,status:403,log,msg:'evil header'"`

// TestWAFTenantRulesOverRealSockets: a tenant's own rule blocks a
// request with its header in block mode (the member never sees it) and
// only logs it in detect mode (served; the access log names rule 1001);
// requests without the header pass. Two routes with the same list share
// one engine.
func TestWAFTenantRulesOverRealSockets(t *testing.T) {
	addr, got := wafMember(t)
	var out lockedBuffer
	srv := l7.New(l7.Config{Metrics: accesslog.New(accesslog.Config{Out: &out})})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "web", "127.0.0.2", port, addr)
	lb.AccessLog = &pb.AccessLog{Enabled: true}
	lb.Routes = []*pb.Route{
		{Path: "/detect", Pool: "app", Waf: &pb.WAF{Mode: "detect", Rules: []string{evilRule}}},
		{Path: "/other", Pool: "app", Waf: &pb.WAF{Mode: "block", ParanoiaLevel: 2, Rules: []string{evilRule}}},
		{Path: "/", Pool: "app", Waf: &pb.WAF{Mode: "block", Rules: []string{evilRule}}},
	}
	if err := p.Update(wafRoomy(labObjects(lb)), 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status()["acme/web"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	if n := p.RuleEngines("acme"); n != 1 {
		t.Fatalf("%d engines of acme's rules; want 1 for one list", n)
	}
	base := "http://" + vipAddr("127.0.0.2", port)
	c := sourceClient(t, "127.0.0.3")
	do := func(path string, evil bool) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("User-Agent", "Mozilla/5.0")
		req.Header.Set("Accept", "text/html")
		if evil {
			req.Header.Set("X-Evil", "yes")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	before := got.Load()
	if code := do("/shop", true); code != 403 {
		t.Fatalf("block mode, X-Evil: %d, want 403", code)
	}
	if code := do("/other", true); code != 403 {
		t.Fatalf("block mode at paranoia 2, X-Evil: %d, want 403", code)
	}
	if n := got.Load() - before; n != 0 {
		t.Fatalf("the member got %d blocked requests", n)
	}
	if code := do("/shop", false); code != 200 {
		t.Fatalf("block mode, no header: %d", code)
	}
	if code := do("/detect", true); code != 200 {
		t.Fatalf("detect mode, X-Evil: %d, want it served", code)
	}
	if st := p.WAFStats("acme"); st.Blocked != 2 || st.Detected != 1 {
		t.Fatalf("WAF stats %+v", st)
	}
	var lines []accesslog.Line
	for deadline := time.Now().Add(10 * time.Second); len(lines) < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		lines = out.lines()
	}
	var detect *accesslog.Line
	for i := range lines {
		if strings.HasPrefix(lines[i].Path, "/detect") {
			detect = &lines[i]
		}
	}
	if detect == nil || detect.Status != 200 || !strings.Contains(","+detect.WAFRules+",", ",1001,") {
		t.Fatalf("access log of the detected request: %+v (all %d lines)", detect, len(lines))
	}
}

// expensiveRules are 32 rules that each match a regular expression
// over the X-Data header: about 4 times what the Core Rule Set costs a
// request with expensiveData.
func expensiveRules() []string {
	var rules []string
	for i := range 32 {
		rules = append(rules, fmt.Sprintf(`SecRule REQUEST_HEADERS:X-Data "@rx (?:[a-z]+[0-9]+){4}q%d" "id:%d,phase:1,pass,nolog,t:none,t:lowercase"`, i, 2000+i))
	}
	return rules
}

var expensiveData = strings.Repeat("abc123def456", 100)

// dataGet sends a GET with expensiveData and returns its status.
func dataGet(c *http.Client, url string) (int, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("User-Agent", "Mozilla/5.0")
	req.Header.Set("X-Data", expensiveData)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestWAFTenantRulesChargedToItsTenant: a tenant whose own rules are
// expensive is charged their CPU (well over what the Core Rule Set alone
// costs another tenant's same request) and slowed at its WAF CPU budget
// (429), spending no more than its budget of CPU; another tenant's WAF
// route meanwhile keeps its latency.
func TestWAFTenantRulesChargedToItsTenant(t *testing.T) {
	addr, _ := wafMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	noisy := httpLB("globex", "web", "127.0.0.2", port, addr)
	noisy.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: expensiveRules()}
	quiet := httpLB("acme", "web", "127.0.0.5", port, addr)
	quiet.Routes[0].Waf = &pb.WAF{Mode: "block"}
	const budget = 100 // millicores
	objs := append(wafRoomy(labObjects(noisy, quiet)), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"},
		Quotas: &pb.Quotas{WafCpuMillicores: budget}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	c := sourceClient(t, "127.0.0.3")
	quietGet := func() time.Duration {
		start := time.Now()
		if code, err := dataGet(c, "http://"+vipAddr("127.0.0.5", port)+"/?page=1"); err != nil || code != 200 {
			t.Fatalf("acme's WAF route: %d %v", code, err)
		}
		return time.Since(start)
	}
	median := func(n int) time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = quietGet()
		}
		slices.Sort(d)
		return d[n/2]
	}
	quietGet() // the engine's first transaction
	alone := median(21)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range 2 {
		wg.Go(func() {
			nc := sourceClient(t, "127.0.0.4")
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := dataGet(nc, "http://"+vipAddr("127.0.0.2", port)+"/?page=1"); err != nil {
					return
				}
				// A pace, not a wait: the test is about the WAF's CPU,
				// not about serving a flood of 429s on a loaded machine.
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	for deadline := time.Now().Add(20 * time.Second); p.WAFStats("globex").Refused < 20 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	busy := median(21)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	g, a := p.WAFStats("globex"), p.WAFStats("acme")
	t.Logf("globex %+v over %v; acme %+v; acme's median %v alone, %v beside globex", g, elapsed, a, alone, busy)
	if g.Refused < 20 {
		t.Fatalf("globex at %d millicores was refused %d times", budget, g.Refused)
	}
	perG, perA := g.CPU/time.Duration(g.Inspected), a.CPU/time.Duration(a.Inspected)
	if perG < 5*perA/2 {
		t.Fatalf("globex was charged %v an inspection, acme %v: its own rules were not charged", perG, perA)
	}
	// Its budget over the run, the burst (200 ms of budget time) and the
	// inspections in flight when the run began and ended.
	if limit := elapsed*budget/1000 + 200*time.Millisecond*budget/1000 + 4*perG; g.CPU > limit {
		t.Fatalf("globex spent %v of WAF CPU in %v; its budget allows %v", g.CPU, elapsed, limit)
	}
	if busy > 3*alone+30*time.Millisecond {
		t.Fatalf("acme's median latency %v beside globex, %v alone", busy, alone)
	}
}

// TestWAFTenantRuleEnginesBounded: one tenant's distinct lists of rules
// on a host are at most MaxWAFRuleEngines engines: a route past it
// answers 503 (fail closed) and its load balancer's status says so, and another tenant's lists are not counted
// against it. Engines no listener uses any more stop counting.
func TestWAFTenantRuleEnginesBounded(t *testing.T) {
	addr, _ := wafMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	list := func(n int) []string {
		return []string{fmt.Sprintf(`SecRule REQUEST_HEADERS:X-Evil "@streq %d" "id:1,phase:1,deny"`, n)}
	}
	lbs := func(gen int) []*pb.LoadBalancer {
		var out []*pb.LoadBalancer
		for i := range 5 { // 5 load balancers of 4 distinct lists: 20 lists
			lb := httpLB("acme", fmt.Sprintf("web%d", i), fmt.Sprintf("127.0.1.%d", i+1), port, addr)
			lb.Routes = nil
			for j := range 4 {
				lb.Routes = append(lb.Routes, &pb.Route{Path: fmt.Sprintf("/r%d", j), Pool: "app", Waf: &pb.WAF{Mode: "block", Rules: list(gen*100 + i*4 + j)}})
			}
			out = append(out, lb)
		}
		return out
	}
	other := httpLB("globex", "web", "127.0.2.1", port, addr)
	other.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: list(1)}
	objs := append(wafRoomy(labObjects(append(lbs(0), other)...)), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	if n := p.RuleEngines("acme"); n != MaxWAFRuleEngines {
		t.Fatalf("acme holds %d engines; want the bound, %d", n, MaxWAFRuleEngines)
	}
	if n := p.RuleEngines("globex"); n != 1 {
		t.Fatalf("globex holds %d engines", n)
	}
	c := sourceClient(t, "127.0.0.3")
	codes := map[int]int{}
	for i := range 5 {
		for j := range 4 {
			code, err := get(c, fmt.Sprintf("http://%s/r%d", vipAddr(fmt.Sprintf("127.0.1.%d", i+1), port), j))
			if err != nil {
				t.Fatal(err)
			}
			codes[code]++
		}
	}
	if codes[200] != MaxWAFRuleEngines || codes[503] != 20-MaxWAFRuleEngines {
		t.Fatalf("answers %v; want %d served and %d 503", codes, MaxWAFRuleEngines, 20-MaxWAFRuleEngines)
	}
	if code, err := get(c, "http://"+vipAddr("127.0.2.1", port)+"/"); err != nil || code != 200 {
		t.Fatalf("globex: %d %v", code, err)
	}
	rulesProblems := func() int {
		n := 0
		for lb, ps := range p.Status() {
			for _, pr := range ps {
				if strings.HasSuffix(pr.Field, ".waf.rules") && strings.Contains(pr.Reason, "answers 503") && strings.HasPrefix(lb, "acme/") {
					n++
				}
			}
		}
		return n
	}
	if n := rulesProblems(); n != 20-MaxWAFRuleEngines {
		t.Fatalf("the status names %d routes whose rules are not in force; want %d: %v", n, 20-MaxWAFRuleEngines, p.Status())
	}
	// New lists replace the old ones of a tenant at its bound: the old
	// engines are given back before the new are built, and the new fit.
	objs = append(wafRoomy(labObjects(append(lbs(1)[:3], other)...)), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"}}}})
	if err := p.Update(objs, 2); err != nil {
		t.Fatal(err)
	}
	if n := p.RuleEngines("acme"); n != 12 {
		t.Fatalf("acme holds %d engines after its lists changed; want 12", n)
	}
	if n := rulesProblems(); n != 0 {
		t.Fatalf("the status still names %d routes: %v", n, p.Status())
	}
	for i := range 3 {
		for j := range 4 {
			if code, err := get(c, fmt.Sprintf("http://%s/r%d", vipAddr(fmt.Sprintf("127.0.1.%d", i+1), port), j)); err != nil || code != 200 {
				t.Fatalf("web%d /r%d after the change: %d %v", i, j, code, err)
			}
		}
	}
}
