package api

import (
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A wildcard route host on an ACME listener is accepted (its certificate
// comes through DNS-01, or is refused in its status when no zone of the LB
// hosts holds it) and needs level 5: a host of an earlier release would
// leave it without a certificate.
func TestACMEWildcardNeedsLevel5(t *testing.T) {
	t.Parallel()
	lb := shopLB()
	lb.Routes[0].Host = "*.acme.example"
	obj := &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}
	uses := FeaturesUsed(obj)
	found := false
	for _, u := range uses {
		if u.Feature == FeatureACMEWildcard {
			found = true
			if u.Field != "LoadBalancer acme/shop: routes[0].host" {
				t.Errorf("field %q", u.Field)
			}
		}
	}
	if !found || LevelNeeded(uses) != 5 {
		t.Errorf("uses %v (level %d): want %s at level 5", uses, LevelNeeded(uses), FeatureACMEWildcard)
	}
	lb.Listeners[0].Tls = &pb.TLSPolicy{Certificates: []string{"shop-cert"}}
	for _, u := range FeaturesUsed(obj) {
		if u.Feature == FeatureACMEWildcard {
			t.Errorf("a wildcard with an uploaded certificate uses %v", u)
		}
	}
}
