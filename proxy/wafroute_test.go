package proxy

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// wafMember counts the requests it gets and answers 200.
func wafMember(t *testing.T) (string, *atomic.Int64) {
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), &n
}

// TestWAFBlocksAttacksOverRealSockets: a route with waf block answers
// attacks (query, path and a form body) with 403 naming the rules, and
// the member never sees them; ordinary requests are served, over HTTP/1.1
// and HTTP/2. A route in detect mode serves the attack and counts it.
func TestWAFBlocksAttacksOverRealSockets(t *testing.T) {
	addr, got := wafMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "web", "127.0.0.2", port, addr)
	lb.Routes = []*pb.Route{
		{Path: "/detect", Pool: "app", Waf: &pb.WAF{Mode: "detect"}},
		{Path: "/", Pool: "app", Waf: &pb.WAF{Mode: "block", ParanoiaLevel: 1}},
	}
	// A budget the race detector's slower inspections cannot spend:
	// this test is about what the rules answer (the budget has its own).
	if err := p.Update(wafRoomy(labObjects(lb)), 1); err != nil {
		t.Fatal(err)
	}
	if st := p.Status()["acme/web"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	base := "http://" + vipAddr("127.0.0.2", port)
	h1 := sourceClient(t, "127.0.0.3")
	h2 := h2cOwnClient(t, vipAddr("127.0.0.2", port))
	do := func(c *http.Client, method, target, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+target, strings.NewReader(body))
		req.Header.Set("User-Agent", "Mozilla/5.0")
		req.Header.Set("Accept", "text/html")
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for name, c := range map[string]*http.Client{"HTTP/1.1": h1, "HTTP/2": h2} {
		before := got.Load()
		for _, a := range []struct{ method, target, body string }{
			{"GET", "/search?q=" + url.QueryEscape("1' OR '1'='1"), ""},
			{"GET", "/?x=" + url.QueryEscape("<script>alert(1)</script>"), ""},
			{"GET", "/files?name=" + url.QueryEscape("../../../etc/passwd"), ""},
			{"POST", "/login", "user=admin&pass=" + url.QueryEscape("' OR 1=1--")},
		} {
			resp := do(c, a.method, a.target, a.body)
			if resp.StatusCode != 403 {
				t.Errorf("%s %s %s: %d, want 403", name, a.method, a.target, resp.StatusCode)
			}
		}
		if n := got.Load() - before; n != 0 {
			t.Errorf("%s: the member got %d attacks", name, n)
		}
		for _, target := range []string{"/", "/shop/items?id=42&sort=price"} {
			if resp := do(c, "GET", target, ""); resp.StatusCode != 200 {
				t.Errorf("%s GET %s: %d", name, target, resp.StatusCode)
			}
		}
		if resp := do(c, "POST", "/form", "name=Ada&city=London"); resp.StatusCode != 200 {
			t.Errorf("%s ordinary POST: %d", name, resp.StatusCode)
		}
	}
	if resp := do(h1, "GET", "/detect?q="+url.QueryEscape("1' OR '1'='1"), ""); resp.StatusCode != 200 {
		t.Errorf("detect mode: %d, want the request served", resp.StatusCode)
	}
	st := p.WAFStats("acme")
	if st.Blocked != 8 || st.Detected != 1 || st.Inspected != 15 {
		t.Fatalf("WAF stats %+v", st)
	}
}

// wafRoomy gives tenant acme of objs a WAF CPU budget of 64 cores, which
// no inspection under the race detector spends.
func wafRoomy(objs []*pb.Object) []*pb.Object {
	for _, o := range objs {
		if t := o.GetTenant(); t.GetName() == "acme" {
			t.Quotas = &pb.Quotas{WafCpuMillicores: 64000}
		}
	}
	return objs
}

// TestWAFCPUChargedToItsTenant: a tenant whose WAF spent its CPU budget
// gets 429 for its WAF routes, while another tenant's WAF route keeps
// serving.
func TestWAFCPUChargedToItsTenant(t *testing.T) {
	addr, _ := wafMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	noisy := httpLB("globex", "web", "127.0.0.2", port, addr)
	noisy.Routes[0].Waf = &pb.WAF{Mode: "block"}
	quiet := httpLB("acme", "web", "127.0.0.5", port, addr)
	quiet.Routes[0].Waf = &pb.WAF{Mode: "block"}
	objs := append(wafRoomy(labObjects(noisy, quiet)), &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"},
		Quotas: &pb.Quotas{WafCpuMillicores: 1}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	c := sourceClient(t, "127.0.0.3")
	refused := 0
	deadline := time.Now().Add(10 * time.Second)
	for refused == 0 && time.Now().Before(deadline) {
		code, err := get(c, "http://"+vipAddr("127.0.0.2", port)+"/?page=1")
		if err != nil {
			t.Fatal(err)
		}
		if code == 429 {
			refused++
		}
	}
	if refused == 0 || p.WAFStats("globex").Refused == 0 {
		t.Fatalf("globex at 1 millicore was never refused: %+v", p.WAFStats("globex"))
	}
	for range 20 {
		if code, err := get(c, "http://"+vipAddr("127.0.0.5", port)+"/?page=1"); err != nil || code != 200 {
			t.Fatalf("acme's WAF route: %d %v", code, err)
		}
	}
	if st := p.WAFStats("acme"); st.Refused != 0 || st.Inspected != 20 {
		t.Fatalf("acme %+v", st)
	}
}

// TestWAFChargedItsCPUNotItsWallTime: with one P, the WAF cannot use
// more than one core, so a tenant with a budget of one core
// (wafCpuMillicores 1000) is never refused however many requests wait
// for the core at once. Charged wall time, each of 16 concurrent
// inspections would pay for the others' turns too (about 16 cores).
func TestWAFChargedItsCPUNotItsWallTime(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	addr, _ := wafMember(t)
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := httpLB("acme", "web", "127.0.0.2", port, addr)
	lb.Routes[0].Waf = &pb.WAF{Mode: "block"}
	objs := labObjects(lb)
	for _, o := range objs {
		if tn := o.GetTenant(); tn.GetName() == "acme" {
			tn.Quotas = &pb.Quotas{WafCpuMillicores: 1000}
		}
	}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	const clients, each = 16, 2
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range clients {
		wg.Add(1)
		c := sourceClient(t, "127.0.0.3")
		go func() {
			defer wg.Done()
			for range each {
				if code, err := get(c, "http://"+vipAddr("127.0.0.2", port)+"/shop/items?id=42&sort=price"); err != nil || code != 200 {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if st := p.WAFStats("acme"); bad.Load() != 0 || st.Refused != 0 || st.Inspected != clients*each {
		t.Fatalf("%d requests not served; WAF stats %+v", bad.Load(), st)
	}
}
