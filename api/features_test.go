package api

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Each field of feature level 2 is found where it is set, and nothing
// else is.
func TestFeaturesUsed(t *testing.T) {
	lb := func(edit func(*pb.LoadBalancer)) *pb.Object {
		l := &pb.LoadBalancer{Name: "shop", Tenant: "acme",
			Routes: []*pb.Route{{Path: "/", Pool: "web"}, {Path: "/api", Pool: "web"}},
			Pools:  map[string]*pb.BackendPool{"web": {HealthCheck: &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/healthz"}}}, "api": {}},
		}
		if edit != nil {
			edit(l)
		}
		return Wrap(l)
	}
	for _, tt := range []struct {
		name string
		obj  *pb.Object
		want []string
	}{
		{"level 1 fields only", lb(nil), nil},
		{"not a load balancer", Wrap(&pb.Tenant{Name: "acme"}), nil},
		{"tenant bgp", Wrap(&pb.Tenant{Name: "acme", Bgp: &pb.TenantBGP{Asn: 64600}}), []string{"Tenant acme: bgp (tenant-bgp)"}},
		{"write budget", Wrap(&pb.Tenant{Name: "acme", Quotas: &pb.Quotas{WriteBytesPerSecond: 4 << 20}}), []string{"Tenant acme: quotas.writeBytesPerSecond (write-budget)"}},
		{"tenant bgp update rate", Wrap(&pb.Tenant{Name: "acme", Bgp: &pb.TenantBGP{Asn: 64600, MaxUpdatesPerSecond: 10}}),
			[]string{"Tenant acme: bgp (tenant-bgp)", "Tenant acme: bgp.maxUpdatesPerSecond (tenant-bgp-update-rate)"}},
		{"tenant bgp prefix total", Wrap(&pb.Tenant{Name: "acme", Bgp: &pb.TenantBGP{Asn: 64600, MaxPrefixesTotal: 5000}}),
			[]string{"Tenant acme: bgp (tenant-bgp)", "Tenant acme: bgp.maxPrefixesTotal (tenant-bgp-prefix-total)"}},
		{"tenant bgp reannounce", Wrap(&pb.Tenant{Name: "acme", Bgp: &pb.TenantBGP{Asn: 64600, Reannounce: true, Community: "64512:7"}}),
			[]string{"Tenant acme: bgp (tenant-bgp)", "Tenant acme: bgp.reannounce (tenant-bgp-reannounce)"}},
		{"pool interface", Wrap(&pb.VIPPool{Name: "private", Mode: "arp", Interface: "eth1"}), []string{"VIPPool private: interface (pool-interface)"}},
		{"https check", lb(func(l *pb.LoadBalancer) { l.Pools["api"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{}} }),
			[]string{"LoadBalancer acme/shop: pools.api.healthCheck.https (https-health-check)"}},
		{"closeOnDown", lb(func(l *pb.LoadBalancer) { l.Pools["web"].HealthCheck.CloseOnDown = true }),
			[]string{"LoadBalancer acme/shop: pools.web.healthCheck.closeOnDown (close-on-down)"}},
		{"h2 backends", lb(func(l *pb.LoadBalancer) {
			l.Pools["api"].BackendProtocol = "h2"
			l.Pools["web"].BackendProtocol = "h2c"
		}),
			[]string{"LoadBalancer acme/shop: pools.api.backendProtocol (backend-h2)"}},
		{"regex path", lb(func(l *pb.LoadBalancer) { l.Routes[1].Path, l.Routes[1].PathType = "/api/v[0-9]+", "regex" }),
			[]string{"LoadBalancer acme/shop: routes[1].pathType (route-rules)"}},
		{"route rules", lb(func(l *pb.LoadBalancer) {
			l.Routes[1].Matches = []*pb.RouteMatch{{Method: "GET"}}
			l.Routes[1].Backends = []*pb.RouteBackend{{Pool: "api"}}
			l.Routes[0].Filters = []*pb.RouteFilter{{}}
			l.Routes[0].Timeouts = &pb.RouteTimeouts{Request: durationpb.New(1)}
		}), []string{
			"LoadBalancer acme/shop: routes[0].filters (route-rules)", "LoadBalancer acme/shop: routes[0].timeouts (route-rules)",
			"LoadBalancer acme/shop: routes[1].matches (route-rules)", "LoadBalancer acme/shop: routes[1].backends (route-rules)",
		}},
		{"sni routes", lb(func(l *pb.LoadBalancer) {
			l.Listeners = []*pb.Listener{{Port: 443, Protocol: "tls-passthrough", Pool: "api", SniRoutes: []*pb.SNIRoute{{Host: "a.acme.example", Pool: "web"}}}}
		}), []string{"LoadBalancer acme/shop: listeners[0].sniRoutes (sni-routes)"}},
		{"route ports", lb(func(l *pb.LoadBalancer) { l.Routes[1].Ports = []uint32{80} }), []string{"LoadBalancer acme/shop: routes[1].ports (route-ports)"}},
		{"dual stack", lb(func(l *pb.LoadBalancer) { l.Vip = &pb.VIPRequest{Families: []string{"ipv4", "ipv6"}} }), []string{"LoadBalancer acme/shop: vip.families (dual-stack)"}},
		{"client source", lb(func(l *pb.LoadBalancer) { l.Pools["api"].ClientSource = true }), []string{"LoadBalancer acme/shop: pools.api.clientSource (client-source)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, u := range FeaturesUsed(tt.obj) {
				got = append(got, u.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			uses := FeaturesUsed(tt.obj)
			want := map[bool]uint32{true: 1, false: 2}[len(tt.want) == 0]
			if tt.name == "sni routes" || tt.name == "route ports" {
				want = 3
			}
			if tt.name == "tenant bgp" || tt.name == "dual stack" {
				want = 4
			}
			if tt.name == "write budget" || tt.name == "pool interface" || tt.name == "tenant bgp update rate" {
				want = 5
			}
			if tt.name == "tenant bgp prefix total" || tt.name == "tenant bgp reannounce" {
				want = 6
			}
			if tt.name == "client source" {
				want = 7
			}
			if LevelNeeded(uses) != want {
				t.Fatalf("level %d, want %d", LevelNeeded(uses), want)
			}
		})
	}
	for _, f := range Features() {
		if featureLevels[f] < 2 || featureLevels[f] > FeatureLevel {
			t.Errorf("feature %s has level %d, want 2..%d", f, featureLevels[f], FeatureLevel)
		}
	}
}
