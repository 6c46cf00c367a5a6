package snapshot

import (
	"fmt"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func tenantObj(name string, domains, nets []string) *pb.Object {
	return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: name, Domains: domains, Networks: nets}}}
}

func vipPoolObj(name string, cidrs ...string) *pb.Object {
	return &pb.Object{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: name, Cidrs: cidrs, Mode: "static"}}}
}

func lbObj(lb *pb.LoadBalancer) *pb.Object {
	return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}
}

// base is the tenant and VIP pool every test load balancer lives in.
func base() []*pb.Object {
	return []*pb.Object{
		tenantObj("acme", []string{"acme.example"}, []string{"10.20.0.0/16", "2001:db8:20::/64"}),
		vipPoolObj("public", "192.0.2.0/24", "2001:db8:10::/120"),
	}
}

func members(addrs ...string) []*pb.Member {
	out := make([]*pb.Member, len(addrs))
	for i, a := range addrs {
		out[i] = &pb.Member{Address: a}
	}
	return out
}

func weighted(addr string, w uint32) *pb.Member {
	return &pb.Member{Address: addr, Weight: proto.Uint32(w)}
}

// tcpLB is a load balancer with one tcp listener on port to pool "app".
func tcpLB(name, addr string, port uint32, ms ...string) *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name:      name,
		Tenant:    "acme",
		Listeners: []*pb.Listener{{Port: port, Protocol: "tcp", Pool: "app"}},
		Pools:     map[string]*pb.BackendPool{"app": {Members: members(ms...)}},
		Status:    &pb.LoadBalancerStatus{Address: addr},
	}
}

func withCreated(lb *pb.LoadBalancer, t time.Time) *pb.LoadBalancer {
	lb.Meta = &pb.Meta{Created: timestamppb.New(t)}
	return lb
}

func objs(lbs ...*pb.LoadBalancer) []*pb.Object {
	out := base()
	for _, lb := range lbs {
		out = append(out, lbObj(lb))
	}
	return out
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// scaleObjects is n load balancers with a tcp and an http listener and
// ten members each, spread over a /16 of VIPs.
func scaleObjects(n int) []*pb.Object {
	out := []*pb.Object{
		tenantObj("acme", []string{"acme.example"}, []string{"10.0.0.0/8"}),
		vipPoolObj("public", "198.18.0.0/15"),
	}
	for i := range n {
		ms := make([]*pb.Member, 10)
		for j := range ms {
			ms[j] = &pb.Member{Address: fmt.Sprintf("10.%d.%d.%d:%d", i/65536%256, i/256%256, i%256, 30000+j)}
		}
		lb := &pb.LoadBalancer{
			Name:   fmt.Sprintf("lb-%d", i),
			Tenant: "acme",
			Listeners: []*pb.Listener{
				{Port: 5432, Protocol: "tcp", Pool: "app"},
				{Port: 80, Protocol: "http"},
			},
			Routes: []*pb.Route{{Host: fmt.Sprintf("s%d.acme.example", i), Path: "/", Pool: "app"}},
			Pools: map[string]*pb.BackendPool{"app": {
				Members:     ms,
				HealthCheck: &pb.HealthCheck{Tcp: &pb.TCPCheck{}},
			}},
			Status: &pb.LoadBalancerStatus{Address: fmt.Sprintf("198.18.%d.%d", i/256, i%256)},
		}
		out = append(out, lbObj(lb))
	}
	return out
}

func problemsOf(s *Snapshot, lb string) []Problem {
	ps, _ := s.Problems.Get(lb)
	return ps
}
