package snapshot

import (
	"net/netip"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestListenersInAttachments: the listeners of a VIP of a pool in a
// tenant's attachment are keyed by that tenant (Key.Space), so two
// attached tenants' load balancers on the same address and port are two
// listeners, neither a conflict; a VIP of the host's network has none.
func TestListenersInAttachments(t *testing.T) {
	t.Parallel()
	lb := func(tenant, addr string) *pb.Object {
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Name: "web", Tenant: tenant,
			Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: "10.0.0.10:8080"}}}},
			Status:    &pb.LoadBalancerStatus{Address: addr}}}}
	}
	tenant := func(name string) *pb.Object {
		return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: name, Networks: []string{"10.0.0.0/24"}}}}
	}
	objs := []*pb.Object{
		tenant("a"), tenant("b"), tenant("c"),
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.100/32"}, Mode: "arp", Attachment: "a"}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.0.100/32"}, Mode: "arp", Attachment: "b"}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28"}, Mode: "arp"}}},
		lb("a", "10.0.0.100"), lb("b", "10.0.0.100"), lb("c", "192.0.2.1"),
	}
	s := Compile(objs, 1, Defaults{}, nil)
	ap := netip.MustParseAddrPort("10.0.0.100:80")
	for _, tn := range []string{"a", "b"} {
		l := s.Listener(Key{Addr: ap, Network: TCP, Space: tn})
		if l == nil || l.LB != tn+"/web" || l.Name != "10.0.0.100:80/tcp@"+tn {
			t.Fatalf("listener of %s: %+v", tn, l)
		}
		if ps, _ := s.Problems.Get(tn + "/web"); len(ps) != 0 {
			t.Fatalf("problems of %s/web: %+v", tn, ps)
		}
	}
	if l := s.Listener(Key{Addr: ap, Network: TCP}); l != nil {
		t.Fatalf("a listener of an attached VIP in the host's network: %+v", l)
	}
	if l := s.Listener(Key{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Network: TCP}); l == nil || l.Key.Space != "" {
		t.Fatalf("the public VIP's listener: %+v", l)
	}
}
