package api

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestValidateHTTP3: listeners[].http3 is taken on https listeners only,
// claims the listener's port over UDP (a udp listener of the same port is
// refused), and is reported as a level-5 feature.
func TestValidateHTTP3(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"https", func(lb *pb.LoadBalancer) { lb.Listeners[0].Http3 = true }, expect{}},
		{"http", func(lb *pb.LoadBalancer) { lb.Listeners[1].Http3 = true }, bad("listeners[1].http3", "only https listeners serve HTTP/3")},
		{"tcp", func(lb *pb.LoadBalancer) { lb.Listeners[2].Http3 = true }, bad("listeners[2].http3", "only https listeners serve HTTP/3")},
		{"udp on the same port", func(lb *pb.LoadBalancer) {
			lb.Listeners[0].Http3 = true
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 443, Protocol: "udp", Pool: "db"})
		}, bad("listeners[3].port", "port 443/udp is already used by listeners[0]")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, baseCatalog()), tt.want)
		})
	}
	lb := shopLB()
	lb.Listeners[0].Http3 = true
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	found := false
	for _, u := range uses {
		if u.Feature == FeatureHTTP3 && strings.HasSuffix(u.Field, "listeners[0].http3") {
			found = true
		}
	}
	if !found || LevelNeeded(uses) != 5 {
		t.Fatalf("FeaturesUsed %v (level %d); want listeners[0].http3 at level 5", uses, LevelNeeded(uses))
	}
	// Another load balancer on the VIP may not take the UDP port.
	a, b := shopLB(), shopLB()
	a.Listeners[0].Http3 = true
	b.Listeners = []*pb.Listener{{Port: 443, Protocol: "udp", Pool: "db"}}
	if k := portClash(a, b); k != "443/udp" {
		t.Fatalf("portClash = %q, want 443/udp", k)
	}
}

// TestValidateHTTP3ZeroRTT: listeners[].http3ZeroRtt is taken with http3
// only, not with source ranges (early data comes from an address not yet
// validated), and is reported as a level-6 feature.
func TestValidateHTTP3ZeroRTT(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"with http3", func(lb *pb.LoadBalancer) { lb.Listeners[0].Http3, lb.Listeners[0].Http3ZeroRtt = true, true }, expect{}},
		{"without http3", func(lb *pb.LoadBalancer) { lb.Listeners[0].Http3ZeroRtt = true }, bad("listeners[0].http3ZeroRtt", "0-RTT is part of HTTP/3")},
		{"http", func(lb *pb.LoadBalancer) { lb.Listeners[1].Http3ZeroRtt = true }, bad("listeners[1].http3ZeroRtt", "0-RTT is part of HTTP/3")},
		{"with source ranges", func(lb *pb.LoadBalancer) {
			lb.Listeners[0].Http3, lb.Listeners[0].Http3ZeroRtt, lb.Listeners[0].AllowedSources = true, true, []string{"198.51.100.0/24"}
		}, bad("listeners[0].http3ZeroRtt", "early data is served before the client's address is validated (a sender that never completes the handshake may forge it), so allowedSources and deniedSources could not hold for it; remove http3ZeroRtt or the source ranges")},
		{"with denied sources", func(lb *pb.LoadBalancer) {
			lb.Listeners[0].Http3, lb.Listeners[0].Http3ZeroRtt, lb.Listeners[0].DeniedSources = true, true, []string{"198.51.100.7/32"}
		}, bad("listeners[0].http3ZeroRtt", "allowedSources and deniedSources could not hold for it")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, baseCatalog()), tt.want)
		})
	}
	lb := shopLB()
	lb.Listeners[0].Http3, lb.Listeners[0].Http3ZeroRtt = true, true
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	found := false
	for _, u := range uses {
		if u.Feature == FeatureHTTP3ZeroRTT && strings.HasSuffix(u.Field, "listeners[0].http3ZeroRtt") {
			found = true
		}
	}
	if !found || LevelNeeded(uses) != 6 {
		t.Fatalf("FeaturesUsed %v (level %d); want listeners[0].http3ZeroRtt at level 6", uses, LevelNeeded(uses))
	}
}
