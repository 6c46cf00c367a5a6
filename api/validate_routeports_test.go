package api

import (
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestValidateRoutePorts: a route's ports name http or https listeners of
// the load balancer, each once; the same host and path may be routed on
// different ports.
func TestValidateRoutePorts(t *testing.T) {
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"on the https listener", func(lb *pb.LoadBalancer) { lb.Routes[0].Ports = []uint32{443} }, expect{}},
		{"the same host and path on other ports", func(lb *pb.LoadBalancer) {
			lb.Listeners[1].RedirectToHttps = false
			lb.Routes[0].Ports = []uint32{443}
			lb.Routes = append(lb.Routes, &pb.Route{Host: "shop.acme.example", Path: "/", Pool: "web", Ports: []uint32{80}})
		}, expect{}},
		{"the same host and path on the same ports", func(lb *pb.LoadBalancer) {
			lb.Routes[0].Ports = []uint32{443, 80}
			lb.Routes = append(lb.Routes, &pb.Route{Host: "shop.acme.example", Path: "/", Pool: "web", Ports: []uint32{80, 443}})
		}, bad("routes[2]", "duplicates routes[0]")},
		{"a tcp listener's port", func(lb *pb.LoadBalancer) { lb.Routes[0].Ports = []uint32{5432} }, bad("routes[0].ports[0]", "no http or https listener has port 5432")},
		{"no listener's port", func(lb *pb.LoadBalancer) { lb.Routes[0].Ports = []uint32{8080} }, bad("routes[0].ports[0]", "no http or https listener has port 8080")},
		{"twice", func(lb *pb.LoadBalancer) { lb.Routes[0].Ports = []uint32{443, 443} }, bad("routes[0].ports[1]", "already listed as ports[0]")},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}
