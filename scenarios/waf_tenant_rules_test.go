package scenarios

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// The tenant WAF rules scenario's addresses: the VIPs of the tenant that
// writes rules (shop) and of its neighbour, and their members.
const (
	twShopVIP     = "127.0.94.1"
	twNeighVIP    = "127.0.94.2"
	twShopMember  = "127.0.94.11"
	twNeighMember = "127.0.94.12"
)

// twMember is an HTTP member on ip counting the requests that reach it.
func twMember(t *testing.T, ip string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "hello, world\n")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), &n
}

// twGet sends a browser's GET with one more header (none when name is
// empty) and returns the status.
func twGet(cl *http.Client, base, name, value string) (int, error) {
	req, err := http.NewRequest("GET", base+"/shop/items?id=42", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")
	req.Header.Set("Accept", "text/html,application/json")
	if name != "" {
		req.Header.Set(name, value)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestTenantWAFRules: a tenant writes its own WAF rules (routes[].waf.rules)
// over the tenant stream with its agent credentials, to the real binary.
// Its rule blocks what it says (403, the member never sees it) and passes
// the rest; a change of rule takes effect; rules outside the allowed
// subset (a file operator, an id out of range, the exec action) are
// refused in the ack with the field and the reason, and the running
// rules, the stored version and the traffic stay as they were. The
// neighbour's WAF route serves the same requests (its traffic is not
// judged by another tenant's rules).
func TestTenantWAFRules(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a cluster")
	}
	shopAddr, shopServed := twMember(t, twShopMember)
	neighAddr, neighServed := twMember(t, twNeighMember)
	shopPort := freePortOn(t, twShopVIP)
	neighPort := freePortOn(t, twNeighVIP)
	c := newCluster(t)
	n := c.bootstrap()
	manifest := fmt.Sprintf(`
kind: VIPPool
name: tw
cidrs: [%[1]s/32, %[2]s/32]
mode: static
---
kind: Tenant
name: shop
networks: [%[3]s/32]
pools: [tw]
quotas: { wafCpuMillicores: 1000 }
---
kind: Tenant
name: neigh
networks: [%[4]s/32]
pools: [tw]
quotas: { wafCpuMillicores: 1000 }
---
kind: LoadBalancer
name: web
tenant: neigh
vip: { pool: tw, address: "%[2]s" }
listeners: [{ port: %[5]d, protocol: http }]
routes: [{ path: /, pool: web, waf: { mode: block } }]
pools: { web: { members: ["%[6]s"] } }
`, twShopVIP, twNeighVIP, twShopMember, twNeighMember, neighPort, neighAddr)
	path := filepath.Join(c.dir, "tw.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	tl := &tenantLab{t: t, c: c, conn: dialAll(t, c)}
	agent := dialTenant(t, "shop-agent", tl.credentials("shop"))

	shopLB := func(rules ...string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "svc-web", Vip: &pb.VIPRequest{Pool: "tw", Address: twShopVIP},
			Listeners: []*pb.Listener{{Port: uint32(shopPort), Protocol: "http"}},
			Routes:    []*pb.Route{{Path: "/", Pool: "web", Waf: &pb.WAF{Mode: "block", Rules: rules}}},
			Pools:     map[string]*pb.BackendPool{"web": {Members: memberList(shopAddr)}}}
	}
	evil := `SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,status:403,log,msg:'evil header'"`
	ack, err := agent.change([]*pb.LoadBalancer{shopLB(evil)})
	if err != nil {
		t.Fatal(err)
	}
	if stored, refused := verdicts(ack); len(stored) != 1 || len(refused) != 0 {
		t.Fatalf("the shop's load balancer with its rule: stored %v, refused %v", stored, refused)
	}
	shop := "http://" + net.JoinHostPort(twShopVIP, strconv.Itoa(shopPort))
	neigh := "http://" + net.JoinHostPort(twNeighVIP, strconv.Itoa(neighPort))
	cl := edgeHTTPClient("127.0.0.1")
	expect := func(base, name, value string, want int) error {
		code, err := twGet(cl, base, name, value)
		if err != nil {
			return err
		}
		if code != want {
			return fmt.Errorf("GET %s with %s: %s: %d, want %d", base, name, value, code, want)
		}
		return nil
	}
	waitFor(t, startTimeout, "the shop's rule in force", func() error {
		if err := expect(shop, "", "", 200); err != nil {
			return err
		}
		return expect(shop, "X-Evil", "yes", 403)
	})
	waitFor(t, startTimeout, "the neighbour's load balancer to serve", func() error { return expect(neigh, "", "", 200) })

	// The rule blocks what it says, before the member; the rest passes.
	check := func(phase string, blocked, passed string) {
		t.Helper()
		before := shopServed.Load()
		for range 5 {
			if err := expect(shop, blocked, "yes", 403); err != nil {
				t.Fatalf("%s: %v", phase, err)
			}
		}
		if got := shopServed.Load() - before; got != 0 {
			t.Fatalf("%s: %d blocked requests reached the shop's member", phase, got)
		}
		for _, h := range []string{"", passed} {
			if err := expect(shop, h, "yes", 200); err != nil {
				t.Fatalf("%s: %v", phase, err)
			}
		}
		// The neighbour's WAF route serves what the shop's rules block.
		nb := neighServed.Load()
		for _, h := range []string{"", "X-Evil", "X-Other"} {
			if err := expect(neigh, h, "yes", 200); err != nil {
				t.Fatalf("%s: the neighbour: %v", phase, err)
			}
		}
		if got := neighServed.Load() - nb; got != 3 {
			t.Fatalf("%s: the neighbour's member served %d of 3", phase, got)
		}
	}
	check("the first rule", "X-Evil", "X-Other")

	// Refused rules leave the running rules and the stored version alone.
	before, err := tl.lb("shop", "svc-web")
	if err != nil || before == nil {
		t.Fatalf("the shop's load balancer: %v %v", before, err)
	}
	for _, bad := range []struct{ rule, field, reason string }{
		{`SecRule ARGS "@pmFromFile /etc/passwd" "id:1004,phase:2,deny"`, "routes[0].waf.rules[1]", "reads a file"},
		{`SecRule REQUEST_HEADERS:X-Other "@streq yes" "id:100000,phase:1,deny"`, "routes[0].waf.rules[1]", "99999"},
		{`SecRule REQUEST_HEADERS:X-Other "@streq yes" "id:1005,phase:1,deny,exec:/bin/sh"`, "routes[0].waf.rules[1]", "exec"},
	} {
		ack, err := agent.change([]*pb.LoadBalancer{shopLB(evil, bad.rule)})
		if err != nil {
			t.Fatal(err)
		}
		stored, refused := verdicts(ack)
		msg := refused["svc-web"]
		t.Logf("refused %q: %s", bad.rule, msg)
		if len(stored) != 0 || !strings.Contains(msg, bad.field) || !strings.Contains(msg, bad.reason) {
			t.Fatalf("rule %q: stored %v, refused %q; want refused naming %s and %q", bad.rule, stored, msg, bad.field, bad.reason)
		}
		if len(msg) > 400 {
			t.Fatalf("the refusal is %d bytes long: %q", len(msg), msg)
		}
	}
	after, err := tl.lb("shop", "svc-web")
	if err != nil || syncspec.Version(after) != syncspec.Version(before) {
		t.Fatalf("the stored load balancer changed after refused rules: %v", err)
	}
	check("after the refused rules", "X-Evil", "X-Other")

	// A new rule replaces the old one.
	other := `SecRule REQUEST_HEADERS:X-Other "@streq yes" "id:1002,phase:1,deny,status:403"`
	ack, err = agent.change([]*pb.LoadBalancer{shopLB(other)})
	if err != nil {
		t.Fatal(err)
	}
	if stored, refused := verdicts(ack); len(stored) != 1 || len(refused) != 0 {
		t.Fatalf("the shop's new rule: stored %v, refused %v", stored, refused)
	}
	waitFor(t, startTimeout, "the shop's new rule in force", func() error {
		if err := expect(shop, "X-Evil", "yes", 200); err != nil {
			return err
		}
		return expect(shop, "X-Other", "yes", 403)
	})
	check("the new rule", "X-Other", "X-Evil")

	// The shop churns its rules as fast as its stream takes changes (31
	// regex rules and one that denies X-Evil with the change's number),
	// at 5 millicores: its builds past its budget wait (the metric counts
	// them) and are charged no more than the budget; the neighbour keeps
	// being served.
	const budget = 5
	if out, err := c.cli(n, "tenant", "update", "shop", "--waf-cpu-millicores", strconv.Itoa(budget)); err != nil {
		t.Fatalf("tenant update: %v\n%s", err, out)
	}
	churn := func(gen int) []string {
		var rules []string
		for i := range 31 {
			rules = append(rules, fmt.Sprintf(`SecRule REQUEST_HEADERS:X-Data "@rx (?:[a-z]+[0-9]+){4}q%d" "id:%d,phase:1,pass,nolog,t:none,t:lowercase"`, i, 2000+i))
		}
		return append(rules, fmt.Sprintf(`SecRule REQUEST_HEADERS:X-Evil "@streq %d" "id:1001,phase:1,deny,status:403"`, gen))
	}
	deferredBefore := metricOf(t, n, "teapot_lb_waf_rule_builds_total", map[string]string{"tenant": "shop", "outcome": "deferred"})
	cpuBefore := metricOf(t, n, "teapot_lb_waf_build_cpu_seconds_total", map[string]string{"tenant": "shop"})
	builtBefore := metricOf(t, n, "teapot_lb_waf_rule_builds_total", map[string]string{"tenant": "shop", "outcome": "built"})
	stop := make(chan struct{})
	neighbourDone := make(chan error, 1)
	var neighbourServed atomic.Int64
	go func() {
		ncl := edgeHTTPClient("127.0.0.1")
		for {
			select {
			case <-stop:
				neighbourDone <- nil
				return
			default:
			}
			code, err := twGet(ncl, neigh, "X-Evil", "yes")
			if err != nil || code != 200 {
				neighbourDone <- fmt.Errorf("the neighbour during the churn: %d %v", code, err)
				return
			}
			neighbourServed.Add(1)
		}
	}()
	start := time.Now()
	gen := 0
	for time.Since(start) < 3*time.Second {
		gen++
		ack, err := agent.change([]*pb.LoadBalancer{shopLB(churn(gen)...)})
		if err != nil {
			t.Fatal(err)
		}
		if _, refused := verdicts(ack); len(refused) != 0 {
			t.Fatalf("change %d refused: %v", gen, refused)
		}
	}
	elapsed := time.Since(start)
	close(stop)
	if err := <-neighbourDone; err != nil {
		t.Fatal(err)
	}
	deferred := metricOf(t, n, "teapot_lb_waf_rule_builds_total", map[string]string{"tenant": "shop", "outcome": "deferred"}) - deferredBefore
	built := metricOf(t, n, "teapot_lb_waf_rule_builds_total", map[string]string{"tenant": "shop", "outcome": "built"}) - builtBefore
	cpu := metricOf(t, n, "teapot_lb_waf_build_cpu_seconds_total", map[string]string{"tenant": "shop"}) - cpuBefore
	perBuild := cpu / max(built, 1)
	limit := elapsed.Seconds()*budget/1000 + 0.2*budget/1000 + 3*perBuild
	t.Logf("churn: %d changes in %v; the shop's builds: %.0f built (%.2f ms each), %.0f deferred, %.1f ms of CPU charged (its budget allows %.1f ms); the neighbour served %d requests meanwhile",
		gen, elapsed.Round(time.Millisecond), built, perBuild*1000, deferred, cpu*1000, limit*1000, neighbourServed.Load())
	if deferred == 0 {
		t.Fatalf("none of %d changes' builds waited for the shop's budget of %d millicores", gen, budget)
	}
	if cpu > limit {
		t.Fatalf("the shop's builds were charged %.1f ms of CPU in %v; its budget allows %.1f ms", cpu*1000, elapsed, limit*1000)
	}
	waitFor(t, startTimeout, "the shop's last rules in force", func() error {
		return expect(shop, "X-Evil", strconv.Itoa(gen), 403)
	})
}
