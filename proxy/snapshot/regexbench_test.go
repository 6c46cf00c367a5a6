package snapshot

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// routeTable compiles routes of one load balancer into its http table.
func routeTable(tb testing.TB, routes ...*pb.Route) *RouteTable {
	tb.Helper()
	lb := tcpLB("gw", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	for _, r := range routes {
		if r.Pool == "" {
			r.Pool = "app"
		}
	}
	lb.Routes = routes
	s := Compile(objs(lb), 1, Defaults{}, nil)
	if ps := problemsOf(s, "acme/gw"); len(ps) > 0 {
		tb.Fatalf("problems: %v", ps)
	}
	return s.Listener(key("192.0.2.1:80", TCP)).Routes
}

// typicalRegexRoutes are ten regex routes of the kind written in
// practice, behind a catch-all prefix.
func typicalRegexRoutes() []*pb.Route {
	rs := []*pb.Route{{Path: "/"}}
	for i := range 10 {
		rs = append(rs, &pb.Route{Path: fmt.Sprintf("/api/v[0-9]+/svc%d/[0-9a-f]{8}-[0-9a-f]{4}/.*", i), PathType: "regex"})
	}
	return rs
}

// hostileRegexRoutes fill the load balancer's instruction budget with
// expressions that keep hundreds of threads alive on every byte.
func hostileRegexRoutes() []*pb.Route {
	rs := []*pb.Route{{Path: "/"}}
	for i := range 4 {
		rs = append(rs, &pb.Route{Path: fmt.Sprintf("/(?:[a-z/]?){240}x{9}%d", i), PathType: "regex"})
	}
	return rs
}

// BenchmarkRegexMatch is what matching one request costs: a plain
// prefix table, typical regex routes, and a load balancer at the
// instruction budget with hostile expressions and a 1 KiB path.
func BenchmarkRegexMatch(b *testing.B) {
	long := "/" + strings.Repeat("abcdefghi/", 102)[:1020]
	for _, bc := range []struct {
		name   string
		routes []*pb.Route
		path   string
	}{
		{"plain-prefix", []*pb.Route{{Path: "/"}, {Path: "/api"}}, "/api/v2/users/42"},
		{"typical-hit", typicalRegexRoutes(), "/api/v2/svc9/0123abcd-ef01/x"},
		{"typical-miss", typicalRegexRoutes(), "/static/app.js"},
		{"typical-long-path", typicalRegexRoutes(), long},
		{"hostile-1KiB-path", hostileRegexRoutes(), long},
	} {
		rt := routeTable(b, bc.routes...)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if rt.Match("", bc.path) == nil {
					b.Fatal("no route")
				}
			}
		})
	}
}

// Lookup without regexes routes what is decided before any regular
// expression would run and stops (blocked) where one would: a request's
// route is never one that a regex would have beaten.
func TestLookupWithoutRegex(t *testing.T) {
	t.Parallel()
	rt := routeTable(t,
		&pb.Route{Path: "/", Pool: "app"},
		&pb.Route{Path: "/health", PathType: "exact", Pool: "app"},
		&pb.Route{Path: "/api/v[0-9]+/.*", PathType: "regex", Pool: "app"},
		&pb.Route{Host: "cond.acme.example", Matches: []*pb.RouteMatch{{Path: "/x", PathType: "exact",
			Headers: []*pb.ValueMatch{{Name: "x-v", Type: "exact", Value: "1"}, {Name: "x-re", Type: "regex", Value: "[a-z]+"}}}}, Pool: "app"},
	)
	if !rt.Regex() {
		t.Fatal("table with regexes says none")
	}
	tests := []struct {
		host, path  string
		headers     []string
		wantPath    string // "" for no route
		wantBlocked bool
	}{
		{"", "/health", nil, "/health", false},                    // exact: decided before any regex
		{"", "/api/v1/x", nil, "", true},                          // the regex route
		{"", "/static/app.js", nil, "", true},                     // a prefix: a regex ranks above it
		{"", "/" + strings.Repeat("a", 1100), nil, "/", false},    // longer than any regex sees
		{"cond.acme.example", "/x", []string{"x-v: 2"}, "", true}, // exact condition fails, then the any-host regexes
		{"cond.acme.example", "/x", []string{"x-v: 1", "x-re: abc"}, "", true},
	}
	for _, tt := range tests {
		r, blocked := rt.Lookup(tt.host, tt.path, reqview.HTTP{R: req("GET /", tt.headers...)}, false)
		got := ""
		if r != nil {
			got = r.Path
		}
		if got != tt.wantPath || blocked != tt.wantBlocked {
			t.Errorf("Lookup(%s, %.20s) without regexes = %q, blocked %v; want %q, %v", tt.host, tt.path, got, blocked, tt.wantPath, tt.wantBlocked)
		}
		// With regexes allowed it is Select, never blocked.
		r, blocked = rt.Lookup(tt.host, tt.path, reqview.HTTP{R: req("GET /", tt.headers...)}, true)
		if want := rt.MatchRequest(tt.host, tt.path, req("GET /", tt.headers...)); blocked || r != want {
			t.Errorf("Lookup(%s, %.20s) with regexes = %v, %v; want Select's %v", tt.host, tt.path, r, blocked, want)
		}
	}
	if got, want := rt.RegexSteps(10), 0; got <= want {
		t.Errorf("RegexSteps(10) = %d, want > 0", got)
	}
	if got := rt.RegexSteps(2000); got != rt.condInsts*(1024+1) {
		t.Errorf("RegexSteps of a path no regex sees = %d, want the conditions' %d", got, rt.condInsts*1025)
	}
}

// The compile checks a load balancer's regular expressions with the
// API's predicate: a route that takes them over MaxRegexInstsPerLB is
// skipped with the API's reason, the routes before it served.
func TestCompileSkipsRoutesOverTheRegexBudget(t *testing.T) {
	t.Parallel()
	lb := tcpLB("gw", "192.0.2.1", 22, "10.20.0.1:22")
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 80, Protocol: "http"})
	for i := range 5 { // ~490 instructions each: the fifth is over 2,000
		lb.Routes = append(lb.Routes, &pb.Route{Path: fmt.Sprintf("/(?:[a-z/]?){240}x{9}%d", i), PathType: "regex", Pool: "app"})
	}
	s := Compile(objs(lb), 1, Defaults{}, nil)
	ps := problemsOf(s, "acme/gw")
	if len(ps) != 1 || !strings.Contains(ps[0].Field, "routes[4]") || !strings.Contains(ps[0].Reason, "at most 2000 per load balancer") {
		t.Fatalf("problems %v; want routes[4] skipped over the per-LB instruction bound", ps)
	}
	if n := len(s.Listener(key("192.0.2.1:80", TCP)).Routes.Routes()); n != 4 {
		t.Errorf("%d routes served, want 4", n)
	}
}

// A literal prefix decides most mismatches without the engine, and an
// expression that is all literal is an equality.
func TestRegexLiteralPrefix(t *testing.T) {
	t.Parallel()
	re, err := compileRegex(`/api/v[0-9]+`)
	if err != nil {
		t.Fatal(err)
	}
	if re.prefix != "/api/v" || re.literal {
		t.Errorf("prefix %q literal %v; want /api/v, false", re.prefix, re.literal)
	}
	lit, err := compileRegex(`/exact`)
	if err != nil || !lit.literal || !lit.MatchString("/exact") || lit.MatchString("/exactly") {
		t.Errorf("literal expression: %+v, %v", lit, err)
	}
	for s, want := range map[string]bool{"/api/v2": true, "/api/vx": false, "/apx/v2": false, "/api/v2/": false} {
		if re.MatchString(s) != want {
			t.Errorf("%s: %v, want %v", s, !want, want)
		}
	}
}
