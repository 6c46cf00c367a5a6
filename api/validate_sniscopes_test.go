package api

import (
	"fmt"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestValidateSNIScopes: sniScopes are host names of an https listener,
// each well formed, in lower case and listed once, at most MaxSNIScopes;
// another protocol refuses them; they use a feature of level 5.
func TestValidateSNIScopes(t *testing.T) {
	t.Parallel()
	scopes := func(on int, s ...string) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) {
			l := lb.Listeners[on]
			if l.Tls == nil {
				l.Tls = &pb.TLSPolicy{}
			}
			l.Tls.SniScopes = s
		}
	}
	many := make([]string, MaxSNIScopes+1)
	for i := range many {
		many[i] = fmt.Sprintf("s%d.acme.example", i)
	}
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"sites of one port", scopes(0, "", "shop.acme.example", "*.acme.example"), expect{}},
		{"a wildcard inside a name", scopes(0, "a.*.acme.example"), bad("listeners[0].tls.sniScopes[0]", "a wildcard must be the whole first label")},
		{"upper case", scopes(0, "Shop.acme.example"), bad("listeners[0].tls.sniScopes[0]", "must be lowercase")},
		{"twice", scopes(0, "shop.acme.example", "shop.acme.example"), bad("listeners[0].tls.sniScopes[1]", "already listed as sniScopes[0]")},
		{"too many", scopes(0, many...), bad("listeners[0].tls.sniScopes", fmt.Sprintf("at most %d", MaxSNIScopes))},
		{"on an http listener", scopes(1, "shop.acme.example"), bad("listeners[1].tls", "only https listeners terminate TLS")},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
	lb := shopLB()
	scopes(0, "", "shop.acme.example")(lb)
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	if LevelNeeded(uses) != 5 {
		t.Errorf("uses %v need level %d, want 5", uses, LevelNeeded(uses))
	}
}
