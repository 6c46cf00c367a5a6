package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// seen is what a routing test backend saw of a request.
type seen struct {
	Backend, Method, Path, Query, Host string
	Header                             http.Header
	Body                               string
}

// routingBackend answers every request with what it saw, as JSON, and an
// X-Backend header naming it; a request with ?sleep=DURATION waits that
// long first. It counts its requests and keeps the first 16 in got.
type routingBackend struct {
	addr string
	n    atomic.Int64
	got  chan seen
}

func startRoutingBackend(t testing.TB, name string) *routingBackend {
	t.Helper()
	rb := &routingBackend{got: make(chan seen, 16)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		body, _ := io.ReadAll(r.Body)
		s := seen{Backend: name, Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Host: r.Host, Header: r.Header, Body: string(body)}
		rb.n.Add(1)
		select {
		case rb.got <- s:
		default:
		}
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Remove-Me", "1")
		_ = json.NewEncoder(w).Encode(s)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rb.addr = ln.Addr().String()
	return rb
}

func ptr[T any](v T) *T { return &v }

// routingLB uses every route feature; each route is described where the
// test cases use it.
func routingLB(port int, b map[string]*routingBackend) *pb.LoadBalancer {
	pools := map[string]*pb.BackendPool{}
	for name, be := range b {
		pools[name] = &pb.BackendPool{Members: []*pb.Member{{Address: be.addr}}}
	}
	return &pb.LoadBalancer{
		Name: "gw", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.2"},
		Pools:     pools,
		Routes: []*pb.Route{
			// 0: the catch-all.
			{Host: "gw.acme.example", Path: "/", Pool: "main"},
			// 1: header and query matches, ORed; each ANDed with the path.
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{
				{Path: "/m/", Headers: []*pb.ValueMatch{{Name: "x-tester", Value: "yes"}}},
				{Path: "/m/", QueryParams: []*pb.ValueMatch{{Name: "beta", Value: "1"}}},
				{Path: "/m/", Headers: []*pb.ValueMatch{{Name: "X-Version", Value: "v[0-9]+", Type: "regex"}}, Method: "POST"},
			}, Pool: "beta"},
			// 2: a method match on the same path as 1, ranked first.
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Path: "/m/", Method: "DELETE"}}, Pool: "other"},
			// 3: regex and exact paths.
			{Host: "gw.acme.example", Path: `/items/[0-9]+`, PathType: "regex", Pool: "other"},
			{Host: "gw.acme.example", Path: "/items/7", PathType: "exact", Pool: "beta"},
			// 5: gRPC service and method.
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Grpc: &pb.GRPCMethodMatch{Service: "shop.v1.Cart", Method: "Add"}}}, Pool: "beta"},
			// 6: a 3:1 split.
			{Host: "gw.acme.example", Path: "/split/", Backends: []*pb.RouteBackend{{Pool: "main", Weight: ptr(uint32(3))}, {Pool: "other", Weight: ptr(uint32(1))}}},
			// 7: header modifiers both ways.
			{Host: "gw.acme.example", Path: "/headers/", Pool: "main", Filters: []*pb.RouteFilter{
				{RequestHeaderModifier: &pb.HeaderModifier{
					Set: []*pb.HeaderValue{{Name: "X-Set", Value: "set"}}, Add: []*pb.HeaderValue{{Name: "X-Add", Value: "added"}},
					Remove: []string{"X-Drop"}}},
				{ResponseHeaderModifier: &pb.HeaderModifier{
					Set: []*pb.HeaderValue{{Name: "X-Resp", Value: "r"}}, Remove: []string{"X-Remove-Me"}}},
			}},
			// 8, 9, 10: redirects.
			{Host: "gw.acme.example", Path: "/old/", Filters: []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{
				Path: &pb.PathModifier{ReplacePrefixMatch: ptr("/new/")}, StatusCode: 301}}}},
			{Host: "gw.acme.example", Path: "/secure", PathType: "exact", Filters: []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{
				Scheme: "https", Hostname: "www.acme.example"}}}},
			{Host: "gw.acme.example", Path: "/port", PathType: "exact", Filters: []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{
				Port: ptr(uint32(8080)), Path: &pb.PathModifier{ReplaceFullPath: ptr("/elsewhere")}, StatusCode: 307}}}},
			// 11: a rewrite of host and prefix.
			{Host: "gw.acme.example", Path: "/api/v1", Pool: "main", Filters: []*pb.RouteFilter{{UrlRewrite: &pb.URLRewrite{
				Hostname: "internal.acme.example", Path: &pb.PathModifier{ReplacePrefixMatch: ptr("/")}}}}},
			// 12: mirrored to "mirror".
			{Host: "gw.acme.example", Path: "/mirrored/", Pool: "main", Filters: []*pb.RouteFilter{{RequestMirror: &pb.RequestMirror{Pool: "mirror"}}}},
			// 13, 14: timeouts.
			{Host: "gw.acme.example", Path: "/slow-backend/", Pool: "main", Timeouts: &pb.RouteTimeouts{BackendRequest: dur(300 * time.Millisecond)}},
			{Host: "gw.acme.example", Path: "/slow-request/", Pool: "main", Timeouts: &pb.RouteTimeouts{Request: dur(300 * time.Millisecond)}},
			// 15: all weights 0, and an unavailable backend.
			{Host: "gw.acme.example", Path: "/zero/", Backends: []*pb.RouteBackend{{Pool: "main", Weight: ptr(uint32(0))}}},
			{Host: "gw.acme.example", Path: "/broken/", Backends: []*pb.RouteBackend{{Unavailable: true}}},
		},
	}
}

type routingCase struct {
	name          string
	method, path  string
	header        http.Header
	body          string
	wantStatus    int
	wantBackend   string
	check         func(t *testing.T, s seen, resp *http.Response)
	wantLocation  string
	wantNoBackend bool
}

func routingCases() []routingCase {
	return []routingCase{
		{name: "catch-all", path: "/m/x", wantBackend: "main"},
		{name: "header match", path: "/m/x", header: http.Header{"X-Tester": {"yes"}}, wantBackend: "beta"},
		{name: "header value differs", path: "/m/x", header: http.Header{"X-Tester": {"no"}}, wantBackend: "main"},
		{name: "query match", path: "/m/x?beta=1", wantBackend: "beta"},
		{name: "query value differs", path: "/m/x?beta=2", wantBackend: "main"},
		{name: "repeated header joined", path: "/m/x", header: http.Header{"X-Tester": {"yes", "yes"}}, wantBackend: "main"},
		{name: "query key escaped", path: "/m/x?a=1&be%74a=1", wantBackend: "beta"},
		{name: "query pair with semicolon skipped", path: "/m/x?beta=1;x=2", wantBackend: "main"},
		{name: "query invalid escape skipped", path: "/m/x?beta=%zz&beta=1", wantBackend: "beta"},
		{name: "query plus is a space", path: "/m/x?beta=1+", wantBackend: "main"},
		{name: "regex header and method", method: "POST", path: "/m/x", header: http.Header{"X-Version": {"v12"}}, wantBackend: "beta"},
		{name: "regex header whole value", method: "POST", path: "/m/x", header: http.Header{"X-Version": {"v12x"}}, wantBackend: "main"},
		{name: "method of the regex match", method: "GET", path: "/m/x", header: http.Header{"X-Version": {"v12"}}, wantBackend: "main"},
		{name: "method match ranks first", method: "DELETE", path: "/m/x", header: http.Header{"X-Tester": {"yes"}}, wantBackend: "other"},
		{name: "path outside the matches", path: "/mx", header: http.Header{"X-Tester": {"yes"}}, wantBackend: "main"},
		{name: "exact beats regex", path: "/items/7", wantBackend: "beta"},
		{name: "regex path", path: "/items/42", wantBackend: "other"},
		{name: "regex path whole", path: "/items/42/x", wantBackend: "main"},
		{name: "grpc method", method: "POST", path: "/shop.v1.Cart/Add", wantBackend: "beta"},
		{name: "grpc other method", method: "POST", path: "/shop.v1.Cart/Remove", wantBackend: "main"},
		{name: "request headers", path: "/headers/x", header: http.Header{"X-Drop": {"1"}, "X-Add": {"first"}, "X-Set": {"old"}}, wantBackend: "main",
			check: func(t *testing.T, s seen, resp *http.Response) {
				if s.Header.Get("X-Set") != "set" || s.Header.Get("X-Add") != "first,added" || s.Header.Get("X-Drop") != "" {
					t.Errorf("member saw X-Set %q X-Add %q X-Drop %q", s.Header.Get("X-Set"), s.Header.Get("X-Add"), s.Header.Get("X-Drop"))
				}
				if resp.Header.Get("X-Resp") != "r" || resp.Header.Get("X-Remove-Me") != "" || resp.Header.Get("X-Backend") != "main" {
					t.Errorf("response header %v", resp.Header)
				}
			}},
		{name: "redirect prefix", path: "/old/a/b?q=1", wantStatus: 301, wantLocation: "http://gw.acme.example:PORT/new/a/b?q=1"},
		{name: "redirect scheme and host", path: "/secure", wantStatus: 302, wantLocation: "https://www.acme.example/secure"},
		{name: "redirect port and path", method: "POST", path: "/port", wantStatus: 307, wantLocation: "http://gw.acme.example:8080/elsewhere"},
		{name: "rewrite", path: "/api/v1/users?id=3", wantBackend: "main",
			check: func(t *testing.T, s seen, _ *http.Response) {
				if s.Path != "/users" || s.Query != "id=3" || s.Host != "internal.acme.example" {
					t.Errorf("member saw path %q query %q host %q", s.Path, s.Query, s.Host)
				}
			}},
		{name: "rewrite of the bare prefix", path: "/api/v1", wantBackend: "main",
			check: func(t *testing.T, s seen, _ *http.Response) {
				if s.Path != "/" {
					t.Errorf("member saw path %q, want /", s.Path)
				}
			}},
		{name: "backend timeout", path: "/slow-backend/x?sleep=2s", wantStatus: 504, wantNoBackend: true},
		{name: "backend in time", path: "/slow-backend/x?sleep=10ms", wantBackend: "main"},
		{name: "request timeout", path: "/slow-request/x?sleep=2s", wantStatus: 504, wantNoBackend: true},
		{name: "weights all zero", path: "/zero/x", wantStatus: 500, wantNoBackend: true},
		{name: "unavailable backend", path: "/broken/x", wantStatus: 500, wantNoBackend: true},
	}
}

// TestRouteFeaturesHTTP1 compiles a load balancer using every route
// feature and sends requests through a real listener, engine and members
// over HTTP/1.1: each match kind, precedence, filters and timeouts.
func TestRouteFeaturesHTTP1(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"main", "beta", "other", "mirror"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	update(t, p, routingLB(port, bes))
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	runRoutingCases(t, routingCases(), func(method, path string, h http.Header, body string) (*http.Response, error) {
		return doVia(target, method, "http://gw.acme.example:"+portOf(target)+path, h, body)
	}, portOf(target))

	t.Run("split 3:1", func(t *testing.T) {
		counts := map[string]int{}
		const n = 400
		for range n {
			resp, err := doVia(target, "GET", "http://gw.acme.example/split/x", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			counts[resp.Header.Get("X-Backend")]++
		}
		// 3:1 of 400 is 300:100; binomial sd ~8.7, so 220..380 is > 9 sd.
		if counts["main"]+counts["other"] != n || counts["main"] < 220 || counts["main"] > 380 {
			t.Errorf("split %v, want about 300 main and 100 other", counts)
		}
	})

	t.Run("mirror", func(t *testing.T) {
		if n := bes["mirror"].n.Load(); n != 0 {
			t.Fatalf("the mirror pool served %d requests before", n)
		}
		resp, err := doVia(target, "POST", "http://gw.acme.example/mirrored/x?y=1", http.Header{"X-Trace": {"t1"}}, "payload")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var s seen
		if err := json.Unmarshal(data, &s); err != nil || s.Backend != "main" || s.Body != "payload" {
			t.Fatalf("main request: %s (%v)", data, err)
		}
		select {
		case m := <-bes["mirror"].got:
			if m.Method != "POST" || m.Path != "/mirrored/x" || m.Query != "y=1" || m.Body != "payload" || m.Header.Get("X-Trace") != "t1" {
				t.Errorf("mirror saw %+v", m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the mirror got no copy")
		}
	})
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

var viaClients sync.Map // target → *http.Client

// doVia sends one request to target whatever the URL's host says.
func doVia(target, method, url string, h http.Header, body string) (*http.Response, error) {
	c, ok := viaClients.Load(target)
	if !ok {
		var d net.Dialer
		c, _ = viaClients.LoadOrStore(target, &http.Client{
			Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, target)
			}},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout:       20 * time.Second,
		})
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return c.(*http.Client).Do(req)
}

// runRoutingCases runs cases with do, reading what the backend saw from
// the response body.
func runRoutingCases(t *testing.T, cases []routingCase, do func(method, path string, h http.Header, body string) (*http.Response, error), port string) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := do(tc.method, tc.path, tc.header, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			want := tc.wantStatus
			if want == 0 {
				want = 200
			}
			if resp.StatusCode != want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, data)
			}
			if tc.wantLocation != "" {
				if loc, w := resp.Header.Get("Location"), strings.ReplaceAll(tc.wantLocation, "PORT", port); loc != w {
					t.Errorf("Location %q, want %q", loc, w)
				}
			}
			if tc.wantBackend == "" {
				return
			}
			var s seen
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatalf("body %q: %v", data, err)
			}
			if s.Backend != tc.wantBackend {
				t.Errorf("served by %s, want %s", s.Backend, tc.wantBackend)
			}
			if tc.check != nil {
				tc.check(t, s, resp)
			}
		})
	}
}

// The engine's routes of an http listener, their extensions and the L7
// faces of the pools they use are built with the listener snapshot,
// before it is published: no request builds any of them.
func TestHTTPRoutesBuiltBeforePublish(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"main", "beta", "other", "mirror"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	update(t, p, routingLB(freePort(t), bes))
	l7s, exts := 0, 0
	for _, ls := range p.current.Load().listeners.All() {
		if !ls.Protocol.L7() {
			continue
		}
		l7s++
		if ls.http == nil {
			t.Fatalf("listener %s was published without its routes", ls.Name)
		}
		srs := ls.Routes.Routes()
		if len(ls.http.routes) != len(srs) {
			t.Errorf("listener %s: %d engine routes for %d compiled ones", ls.Name, len(ls.http.routes), len(srs))
		}
		for i := range srs {
			sr := &srs[i]
			r := ls.http.routes[sr]
			if r == nil {
				t.Fatalf("routes[%d] has no engine route", sr.Index)
			}
			if (r.Ext != nil) != (routeExt(ls, sr) != nil) {
				t.Errorf("routes[%d]: extension built %v, want %v", sr.Index, r.Ext != nil, routeExt(ls, sr) != nil)
			}
			if r.Ext != nil {
				exts++
			}
		}
		for _, lp := range ls.pools {
			if lp.http.Load() == nil {
				t.Errorf("pool %s of listener %s has no L7 face", lp.Spec.Name, ls.Name)
			}
		}
		if ls.Routes.Conditional() && ls.http.selector == nil {
			t.Errorf("listener %s has conditions but no selector", ls.Name)
		}
	}
	if l7s == 0 || exts == 0 {
		t.Fatalf("%d http listeners, %d routes with extensions: the load balancer does not show the point", l7s, exts)
	}
}

// TestListenerFindsItsLivePools: a listener finds the live pool of each
// compiled pool it uses, by looking through them when it has few and by
// its index when it has more than fewPools, and nothing for a pool it
// does not use.
func TestListenerFindsItsLivePools(t *testing.T) {
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	for _, n := range []int{1, fewPools, fewPools + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
			lb := &pb.LoadBalancer{Name: "many", Tenant: "acme", Status: &pb.LoadBalancerStatus{Address: "127.0.0.9"},
				Listeners: []*pb.Listener{{Port: uint32(freePort(t)), Protocol: "http"}}, Pools: map[string]*pb.BackendPool{}}
			for i := range n {
				name := fmt.Sprintf("p%02d", i)
				lb.Pools[name] = &pb.BackendPool{Members: []*pb.Member{{Address: fmt.Sprintf("127.0.1.%d:80", i+1)}}}
				lb.Routes = append(lb.Routes, &pb.Route{Host: "shop.acme.example", Path: "/" + name, Pool: name})
			}
			update(t, p, lb)
			var ls *ListenerSnapshot
			for _, l := range p.current.Load().listeners.All() {
				ls = l
			}
			if ls == nil {
				t.Fatal("no listener served")
			}
			if got := len(ls.Listener.Pools()); got != n || len(ls.pools) != n || (ls.byPool != nil) != (n > fewPools) {
				t.Fatalf("%d compiled pools, %d live, indexed %v", got, len(ls.pools), ls.byPool != nil)
			}
			for _, sp := range ls.Listener.Pools() {
				if lp := ls.Pool(sp); lp == nil || lp.Spec != sp {
					t.Errorf("pool %s: live pool %v", sp.Name, lp)
				}
			}
			if lp := ls.Pool(&snapshot.Pool{Name: "p00"}); lp != nil {
				t.Errorf("a pool the listener does not use has the live pool of %s", lp.Spec.Name)
			}
			if lp := ls.Backend(); lp != nil {
				t.Errorf("an http listener has a backend: %s", lp.Spec.Name)
			}
		})
	}
}
