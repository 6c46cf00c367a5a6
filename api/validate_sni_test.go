package api

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestValidateSNIRoutes: server-name routes belong to tls-passthrough
// listeners, name hosts inside the tenant's domains once each, send to
// pools of the load balancer, are bounded, count in the routes quotas, and
// keep the tenant from dropping the domains they use.
func TestValidateSNIRoutes(t *testing.T) {
	pass := func(lb *pb.LoadBalancer) {
		lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 8443, Protocol: "tls-passthrough", Pool: "db", SniRoutes: []*pb.SNIRoute{
			{Host: "db.acme.example", Pool: "db"}, {Host: "*.acme.example", Pool: "web"},
		}})
	}
	sni := func(edit func(rs []*pb.SNIRoute) []*pb.SNIRoute) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) {
			pass(lb)
			l := lb.Listeners[len(lb.Listeners)-1]
			l.SniRoutes = edit(l.SniRoutes)
		}
	}
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"valid", pass, expect{}},
		{"on a tcp listener", func(lb *pb.LoadBalancer) {
			lb.Listeners[2].SniRoutes = []*pb.SNIRoute{{Host: "db.acme.example", Pool: "db"}}
		}, bad("listeners[2].sniRoutes", "only tls-passthrough listeners route by server name")},
		{"no host", sni(func(rs []*pb.SNIRoute) []*pb.SNIRoute { rs[0].Host = ""; return rs }), bad("listeners[3].sniRoutes[0].host", "required")},
		{"another tenant's host", sni(func(rs []*pb.SNIRoute) []*pb.SNIRoute { rs[0].Host = "db.other.example"; return rs }),
			bad("listeners[3].sniRoutes[0].host", "db.other.example is not inside the tenant's domains (acme.example)")},
		{"a bad wildcard", sni(func(rs []*pb.SNIRoute) []*pb.SNIRoute { rs[1].Host = "a.*.acme.example"; return rs }),
			bad("listeners[3].sniRoutes[1].host", "a wildcard must be the whole first label")},
		{"twice the same host", sni(func(rs []*pb.SNIRoute) []*pb.SNIRoute { rs[1].Host = "DB.acme.example"; return rs }),
			bad("listeners[3].sniRoutes[1].host", "already routed by sniRoutes[0]")},
		{"an unknown pool", sni(func(rs []*pb.SNIRoute) []*pb.SNIRoute { rs[1].Pool = "nope"; return rs }),
			bad("listeners[3].sniRoutes[1].pool", "backend pool nope is not defined")},
		{"too many", sni(func(rs []*pb.SNIRoute) []*pb.SNIRoute {
			for len(rs) <= MaxSNIRoutes {
				rs = append(rs, &pb.SNIRoute{Host: "x.acme.example", Pool: "db"})
			}
			return rs
		}), bad("listeners[3].sniRoutes", "at most 1024")},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
	t.Run("the routes quota counts them", func(t *testing.T) {
		c := baseCatalog()
		acme := acmeTenant()
		acme.Quotas = &pb.Quotas{RoutesPerLb: 3}
		c.Put(acme)
		lb := shopLB()
		pass(lb)
		err := ValidateLoadBalancer(lb, c)
		if err == nil || !strings.Contains(err.Error(), "has 4 routes") {
			t.Fatalf("2 routes and 2 server-name routes under a quota of 3: %v", err)
		}
	})
	t.Run("the tenant keeps the domains they use", func(t *testing.T) {
		c := baseCatalog()
		lb := shopLB()
		lb.Routes = nil
		lb.Listeners = lb.Listeners[2:]
		pass(lb)
		c.Put(lb)
		acme := acmeTenant()
		acme.Domains = []string{"shop.acme.example"}
		err := ValidateTenant(acme, c)
		if err == nil || !strings.Contains(err.Error(), "listeners[1].sniRoutes[0].host") {
			t.Fatalf("dropping acme.example under db.acme.example: %v", err)
		}
	})
}
