package cli

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestExplainSpecShowsWhatRoutesDo: explain's spec names what a listener
// and a route do beyond forwarding (retries, CORS, WAF, rate limits, 404
// routes, client certificates, misdirected-request checks, members
// dialled from the client's address), so an
// operator does not need the YAML to see them.
func TestExplainSpecShowsWhatRoutesDo(t *testing.T) {
	t.Parallel()
	attempts := uint32(2)
	for _, tc := range []struct {
		got  string
		want []string
	}{
		{routeText(&pb.Route{Host: "shop.acme.example", Path: "/api", Pool: "web",
			Retry:     &pb.RouteRetry{Codes: []uint32{502, 503}, Attempts: &attempts},
			Filters:   []*pb.RouteFilter{{Cors: &pb.CORS{AllowOrigins: []string{"https://a.example"}}}},
			RateLimit: &pb.RateLimit{RequestsPerSecond: 10, Burst: 20},
			Waf:       &pb.WAF{Mode: "block", ExcludeRules: []uint32{942100}}}),
			[]string{"shop.acme.example/api -> web", "retry 2 attempts on connection errors and 502, 503", "CORS for https://a.example", "rate limit 10 req/s, burst 20 per client", "WAF block, paranoia 1, 1 rules excluded"}},
		{routeText(&pb.Route{Host: "old.acme.example", Path: "/", NotFound: true}), []string{"old.acme.example/ -> 404"}},
		{listenerText(&pb.Listener{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Certificates: []string{"shop"},
			ClientValidation: &pb.ClientValidation{Mode: "optional"}, SniScopes: []string{"", "a.example"}}}, nil),
			[]string{"443/https", "certificates shop", "client certificates optional", "421 for a Host of another of 2 sites"}},
		{listenerText(&pb.Listener{Port: 5432, Protocol: "tcp", Pool: "db"}, &pb.BackendPool{ClientSource: true}),
			[]string{"5432/tcp (members dialled from the client's own address)"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.got, w) {
				t.Errorf("%q lacks %q", tc.got, w)
			}
		}
	}
	lb := &pb.LoadBalancer{Tenant: "acme", Name: "many"}
	for range explainRoutesShown + 3 {
		lb.Routes = append(lb.Routes, &pb.Route{Path: "/", Pool: "web"})
	}
	var b strings.Builder
	writeSpecRoutes(&b, lb)
	if n := strings.Count(b.String(), "-> web"); n != explainRoutesShown || !strings.Contains(b.String(), "and 3 more") {
		t.Errorf("%d routes listed of %d:\n%s", n, len(lb.Routes), b.String())
	}
}

// TestExplainSpecSaysWhatIsNotAsWritten: a listener or route whose
// stored form the hosts do not serve as written (a rate limit left out of
// the compile, a default used instead) has the problem naming one of its
// fields under its line, and no other's: the line alone would show the
// limit as in force.
func TestExplainSpecSaysWhatIsNotAsWritten(t *testing.T) {
	t.Parallel()
	rl := &pb.RateLimit{RequestsPerSecond: 10, Key: "header:X-Request-Id"}
	lb := &pb.LoadBalancer{Tenant: "acme", Name: "web",
		Listeners: []*pb.Listener{{Port: 80, Protocol: "http", RateLimit: rl}, {Port: 81, Protocol: "http"}},
		Routes:    []*pb.Route{{Path: "/", Pool: "web", RateLimit: rl}, {Path: "/b", Pool: "web"}},
		Status: &pb.LoadBalancerStatus{Problems: []*pb.Problem{
			{Field: "listeners[0].rateLimit.header", Reason: "x-request-id is made per request; requestsPerSecond not enforced"},
			{Field: "routes[0].rateLimit.header", Reason: "x-request-id is made per request; requestsPerSecond not enforced"},
			{Field: "listeners[10].port", Reason: "another listener's"},
		}}}
	for _, tc := range []struct {
		name  string
		write func(*strings.Builder)
		item  string
	}{
		{"listeners", func(b *strings.Builder) { writeSpecListeners(b, lb) }, "listeners[0].rateLimit.header"},
		{"routes", func(b *strings.Builder) { writeSpecRoutes(b, lb) }, "routes[0].rateLimit.header"},
	} {
		var b strings.Builder
		tc.write(&b)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 3 || !strings.Contains(lines[1], "not as written: "+tc.item+": ") || !strings.Contains(lines[1], "requestsPerSecond not enforced") {
			t.Errorf("%s: want the problem under the first line and nothing under the second:\n%s", tc.name, b.String())
		}
	}
}
