package api

import (
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestValidateNotFoundRoute: a notFound route needs no pool, and refuses
// whatever would send, change or limit its requests; it uses a feature of
// level 5.
func TestValidateNotFoundRoute(t *testing.T) {
	t.Parallel()
	nf := func(mut func(r *pb.Route)) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) {
			r := &pb.Route{Host: "old.acme.example", Path: "/", NotFound: true}
			mut(r)
			lb.Routes = append(lb.Routes, r)
		}
	}
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"alone", nf(func(*pb.Route) {}), expect{}},
		{"on some ports", nf(func(r *pb.Route) { r.Ports = []uint32{443} }), expect{}},
		{"with a pool", nf(func(r *pb.Route) { r.Pool = "web" }), bad("routes[2].pool", "leave it out with notFound")},
		{"with backends", nf(func(r *pb.Route) { r.Backends = []*pb.RouteBackend{{Pool: "web"}} }), bad("routes[2].backends", "leave it out with notFound")},
		{"with filters", nf(func(r *pb.Route) {
			r.Filters = []*pb.RouteFilter{{ResponseHeaderModifier: &pb.HeaderModifier{Remove: []string{"x"}}}}
		}), bad("routes[2].filters", "leave it out with notFound")},
		{"with timeouts", nf(func(r *pb.Route) { r.Timeouts = &pb.RouteTimeouts{Request: durationpb.New(1e9)} }), bad("routes[2].timeouts", "leave it out with notFound")},
		{"with a rate limit", nf(func(r *pb.Route) { r.RateLimit = &pb.RateLimit{RequestsPerSecond: 5} }), bad("routes[2].rateLimit", "leave it out with notFound")},
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
	nf(func(*pb.Route) {})(lb)
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	if LevelNeeded(uses) != 5 {
		t.Errorf("uses %v need level %d, want 5", uses, LevelNeeded(uses))
	}
}
