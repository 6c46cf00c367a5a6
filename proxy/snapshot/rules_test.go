package snapshot

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// rulesLB is a load balancer that validation accepts, with one of each
// part the shared rules cover: a tcp, an http and a tls-passthrough
// listener, a route and a pool with a health check.
func rulesLB() *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name:   "shop",
		Tenant: "acme",
		Vip:    &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{
			{Port: 22, Protocol: "tcp", Pool: "app"},
			{Port: 80, Protocol: "http"},
			{Port: 443, Protocol: "tls-passthrough", Pool: "app",
				SniRoutes: []*pb.SNIRoute{{Host: "db.acme.example", Pool: "app"}}},
		},
		Routes: []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "app"}},
		Pools: map[string]*pb.BackendPool{"app": {
			Members:     members("10.20.0.1:80", "10.20.0.2:80"),
			HealthCheck: &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/healthz"}, Interval: dur(5 * time.Second), Timeout: dur(time.Second)},
		}},
		Status: &pb.LoadBalancerStatus{Address: "192.0.2.1"},
	}
}

// TestCompileAndValidationNameTheSameField breaks one rule of a valid
// load balancer at a time and checks that validation refuses it under the
// field path the compile reports its problem under, and that every
// problem of the compile names a field validation names: the two apply
// one rule set (api's), spelt as the manifest spells it.
func TestCompileAndValidationNameTheSameField(t *testing.T) {
	t.Parallel()
	pool := func(lb *pb.LoadBalancer) *pb.BackendPool { return lb.Pools["app"] }
	hc := func(lb *pb.LoadBalancer) *pb.HealthCheck { return lb.Pools["app"].HealthCheck }
	tests := []struct {
		field string
		brk   func(lb *pb.LoadBalancer)
	}{
		{"pools.app.algorithm", func(lb *pb.LoadBalancer) { pool(lb).Algorithm = "random" }},
		{"pools.app.hashOn", func(lb *pb.LoadBalancer) { pool(lb).Algorithm, pool(lb).HashOn = "hash", "cookie:x" }},
		{"pools.app.hashOn", func(lb *pb.LoadBalancer) { pool(lb).HashOn = "client-ip" }},
		{"pools.app.proxyProtocol", func(lb *pb.LoadBalancer) { pool(lb).ProxyProtocol = "v3" }},
		{"pools.app.proxyProtocol", func(lb *pb.LoadBalancer) {
			pool(lb).ProxyProtocol = "v2"
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 53, Protocol: "udp", Pool: "app"})
		}},
		{"pools.app.backendProtocol", func(lb *pb.LoadBalancer) { pool(lb).BackendProtocol = "h3" }},
		{"pools.app.clientSource", func(lb *pb.LoadBalancer) { pool(lb).ClientSource = true }},
		{"pools.app.clientSource", func(lb *pb.LoadBalancer) {
			lb.Listeners, lb.Routes = lb.Listeners[:1], nil
			pool(lb).ClientSource, pool(lb).ProxyProtocol = true, "v1"
		}},
		{"pools.app.connectTimeout", func(lb *pb.LoadBalancer) { pool(lb).ConnectTimeout = dur(-time.Second) }},
		{"pools.app.members[0]", func(lb *pb.LoadBalancer) { pool(lb).Members[0].Address = "10.20.0.1" }},
		{"pools.app.members[0]", func(lb *pb.LoadBalancer) { pool(lb).Members[0].Address = "[fe80::1%eth0]:80" }},
		{"pools.app.members[0]", func(lb *pb.LoadBalancer) { pool(lb).Members[0].Address = "[::ffff:10.20.0.1]:80" }},
		{"pools.app.members[1]", func(lb *pb.LoadBalancer) { pool(lb).Members[1].Address = "10.20.0.1:80" }},
		{"pools.app.members[0]", func(lb *pb.LoadBalancer) { pool(lb).Members[0].Address = "10.99.0.1:80" }},
		{"pools.app.members[0]", func(lb *pb.LoadBalancer) { pool(lb).Members[0].Address = "127.0.0.1:80" }},
		{"pools.app.members[0].weight", func(lb *pb.LoadBalancer) { pool(lb).Members[0].Weight = proto.Uint32(1001) }},
		{"pools.app.healthCheck", func(lb *pb.LoadBalancer) { hc(lb).Tcp = &pb.TCPCheck{} }},
		{"pools.app.healthCheck.http.path", func(lb *pb.LoadBalancer) { hc(lb).Http.Path = "healthz" }},
		{"pools.app.healthCheck.http.expectStatus", func(lb *pb.LoadBalancer) { hc(lb).Http.ExpectStatus = 700 }},
		{"pools.app.healthCheck.http.host", func(lb *pb.LoadBalancer) { hc(lb).Http.Host = "bad host" }},
		{"pools.app.healthCheck.https.serverName", func(lb *pb.LoadBalancer) {
			hc(lb).Http, hc(lb).Https = nil, &pb.HTTPSCheck{InsecureSkipVerify: true, ServerName: "bad name"}
		}},
		{"pools.app.healthCheck.https.caPem", func(lb *pb.LoadBalancer) { hc(lb).Http, hc(lb).Https = nil, &pb.HTTPSCheck{} }},
		{"pools.app.healthCheck.interval", func(lb *pb.LoadBalancer) { hc(lb).Interval = dur(100 * time.Millisecond) }},
		{"pools.app.healthCheck.timeout", func(lb *pb.LoadBalancer) { hc(lb).Timeout = dur(6 * time.Second) }},
		{"pools.app.healthCheck.rise", func(lb *pb.LoadBalancer) { hc(lb).Rise = 500 }},
		{"pools.app.healthCheck.port", func(lb *pb.LoadBalancer) { hc(lb).Port = 70000 }},
		{"listeners[0].port", func(lb *pb.LoadBalancer) { lb.Listeners[0].Port = 0 }},
		{"listeners[0].protocol", func(lb *pb.LoadBalancer) { lb.Listeners[0].Protocol = "sctp" }},
		{"listeners[0].pool", func(lb *pb.LoadBalancer) { lb.Listeners[0].Pool = "nope" }},
		{"listeners[0].redirectToHttps", func(lb *pb.LoadBalancer) { lb.Listeners[0].RedirectToHttps = true }},
		{"listeners[0].idleTimeout", func(lb *pb.LoadBalancer) { lb.Listeners[0].IdleTimeout = dur(-time.Second) }},
		{"listeners[1].pool", func(lb *pb.LoadBalancer) { lb.Listeners[1].Pool = "app" }},
		{"listeners[1].tls", func(lb *pb.LoadBalancer) { lb.Listeners[1].Protocol = "https" }},
		{"listeners[1].tls.minVersion", func(lb *pb.LoadBalancer) {
			lb.Listeners[1].Protocol, lb.Listeners[1].Tls = "https", &pb.TLSPolicy{Certificates: []string{"shop"}, MinVersion: "tls1.1"}
		}},
		{"listeners[1].trustedProxies[0]", func(lb *pb.LoadBalancer) { lb.Listeners[1].TrustedProxies = []string{"nope"} }},
		{"listeners[1].sniRoutes", func(lb *pb.LoadBalancer) { lb.Listeners[1].SniRoutes = lb.Listeners[2].SniRoutes }},
		{"listeners[2].sniRoutes[0].host", func(lb *pb.LoadBalancer) { lb.Listeners[2].SniRoutes[0].Host = "db.other.example" }},
		{"listeners[2].sniRoutes[0].host", func(lb *pb.LoadBalancer) { lb.Listeners[2].SniRoutes[0].Host = "db..acme.example" }},
		{"listeners[2].sniRoutes[0].pool", func(lb *pb.LoadBalancer) { lb.Listeners[2].SniRoutes[0].Pool = "nope" }},
		{"listeners[2].sniRoutes[1].host", func(lb *pb.LoadBalancer) {
			lb.Listeners[2].SniRoutes = append(lb.Listeners[2].SniRoutes, &pb.SNIRoute{Host: "DB.acme.example", Pool: "app"})
		}},
		{"listeners[2].tls.certificates", func(lb *pb.LoadBalancer) { lb.Listeners[2].SniRoutes[0].Terminate = true }},
		{"listeners[2].tls.acme", func(lb *pb.LoadBalancer) {
			lb.Listeners[2].SniRoutes[0].Terminate = true
			lb.Listeners[2].Tls = &pb.TLSPolicy{Acme: true, Certificates: []string{"shop"}}
		}},
		{"routes[0].host", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "shop.other.example" }},
		{"routes[0].host", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "Shop.acme.example" }},
		{"routes[0].host", func(lb *pb.LoadBalancer) { lb.Routes[0].Host = "shop.*.acme.example" }},
		{"routes[0].path", func(lb *pb.LoadBalancer) { lb.Routes[0].Path = "shop" }},
		{"routes[0].path", func(lb *pb.LoadBalancer) { lb.Routes[0].Path = "/a b" }},
		{"routes[0].pathType", func(lb *pb.LoadBalancer) { lb.Routes[0].PathType = "glob" }},
		{"routes[0].pool", func(lb *pb.LoadBalancer) { lb.Routes[0].Pool = "nope" }},
		{"routes[0].path", func(lb *pb.LoadBalancer) { lb.Routes[0].PathType, lb.Routes[0].Path = "regex", "(" }},
		{"routes[0].matches[0].headers[0].name", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Path = ""
			lb.Routes[0].Matches = []*pb.RouteMatch{{Headers: []*pb.ValueMatch{{Name: "bad name", Value: "x"}}}}
		}},
		{"routes[0].matches[0].queryParams[0].value", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Path = ""
			lb.Routes[0].Matches = []*pb.RouteMatch{{QueryParams: []*pb.ValueMatch{{Name: "q", Type: "regex", Value: "("}}}}
		}},
		{"routes[0].timeouts.request", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Timeouts = &pb.RouteTimeouts{Request: dur(2 * time.Hour)}
		}},
		{"routes[0].backends[0].pool", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Pool, lb.Routes[0].Backends = "", []*pb.RouteBackend{{Pool: "nope"}}
		}},
	}
	tenant := &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}, Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}
	vipPool := &pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/24"}, Mode: "static"}
	cat := catalogtest.New(tenant, vipPool)
	compile := func(lb *pb.LoadBalancer) []Problem {
		s := Compile([]*pb.Object{api.Wrap(tenant), api.Wrap(vipPool), api.Wrap(lb)}, 1, Defaults{}, nil)
		return problemsOf(s, "acme/shop")
	}
	if err := api.ValidateLoadBalancer(rulesLB(), cat); err != nil {
		t.Fatalf("the unbroken load balancer is refused: %v", err)
	}
	if ps := compile(rulesLB()); len(ps) != 0 {
		t.Fatalf("the unbroken load balancer compiles with problems: %v", ps)
	}
	for _, tt := range tests {
		lb := rulesLB()
		tt.brk(lb)
		var ve *api.ValidationError
		if err := api.ValidateLoadBalancer(lb, cat); !errors.As(err, &ve) {
			t.Errorf("%s: validation accepts it (%v)", tt.field, err)
			continue
		}
		var refused []string
		for _, e := range ve.Errors {
			refused = append(refused, e.Field)
		}
		ps := compile(lb)
		var reported []string
		for _, p := range ps {
			reported = append(reported, p.Field)
			if !slices.Contains(refused, p.Field) {
				t.Errorf("%s: the compile reports %s (%s), which validation does not name (%v)", tt.field, p.Field, p.Reason, ve.Errors)
			}
		}
		if !slices.Contains(refused, tt.field) || !slices.Contains(reported, tt.field) {
			t.Errorf("%s: validation names %v, the compile %v", tt.field, refused, reported)
		}
	}
}
