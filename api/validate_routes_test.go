package api

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func strp(s string) *string { return &s }

// gwLB is shopLB with a second pool and a route using matches, weighted
// backends and filters.
func gwLB() *pb.LoadBalancer {
	lb := shopLB()
	lb.Pools["canary"] = &pb.BackendPool{Members: []*pb.Member{{Address: "10.20.0.21:30080"}}}
	lb.Routes = append(lb.Routes, &pb.Route{
		Host: "shop.acme.example",
		Matches: []*pb.RouteMatch{
			{Path: "/cart/", Headers: []*pb.ValueMatch{{Name: "X-Version", Value: "v[0-9]+", Type: "regex"}}, Method: "POST"},
			{Path: "/cart/", QueryParams: []*pb.ValueMatch{{Name: "canary", Value: "1"}}},
		},
		Backends: []*pb.RouteBackend{{Pool: "web", Weight: weight(90)}, {Pool: "canary", Weight: weight(10)}},
		Filters: []*pb.RouteFilter{
			{RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Lb", Value: "teapot"}}, Remove: []string{"X-Debug"}}},
			{UrlRewrite: &pb.URLRewrite{Hostname: "cart.internal", Path: &pb.PathModifier{ReplacePrefixMatch: strp("/")}}},
			{RequestMirror: &pb.RequestMirror{Pool: "canary", Percent: weight(10)}},
		},
		Timeouts: &pb.RouteTimeouts{Request: dur(10 * time.Second), BackendRequest: dur(2 * time.Second)},
	})
	return lb
}

// Every field of a route's matches, backends, filters and timeouts is
// checked at the API edge, with an error naming it.
func TestValidateRouteFeatures(t *testing.T) {
	r := func(lb *pb.LoadBalancer) *pb.Route { return lb.Routes[2] }
	m := func(lb *pb.LoadBalancer) *pb.RouteMatch { return lb.Routes[2].Matches[0] }
	const f = "routes[2]"
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"valid", func(lb *pb.LoadBalancer) {}, pass()},
		{"path with matches", func(lb *pb.LoadBalancer) { r(lb).Path = "/x" }, bad(f+".path", "leave path and pathType out")},
		{"too many matches", func(lb *pb.LoadBalancer) {
			for range MaxRouteMatches {
				r(lb).Matches = append(r(lb).Matches, &pb.RouteMatch{Path: "/m"})
			}
		}, bad(f+".matches", "at most 64")},
		{"match path relative", func(lb *pb.LoadBalancer) { m(lb).Path = "cart" }, bad(f+".matches[0].path", "must start with /")},
		{"match path type", func(lb *pb.LoadBalancer) { m(lb).PathType = "glob" }, bad(f+".matches[0].pathType", "not one of prefix, exact, regex")},
		{"regex path", func(lb *pb.LoadBalancer) {
			m(lb).Path, m(lb).PathType = `/items/[0-9]+`, "regex"
			r(lb).Filters[1].UrlRewrite.Path = nil
		}, pass()},
		{"regex path broken", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).PathType = `/items/(`, "regex" }, bad(f+".matches[0].path", "not a regular expression")},
		{"regex too complex", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).PathType = `/(a{1,1000}){1,1000}`, "regex" }, bad(f+".matches[0].path", "")},
		{"regex too big", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).PathType = `/(?:[a-z]{1,200}){1,4}`, "regex" }, bad(f+".matches[0].path", "instructions; at most 1000")},
		{"regex repeat", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).PathType = `/[a-z]{1,900}`, "regex" }, bad(f+".matches[0].path", "repeats something 900 times; a repetition count ({n} or {n,m}) is at most 256")},
		{"regex too long", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).PathType = "/"+strings.Repeat("a", MaxRegexLen), "regex" }, bad(f+".matches[0].path", "at most 1024")},
		{"regex budget", func(lb *pb.LoadBalancer) {
			for i := range 60 {
				r(lb).Matches = append(r(lb).Matches, &pb.RouteMatch{Path: "/[a-z]{1,200}x" + strings.Repeat("y", i), PathType: "regex"})
			}
		}, bad("routes", "at most 2000 per load balancer")},
		{"header name bad", func(lb *pb.LoadBalancer) { m(lb).Headers[0].Name = "X Version" }, bad(f+".matches[0].headers[0].name", "not a header name")},
		{"header name missing", func(lb *pb.LoadBalancer) { m(lb).Headers[0].Name = "" }, bad(f+".matches[0].headers[0].name", "required")},
		{"header twice", func(lb *pb.LoadBalancer) {
			m(lb).Headers = append(m(lb).Headers, &pb.ValueMatch{Name: "x-version", Value: "a"})
		}, bad(f+".matches[0].headers[1].name", "matched twice")},
		{"header value CRLF", func(lb *pb.LoadBalancer) { m(lb).Headers[0].Type, m(lb).Headers[0].Value = "", "a\r\nb" }, bad(f+".matches[0].headers[0].value", "CR, LF")},
		{"header value long", func(lb *pb.LoadBalancer) { m(lb).Headers[0].Value = strings.Repeat("a", MaxHeaderValueLen+1) }, bad(f+".matches[0].headers[0].value", "at most 4096")},
		{"header type", func(lb *pb.LoadBalancer) { m(lb).Headers[0].Type = "prefix" }, bad(f+".matches[0].headers[0].type", "not one of exact, regex")},
		{"too many headers", func(lb *pb.LoadBalancer) {
			for i := range MaxMatchConditions {
				m(lb).Headers = append(m(lb).Headers, &pb.ValueMatch{Name: "X-H" + strings.Repeat("h", i), Value: "a"})
			}
		}, bad(f+".matches[0].headers", "at most 16")},
		{"query name bad", func(lb *pb.LoadBalancer) { lb.Routes[2].Matches[1].QueryParams[0].Name = "a=b" }, bad(f+".matches[1].queryParams[0].name", "must not contain")},
		{"method", func(lb *pb.LoadBalancer) { m(lb).Method = "get" }, bad(f+".matches[0].method", "not one of GET")},
		{"grpc service", func(lb *pb.LoadBalancer) {
			m(lb).Path, m(lb).Grpc = "", &pb.GRPCMethodMatch{Service: "shop.v1.Cart"}
			r(lb).Filters[1].UrlRewrite.Path = nil
		}, pass()},
		{"grpc with path", func(lb *pb.LoadBalancer) { m(lb).Grpc = &pb.GRPCMethodMatch{Service: "shop.v1.Cart"} }, bad(f+".matches[0].path", "leave path and pathType out with grpc")},
		{"grpc empty", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).Grpc = "", &pb.GRPCMethodMatch{} }, bad(f+".matches[0].grpc", "set service, method or both")},
		{"grpc service bad", func(lb *pb.LoadBalancer) { m(lb).Path, m(lb).Grpc = "", &pb.GRPCMethodMatch{Service: "shop/Cart"} }, bad(f+".matches[0].grpc.service", "not a gRPC service name")},
		{"grpc regex", func(lb *pb.LoadBalancer) {
			m(lb).Path, m(lb).Grpc = "", &pb.GRPCMethodMatch{Service: `shop\..*`, Method: "Get.*", Type: "regex"}
			r(lb).Filters[1].UrlRewrite.Path = nil
		}, pass()},

		{"pool and backends", func(lb *pb.LoadBalancer) { r(lb).Pool = "web" }, bad(f+".pool", "not both")},
		{"no target", func(lb *pb.LoadBalancer) { r(lb).Backends = nil }, bad(f+".pool", "required")},
		{"redirect needs no target", func(lb *pb.LoadBalancer) {
			r(lb).Backends = nil
			r(lb).Filters = []*pb.RouteFilter{{RequestRedirect: &pb.RequestRedirect{Scheme: "https", StatusCode: 301}}}
		}, pass()},
		{"backend unknown", func(lb *pb.LoadBalancer) { r(lb).Backends[1].Pool = "nope" }, bad(f+".backends[1].pool", "not defined in pools")},
		{"backend weight", func(lb *pb.LoadBalancer) { r(lb).Backends[1].Weight = weight(MaxBackendWeight + 1) }, bad(f+".backends[1].weight", "at most 1000000")},
		{"backend unavailable", func(lb *pb.LoadBalancer) { r(lb).Backends[1] = &pb.RouteBackend{Unavailable: true, Weight: weight(1)} }, pass()},
		{"backend unavailable with pool", func(lb *pb.LoadBalancer) { r(lb).Backends[1].Unavailable = true }, bad(f+".backends[1].pool", "leave it out")},
		{"too many backends", func(lb *pb.LoadBalancer) {
			for range MaxRouteBackends {
				r(lb).Backends = append(r(lb).Backends, &pb.RouteBackend{Pool: "web"})
			}
		}, bad(f+".backends", "at most 16")},

		{"filter empty", func(lb *pb.LoadBalancer) { r(lb).Filters[0] = &pb.RouteFilter{} }, bad(f+".filters[0]", "set exactly one")},
		{"filter two kinds", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].ResponseHeaderModifier = &pb.HeaderModifier{Remove: []string{"Server"}}
		}, bad(f+".filters[0]", "set exactly one")},
		{"filter kind twice", func(lb *pb.LoadBalancer) {
			r(lb).Filters = append(r(lb).Filters, &pb.RouteFilter{RequestHeaderModifier: &pb.HeaderModifier{Remove: []string{"A"}}})
		}, bad(f+".filters[3]", "a second requestHeaderModifier")},
		{"redirect with rewrite", func(lb *pb.LoadBalancer) {
			r(lb).Filters = append(r(lb).Filters, &pb.RouteFilter{RequestRedirect: &pb.RequestRedirect{Scheme: "https"}})
		}, bad(f+".filters", "cannot be used together")},
		{"modify content-length", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].RequestHeaderModifier.Set[0].Name = "Content-Length"
		}, bad(f+".filters[0].requestHeaderModifier.set[0].name", "frames the message")},
		{"remove host", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].RequestHeaderModifier.Remove[0] = "host"
		}, bad(f+".filters[0].requestHeaderModifier.remove[0]", "urlRewrite.hostname")},
		{"set the request id", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].RequestHeaderModifier.Set[0].Name = "x-request-id"
		}, bad(f+".filters[0].requestHeaderModifier.set[0].name", "request id the proxy fixes")},
		{"add the request id", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].RequestHeaderModifier.Add = []*pb.HeaderValue{{Name: "X_Request_Id", Value: "1"}}
		}, bad(f+".filters[0].requestHeaderModifier.add[0].name", "request id the proxy fixes")},
		{"remove the request id", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].RequestHeaderModifier.Remove[0] = "X-Request-ID"
		}, bad(f+".filters[0].requestHeaderModifier.remove[0]", "request id the proxy fixes")},
		{"request id of the response", func(lb *pb.LoadBalancer) {
			r(lb).Filters = append(r(lb).Filters, &pb.RouteFilter{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Request-Id", Value: "1"}}}})
		}, pass()},
		{"modifier value CRLF", func(lb *pb.LoadBalancer) {
			r(lb).Filters[0].RequestHeaderModifier.Set[0].Value = "a\nX-Evil: 1"
		}, bad(f+".filters[0].requestHeaderModifier.set[0].value", "CR, LF")},
		{"modifier set twice", func(lb *pb.LoadBalancer) {
			s := &r(lb).Filters[0].RequestHeaderModifier.Set
			*s = append(*s, &pb.HeaderValue{Name: "x-lb", Value: "b"})
		}, bad(f+".filters[0].requestHeaderModifier.set[1].name", "listed twice")},
		{"too many edits", func(lb *pb.LoadBalancer) {
			a := &r(lb).Filters[0].RequestHeaderModifier.Add
			for i := range MaxHeaderEdits + 1 {
				*a = append(*a, &pb.HeaderValue{Name: "X-A" + strings.Repeat("a", i)})
			}
		}, bad(f+".filters[0].requestHeaderModifier.add", "at most 16")},
		{"redirect status", func(lb *pb.LoadBalancer) {
			r(lb).Filters[1] = &pb.RouteFilter{RequestRedirect: &pb.RequestRedirect{StatusCode: 200}}
		}, bad(f+".filters[1].requestRedirect.statusCode", "not one of 301")},
		{"redirect port", func(lb *pb.LoadBalancer) {
			r(lb).Filters[1] = &pb.RouteFilter{RequestRedirect: &pb.RequestRedirect{Port: weight(70000)}}
		}, bad(f+".filters[1].requestRedirect.port", "1 to 65535")},
		{"redirect scheme", func(lb *pb.LoadBalancer) {
			r(lb).Filters[1] = &pb.RouteFilter{RequestRedirect: &pb.RequestRedirect{Scheme: "ftp"}}
		}, bad(f+".filters[1].requestRedirect.scheme", "not one of http, https")},
		{"redirect hostname", func(lb *pb.LoadBalancer) {
			r(lb).Filters[1] = &pb.RouteFilter{RequestRedirect: &pb.RequestRedirect{Hostname: "Evil Host"}}
		}, bad(f+".filters[1].requestRedirect.hostname", "")},
		{"rewrite empty", func(lb *pb.LoadBalancer) { r(lb).Filters[1].UrlRewrite = &pb.URLRewrite{} }, bad(f+".filters[1].urlRewrite", "set hostname, path or both")},
		{"rewrite both paths", func(lb *pb.LoadBalancer) {
			r(lb).Filters[1].UrlRewrite.Path.ReplaceFullPath = strp("/x")
		}, bad(f+".filters[1].urlRewrite.path", "not both")},
		{"rewrite prefix on exact", func(lb *pb.LoadBalancer) { m(lb).PathType = "exact" }, bad(f+".filters[1].urlRewrite.path.replacePrefixMatch", "prefix path")},
		{"rewrite full path relative", func(lb *pb.LoadBalancer) {
			r(lb).Filters[1].UrlRewrite.Path = &pb.PathModifier{ReplaceFullPath: strp("x")}
		}, bad(f+".filters[1].urlRewrite.path.replaceFullPath", "must start with /")},
		{"mirror pool", func(lb *pb.LoadBalancer) { r(lb).Filters[2].RequestMirror.Pool = "nope" }, bad(f+".filters[2].requestMirror.pool", "not defined")},
		{"mirror percent", func(lb *pb.LoadBalancer) { r(lb).Filters[2].RequestMirror.Percent = weight(101) }, bad(f+".filters[2].requestMirror.percent", "0 to 100")},
		{"mirror fraction", func(lb *pb.LoadBalancer) {
			r(lb).Filters[2].RequestMirror = &pb.RequestMirror{Pool: "canary", Fraction: &pb.Fraction{Numerator: 3, Denominator: 2}}
		}, bad(f+".filters[2].requestMirror.fraction", "larger than denominator")},
		{"mirrors bounded", func(lb *pb.LoadBalancer) {
			for range MaxRouteMirrors {
				r(lb).Filters = append(r(lb).Filters, &pb.RouteFilter{RequestMirror: &pb.RequestMirror{Pool: "web"}})
			}
		}, bad(f+".filters[6]", "at most 4 requestMirror")},
		{"timeout negative", func(lb *pb.LoadBalancer) { r(lb).Timeouts.Request = dur(-time.Second) }, bad(f+".timeouts.request", "from 0")},
		{"backend timeout over request", func(lb *pb.LoadBalancer) { r(lb).Timeouts.BackendRequest = dur(time.Minute) }, bad(f+".timeouts.backendRequest", "longer than request")},
		{"timeout too long", func(lb *pb.LoadBalancer) { r(lb).Timeouts.Request = dur(2 * time.Hour) }, bad(f+".timeouts.request", "1h0m0s")},
		{"regex on old route", func(lb *pb.LoadBalancer) { lb.Routes[1].Path, lb.Routes[1].PathType = `/api/v[12]/.*`, "regex" }, pass()},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := gwLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}

// Pools reached only through backends or mirrors are not reported unused.
func TestRouteBackendPoolsUsed(t *testing.T) {
	lb := gwLB()
	lb.Pools["shadow"] = &pb.BackendPool{Members: []*pb.Member{{Address: "10.20.0.31:30080"}}}
	lb.Routes[2].Filters[2].RequestMirror.Pool = "shadow"
	lb.Routes[2].Backends[1].Pool = "web"
	lb.Pools["spare"] = &pb.BackendPool{Members: []*pb.Member{{Address: "10.20.0.41:30080"}}}
	var unused []string
	for _, p := range LoadBalancerProblems(lb) {
		unused = append(unused, p.GetField())
	}
	if want := "pools.canary pools.spare"; strings.Join(unused, " ") != want {
		t.Fatalf("problems name %v; want %s", unused, want)
	}
}

func TestRouteAllZeroWeightsProblem(t *testing.T) {
	lb := gwLB()
	lb.Routes[2].Backends[0].Weight = weight(0)
	for _, p := range LoadBalancerProblems(lb) {
		if p.GetField() == "routes[2].backends" {
			t.Fatalf("problem with a backend of weight 10 left: %v", p)
		}
	}
	lb.Routes[2].Backends[1].Weight = weight(0)
	found := false
	for _, p := range LoadBalancerProblems(lb) {
		found = found || (p.GetField() == "routes[2].backends" && strings.Contains(p.GetReason(), "500"))
	}
	if !found {
		t.Fatalf("no problem for a route whose backends all weigh 0: %v", LoadBalancerProblems(lb))
	}
}

// A regular expression whose program is too big is refused with the
// field, the measured size and the bound; so are long repetition counts
// and expressions too long to write, and the refusal never echoes the
// expression.
func TestPathologicalRegexRefused(t *testing.T) {
	t.Parallel()
	// 450 optional "a?" keep 450 threads alive on every byte: about 2 ms
	// per 1 KiB path on its own (BenchmarkRegexMatch in proxy/snapshot).
	pathological := "/" + strings.Repeat("a?", 450) + strings.Repeat("a", 100)
	tests := []struct {
		name, expr string
		want       []string
	}{
		{"program size", pathological, []string{"compiles to 1003 instructions; at most 1000"}},
		{"repetition", `/(?:x|y){1000}`, []string{"repeats something 1000 times", "at most 256"}},
		{"nested repetitions", `/(?:(?:a|b){200}){200}`, []string{"not a regular expression", "invalid repeat count"}},
		{"length", "/" + strings.Repeat("[ab]", 300), []string{"1201 bytes long; at most 1024"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := shopLB()
			lb.Routes[1].Path, lb.Routes[1].PathType = tt.expr, "regex"
			err := ValidateLoadBalancer(lb, nil)
			if err == nil {
				t.Fatalf("%s accepted", tt.name)
			}
			msg := err.Error()
			if !strings.Contains(msg, "routes[1].path") {
				t.Errorf("refusal does not name routes[1].path: %s", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal %q does not say %q", msg, w)
				}
			}
			if len(msg) > 600 {
				t.Errorf("refusal is %d bytes long; it echoes the expression?", len(msg))
			}
		})
	}
	// Nested counts within MaxRegexRepeat (and RE2's own bound of 1,000
	// on their product) are refused by the program size.
	if _, err := CompileRouteRegex(`/(?:(?:ab|cd){30}){30}`); err == nil || !strings.Contains(err.Error(), "instructions") {
		t.Errorf("nested repetitions of 30 x 30: %v, want refused by instruction count", err)
	}
	// Route regexes as written in practice compile far below the bound.
	for _, expr := range []string{`/api/v[0-9]+/users/[0-9]+`, `/(?:docs|api)/[^/]+`,
		`/objects/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, `/blobs/sha256:[0-9a-f]{64}`} {
		n, err := CompileRouteRegex(expr)
		if err != nil || n > 150 {
			t.Errorf("%s: %d instructions, %v; want at most 150", expr, n, err)
		}
	}
}

// regexMatchesPerLb and regexMatches bound how many regular expressions
// a load balancer and a tenant have; a count that does not grow is
// allowed.
func TestRegexMatchQuotas(t *testing.T) {
	t.Parallel()
	tenant := acmeTenant()
	tenant.Quotas = &pb.Quotas{RegexMatchesPerLb: 4, RegexMatches: 6}
	withRegexes := func(name string, n int) *pb.LoadBalancer {
		lb := shopLB()
		lb.Name = name
		lb.Routes = nil
		var ms []*pb.RouteMatch
		for i := range n {
			ms = append(ms, &pb.RouteMatch{Path: fmt.Sprintf("/m%d/[0-9]+", i), PathType: "regex"})
		}
		lb.Routes = append(lb.Routes, &pb.Route{Host: "shop.acme.example", Pool: "web", Matches: ms})
		return lb
	}
	tests := []struct {
		name string
		have []any
		lb   *pb.LoadBalancer
		want expect
	}{
		{"within regexMatchesPerLb", nil, withRegexes("shop", 4), pass()},
		{"over regexMatchesPerLb", nil, withRegexes("shop", 5), clash("routes", "has 5 regular expressions (regex path, header, query and gRPC matches); at most 4 (quotas.regexMatchesPerLb")},
		{"over the tenant's regexMatches", []any{withRegexes("a", 4)}, withRegexes("shop", 3),
			clash("routes", "would have 7 regular expressions in all; at most 6 (quotas.regexMatches")},
		{"tenant total within regexMatches", []any{withRegexes("a", 3)}, withRegexes("shop", 3), pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCatalog()
			c.Put(tenant)
			c.Put(tt.have...)
			check(t, ValidateLoadBalancer(tt.lb, c), tt.want)
		})
	}
	if u := LoadBalancerUsage(gwLB()); u.RegexMatches != 1 {
		t.Errorf("usage counts %d regular expressions in gwLB, want 1", u.RegexMatches)
	}
}
