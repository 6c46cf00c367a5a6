package snapshot

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
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
