package vip

import (
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestChangesMatter: of one revision's changes, a VIP pool, a host, or a
// load balancer created, deleted, readdressed or moved to another VIP
// pool can change the VIPs wanted; a member change or a certificate write
// cannot.
func TestChangesMatter(t *testing.T) {
	lbObj := func(addr, pool string, members ...string) *pb.Object {
		lb := &pb.LoadBalancer{Tenant: "acme", Name: "web", Vip: &pb.VIPRequest{Pool: pool},
			Status: &pb.LoadBalancerStatus{Address: addr}, Pools: map[string]*pb.BackendPool{"app": {}}}
		for _, m := range members {
			lb.Pools["app"].Members = append(lb.Pools["app"].Members, &pb.Member{Address: m})
		}
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}
	}
	base := lbObj("192.0.2.10", "public", "198.51.100.1:80")
	vipPool := &pb.Object{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "public"}}}
	node := &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: "n2"}}}
	cert := &pb.Object{Kind: &pb.Object_Certificate{Certificate: &pb.Certificate{}}}
	for _, tc := range []struct {
		name    string
		changes [][2]*pb.Object // previous, next
		want    bool
	}{
		{"member added", [][2]*pb.Object{{base, lbObj("192.0.2.10", "public", "198.51.100.1:80", "198.51.100.2:80")}}, false},
		{"certificate written", [][2]*pb.Object{{nil, cert}}, false},
		{"nothing", nil, false},
		{"load balancer created", [][2]*pb.Object{{nil, base}}, true},
		{"load balancer deleted", [][2]*pb.Object{{base, nil}}, true},
		{"address changed", [][2]*pb.Object{{base, lbObj("192.0.2.11", "public", "198.51.100.1:80")}}, true},
		{"second address added", [][2]*pb.Object{{base, func() *pb.Object {
			o := lbObj("192.0.2.10", "public", "198.51.100.1:80")
			o.GetLoadBalancer().Status.Addresses = []string{"192.0.2.10", "2001:db8::10"}
			return o
		}()}}, true},
		{"VIP pool changed", [][2]*pb.Object{{base, lbObj("192.0.2.10", "other", "198.51.100.1:80")}}, true},
		{"VIP pool written", [][2]*pb.Object{{nil, vipPool}}, true},
		{"host deleted", [][2]*pb.Object{{node, nil}}, true},
		{"member change then host", [][2]*pb.Object{{base, lbObj("192.0.2.10", "public")}, {nil, node}}, true},
	} {
		seq := func(yield func(*pb.Object, *pb.Object) bool) {
			for _, c := range tc.changes {
				if !yield(c[0], c[1]) {
					return
				}
			}
		}
		if got := ChangesMatter(seq); got != tc.want {
			t.Errorf("%s: ChangesMatter = %v, want %v", tc.name, got, tc.want)
		}
	}
}
