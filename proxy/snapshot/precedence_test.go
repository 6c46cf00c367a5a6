package snapshot

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/proto"
)

// compileRoutes compiles routes of one http load balancer, every route to
// pool "app", and returns its route table; the test fails on problems.
func compileRoutes(t *testing.T, routes ...*pb.Route) *RouteTable {
	t.Helper()
	lb := tcpLB("gw", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	lb.Pools["other"] = &pb.BackendPool{Members: members("10.20.0.2:80")}
	for _, r := range routes {
		if r.Pool == "" && len(r.Backends) == 0 && len(r.Filters) == 0 {
			r.Pool = "app"
		}
	}
	lb.Routes = routes
	s := Compile(objs(lb), 1, Defaults{}, nil)
	if ps := problemsOf(s, "acme/gw"); len(ps) > 0 {
		t.Fatalf("problems: %v", ps)
	}
	return s.Listener(key("192.0.2.1:80", TCP)).Routes
}

// req is a request for MatchRequest: "METHOD /path?query", headers as
// "Name: value" lines.
func req(line string, headers ...string) *http.Request {
	method, target, _ := strings.Cut(line, " ")
	r, err := http.NewRequest(method, "http://x"+target, nil)
	if err != nil {
		panic(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Add(k, v)
	}
	return r
}

func hdr(name, value string) *pb.ValueMatch { return &pb.ValueMatch{Name: name, Value: value} }

// name identifies a matched route as "routes[i].matches[j]", or "none".
func name(r *Route) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("routes[%d].matches[%d]", r.Index, r.Ext.matchIndex())
}

// The precedence rules of the Gateway API (HTTPRouteRule: exact path, then
// the longest prefix, then a method, then the most header matches, then
// the most query parameter matches, then the order written), each shown by
// a pair of routes where the other criteria would pick the loser.
func TestRoutePrecedence(t *testing.T) {
	m := func(path, pt string) *pb.RouteMatch { return &pb.RouteMatch{Path: path, PathType: pt} }
	tests := []struct {
		name   string
		routes []*pb.Route
		host   string
		req    *http.Request
		want   string
	}{
		{"exact path beats a prefix with more conditions", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/foo", Method: "GET", Headers: []*pb.ValueMatch{hdr("a", "1"), hdr("b", "2")}}}},
			{Matches: []*pb.RouteMatch{m("/foo", "exact")}},
		}, "", req("GET /foo", "a: 1", "b: 2"), "routes[1].matches[0]"},
		{"longer prefix beats a method", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/foo", Method: "GET"}}},
			{Matches: []*pb.RouteMatch{m("/foo/bar", "")}},
		}, "", req("GET /foo/bar/baz"), "routes[1].matches[0]"},
		{"prefixes by segment", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/foo", "")}},
			{Matches: []*pb.RouteMatch{m("/foo/bar", "")}},
		}, "", req("GET /foo/barn"), "routes[0].matches[0]"},
		{"method beats headers", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1"), hdr("b", "2")}}}},
			{Matches: []*pb.RouteMatch{{Path: "/", Method: "GET"}}},
		}, "", req("GET /x", "a: 1", "b: 2"), "routes[1].matches[0]"},
		{"more headers beat fewer", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1"), hdr("b", "2")}}}},
		}, "", req("GET /x", "a: 1", "b: 2"), "routes[1].matches[0]"},
		{"headers beat query parameters", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", QueryParams: []*pb.ValueMatch{hdr("p", "1"), hdr("q", "2")}}}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
		}, "", req("GET /x?p=1&q=2", "a: 1"), "routes[1].matches[0]"},
		{"more query parameters beat fewer", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", QueryParams: []*pb.ValueMatch{hdr("p", "1")}}}},
			{Matches: []*pb.RouteMatch{{Path: "/", QueryParams: []*pb.ValueMatch{hdr("p", "1"), hdr("q", "2")}}}},
		}, "", req("GET /x?p=1&q=2"), "routes[1].matches[0]"},
		{"a tie goes to the route written first", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("b", "2")}}}},
		}, "", req("GET /x", "a: 1", "b: 2"), "routes[0].matches[0]"},
		{"then to the match written first", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("b", "2")}}, {Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
		}, "", req("GET /x", "a: 1", "b: 2"), "routes[0].matches[0]"},
		{"matches are ORed", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("b", "2")}}, {Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
		}, "", req("GET /x", "a: 1"), "routes[1].matches[1]"},
		{"conditions inside a match are ANDed", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", Method: "POST", Headers: []*pb.ValueMatch{hdr("a", "1")}, QueryParams: []*pb.ValueMatch{hdr("p", "1")}}}},
		}, "", req("POST /x?p=1", "a: 2"), "routes[0].matches[0]"},
		{"failed conditions fall back to a shorter prefix", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/foo", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
		}, "", req("GET /foo/x"), "routes[0].matches[0]"},
		{"failed conditions fall back to a wildcard host", []*pb.Route{
			{Host: "*.acme.example", Matches: []*pb.RouteMatch{m("/", "")}},
			{Host: "shop.acme.example", Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
		}, "shop.acme.example", req("GET /x"), "routes[0].matches[0]"},
		{"exact host beats a wildcard with more conditions", []*pb.Route{
			{Host: "*.acme.example", Matches: []*pb.RouteMatch{{Path: "/foo", PathType: "exact", Method: "GET"}}},
			{Host: "shop.acme.example", Matches: []*pb.RouteMatch{m("/", "")}},
		}, "shop.acme.example", req("GET /foo"), "routes[1].matches[0]"},
		{"regex between exact and prefix", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/items/long/prefix", "")}},
			{Matches: []*pb.RouteMatch{m("/items/.*", "regex")}},
		}, "", req("GET /items/long/prefix/x"), "routes[1].matches[0]"},
		{"header names are case-insensitive, values exact", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("x-VERSION", "One")}}}},
		}, "", req("GET /", "X-Version: One"), "routes[1].matches[0]"},
		{"header values compare case-sensitively", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{hdr("x-version", "One")}}}},
		}, "", req("GET /", "X-Version: one"), "routes[0].matches[0]"},
		{"a repeated header matches its joined values", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", Headers: []*pb.ValueMatch{{Name: "x-v", Value: "a, b"}}}}},
		}, "", req("GET /", "X-V: a", "X-V: b"), "routes[1].matches[0]"},
		{"query parameter names are case-sensitive", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", QueryParams: []*pb.ValueMatch{hdr("Beta", "1")}}}},
		}, "", req("GET /?beta=1"), "routes[0].matches[0]"},
		{"regex values match whole", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Path: "/", QueryParams: []*pb.ValueMatch{{Name: "v", Value: "[0-9]+", Type: "regex"}}}}},
		}, "", req("GET /?v=12a"), "routes[0].matches[0]"},
		{"nothing matches", []*pb.Route{
			{Matches: []*pb.RouteMatch{{Path: "/", Method: "PUT"}}},
		}, "", req("GET /"), "none"},
		{"grpc service only", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Grpc: &pb.GRPCMethodMatch{Service: "a.B"}}}},
		}, "", req("POST /a.B/Get"), "routes[1].matches[0]"},
		{"grpc method only", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Grpc: &pb.GRPCMethodMatch{Method: "Get"}}}},
		}, "", req("POST /a.B/Get"), "routes[1].matches[0]"},
		{"grpc regex", []*pb.Route{
			{Matches: []*pb.RouteMatch{m("/", "")}},
			{Matches: []*pb.RouteMatch{{Grpc: &pb.GRPCMethodMatch{Service: `a\..*`, Method: "Get|Put", Type: "regex"}}}},
		}, "", req("POST /a.C/Put"), "routes[1].matches[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := compileRoutes(t, tc.routes...)
			host := tc.host
			if host == "" {
				host = "any.acme.example"
			}
			if got := name(rt.MatchRequest(host, tc.req.URL.Path, tc.req)); got != tc.want {
				t.Errorf("matched %s, want %s", got, tc.want)
			}
		})
	}
}

// Match (without the request) returns the first candidate in precedence
// order; a conditional one tells the caller to ask MatchRequest.
func TestRouteMatchFirstCandidate(t *testing.T) {
	rt := compileRoutes(t,
		&pb.Route{Path: "/", Pool: "app"},
		&pb.Route{Matches: []*pb.RouteMatch{{Path: "/api", Headers: []*pb.ValueMatch{hdr("a", "1")}}}},
		&pb.Route{Path: "/static", Pool: "other", Timeouts: &pb.RouteTimeouts{Request: dur(time.Second)}},
	)
	if !rt.Conditional() {
		t.Fatal("table with a header match is not conditional")
	}
	if r := rt.Match("x.acme.example", "/api/x"); r == nil || !r.Conditional() || r.Index != 1 {
		t.Errorf("Match /api/x = %+v, want the conditional routes[1]", r)
	}
	if r := rt.Match("x.acme.example", "/static/x"); r == nil || r.Conditional() || r.Index != 2 || r.Ext.RequestTimeout != time.Second {
		t.Errorf("Match /static/x = %+v, want routes[2] with its timeout", r)
	}
	if r := rt.Match("x.acme.example", "/other"); r == nil || r.Index != 0 || r.Ext != nil {
		t.Errorf("Match /other = %+v, want the plain routes[0]", r)
	}
}

// A load balancer changed elsewhere keeps its listener when its routes
// compile alike (the snapshot part is reused); a change of a weight, a
// condition or a filter makes a new one.
func TestRouteExtEquality(t *testing.T) {
	route := &pb.Route{Matches: []*pb.RouteMatch{{Path: "/a", Headers: []*pb.ValueMatch{hdr("a", "1")}}},
		Backends: []*pb.RouteBackend{{Pool: "app", Weight: proto.Uint32(3)}, {Pool: "other"}},
		Filters:  []*pb.RouteFilter{{RequestMirror: &pb.RequestMirror{Pool: "other"}}}}
	lbWith := func(r *pb.Route, spare string) *pb.LoadBalancer {
		lb := tcpLB("gw", "192.0.2.1", 22, "10.20.0.1:22")
		lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
		lb.Pools["other"] = &pb.BackendPool{Members: members("10.20.0.2:80")}
		lb.Pools[spare] = &pb.BackendPool{Members: members("10.20.0.3:80")}
		lb.Routes = []*pb.Route{r}
		return lb
	}
	k := key("192.0.2.1:80", TCP)
	s1 := Compile(objs(lbWith(proto.Clone(route).(*pb.Route), "spare")), 1, Defaults{}, nil)
	if ps := problemsOf(s1, "acme/gw"); len(ps) > 0 {
		t.Fatalf("problems: %v", ps)
	}
	s2 := Compile(objs(lbWith(proto.Clone(route).(*pb.Route), "spare2")), 2, Defaults{}, s1)
	if s2 == s1 || s2.Listener(k) != s1.Listener(k) {
		t.Error("a change outside the routes made a new http listener")
	}
	changes := []func(r *pb.Route){
		func(r *pb.Route) { r.Backends[0].Weight = proto.Uint32(4) },
		func(r *pb.Route) { r.Matches[0].Headers[0].Value = "2" },
		func(r *pb.Route) { r.Filters[0].RequestMirror.Percent = proto.Uint32(50) },
	}
	for i, ch := range changes {
		r := proto.Clone(route).(*pb.Route)
		ch(r)
		if s3 := Compile(objs(lbWith(r, "spare")), 3, Defaults{}, s1); s3.Listener(k) == s1.Listener(k) {
			t.Errorf("change %d kept the listener", i)
		}
	}
	rt1 := s1.Listener(k).Routes
	var pools []string
	for _, p := range (&Listener{Routes: rt1}).Pools() {
		pools = append(pools, p.Name)
	}
	if slices.Sort(pools); !slices.Equal(pools, []string{"app", "other"}) {
		t.Errorf("listener pools %v, want app and other (a backend and a mirror)", pools)
	}
}

// FuzzRouteMatchRequest checks, for any host, path, header and query, that
// matching never fails, that a route Match returns without conditions is
// the one MatchRequest returns, and that a returned route matches the
// path as its type says.
func FuzzRouteMatchRequest(f *testing.F) {
	f.Add("shop.acme.example", "/api/v2/x", "v2", "beta=1")
	f.Add("a.acme.example:80", "/items/12", "", "")
	f.Add("", "//..%2f/", "\x00", "%zz")
	f.Fuzz(func(t *testing.T, host, path, hv, query string) {
		rt := fuzzTable(t)
		r, err := http.NewRequest("GET", "http://x/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.URL.RawQuery = query
		r.Header.Set("X-Version", hv)
		first := rt.Match(host, path)
		got := rt.MatchRequest(host, path, r)
		if first != nil && !first.Conditional() && got != first {
			t.Fatalf("Match %s but MatchRequest %s", name(first), name(got))
		}
		if first == nil && got != nil {
			t.Fatalf("Match found nothing but MatchRequest %s", name(got))
		}
		if got == nil {
			return
		}
		p := path
		if p == "" {
			p = "/"
		}
		switch got.PathType {
		case PathExact:
			if p != got.Path {
				t.Fatalf("exact %q matched %q", got.Path, p)
			}
		case PathRegex:
			if !got.Ext.PathRegex.MatchString(p) {
				t.Fatalf("regex %q matched %q", got.Path, p)
			}
		default:
			if got.Path != "/" && p != got.Path && !strings.HasPrefix(strings.TrimRight(p, "/")+"/", got.Path+"/") {
				t.Fatalf("prefix %q matched %q", got.Path, p)
			}
		}
	})
}

var fuzzRoutes struct {
	once sync.Once
	rt   *RouteTable
}

func fuzzTable(t *testing.T) *RouteTable {
	fuzzRoutes.once.Do(func() {
		fuzzRoutes.rt = compileRoutes(t,
			&pb.Route{Path: "/"},
			&pb.Route{Host: "shop.acme.example", Path: "/api", PathType: "exact"},
			&pb.Route{Host: "shop.acme.example", Matches: []*pb.RouteMatch{
				{Path: "/api/", Headers: []*pb.ValueMatch{{Name: "X-Version", Value: "v[0-9]+", Type: "regex"}}},
				{Path: "/api/v2", QueryParams: []*pb.ValueMatch{hdr("beta", "1")}},
			}},
			&pb.Route{Host: "*.acme.example", Path: `/items/[0-9]+`, PathType: "regex"},
			&pb.Route{Host: "*.acme.example", Matches: []*pb.RouteMatch{{Grpc: &pb.GRPCMethodMatch{Method: "Get"}}}},
		)
	})
	return fuzzRoutes.rt
}
