package observe

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func assessLB() *pb.LoadBalancer {
	return &pb.LoadBalancer{Tenant: "acme", Name: "web", Meta: &pb.Meta{Revision: 7},
		Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "app"}},
		Status:    &pb.LoadBalancerStatus{Address: "192.0.2.10"}}
}

// host is an observation of acme/web on one host: listener bound or not,
// members healthy or not, VIP state ("" reports none).
func host(id string, bound bool, healthy []bool, vip string) *pb.HostObservation {
	h := &pb.HostObservation{NodeId: id, Reachable: true, Revision: 7}
	l := &pb.ListenerObservation{LoadBalancer: "acme/web", Address: "192.0.2.10:80", Protocol: "tcp", Bound: bound}
	if !bound {
		l.Error = "listen tcp4 192.0.2.10:80: bind: address already in use"
		h.Problems = append(h.Problems, &pb.LoadBalancerProblem{LoadBalancer: "acme/web", Field: "listeners[0]", Reason: "cannot listen on 192.0.2.10:80/tcp: ..."})
	}
	h.Listeners = append(h.Listeners, l)
	po := &pb.PoolObservation{LoadBalancer: "acme/web", Pool: "app"}
	for i, ok := range healthy {
		m := &pb.MemberObservation{Address: "10.20.0." + string(rune('1'+i)) + ":80", Healthy: ok}
		if !ok {
			m.Down, m.Reason = true, "health check fails: connection refused"
		}
		po.Members = append(po.Members, m)
	}
	h.Pools = append(h.Pools, po)
	if vip != "" {
		h.Vips = append(h.Vips, &pb.VIPHolding{Address: "192.0.2.10", State: vip, Reason: "holder is n1", LoadBalancers: []string{"acme/web"}})
	}
	return h
}

func TestAssess(t *testing.T) {
	refusedHost := func(id string) *pb.HostObservation {
		return &pb.HostObservation{NodeId: id, Reachable: true, Revision: 7, Problems: []*pb.LoadBalancerProblem{
			{LoadBalancer: "acme/web", Field: "listeners[0]", Reason: "port 80 is taken by acme/other"}}}
	}
	noAddr := assessLB()
	noAddr.Status.Address = ""
	for _, c := range []struct {
		name   string
		lb     *pb.LoadBalancer
		hosts  []*pb.HostObservation
		phase  string
		reason string
	}{
		{"serving", assessLB(), []*pb.HostObservation{host("n1", true, []bool{true, true}, "holding"), host("n2", true, []bool{true, true}, "released")}, Serving, ""},
		{"one member down", assessLB(), []*pb.HostObservation{host("n1", true, []bool{true, false}, "holding")}, Degraded, "member 10.20.0.2:80 is down"},
		{"all members down", assessLB(), []*pb.HostObservation{host("n1", true, []bool{false, false}, "holding"), host("n2", true, []bool{false}, "")}, Failing, "no healthy member on any host"},
		{"unbound on one host", assessLB(), []*pb.HostObservation{host("n1", true, []bool{true}, "holding"), host("n2", false, []bool{true}, "")}, Degraded, "n2: listeners[0] 192.0.2.10:80/tcp is not bound"},
		{"unbound everywhere", assessLB(), []*pb.HostObservation{host("n1", false, []bool{true}, "holding")}, Failing, "no listener is bound on any host"},
		{"nobody holds the VIP", assessLB(), []*pb.HostObservation{host("n1", true, []bool{true}, "released")}, Failing, "no host holds VIP 192.0.2.10 (n1: holder is n1)"},
		{"refused", assessLB(), []*pb.HostObservation{refusedHost("n1"), refusedHost("n2")}, Refused, "port 80 is taken"},
		{"no address", noAddr, nil, Pending, "no address allocated"},
		{"behind", assessLB(), []*pb.HostObservation{{NodeId: "n1", Reachable: true, Revision: 6}}, Pending, "serves revision 6"},
		{"nobody answers", assessLB(), []*pb.HostObservation{{NodeId: "n1", Error: "deadline exceeded"}}, Unknown, "no LB host answered"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Assess(c.lb, c.hosts)
			if got.Phase != c.phase || !strings.Contains(got.Reason, c.reason) || (c.phase == Serving) != (got.Reason == "") {
				t.Errorf("got %s %q (problems %q), want %s containing %q", got.Phase, got.Reason, got.Problems, c.phase, c.reason)
			}
		})
	}
	// A dual-stack load balancer with one of its VIPs held by nobody.
	dual := assessLB()
	dual.Status.Addresses = []string{"192.0.2.10", "2001:db8::10"}
	h1 := host("n1", true, []bool{true}, "holding")
	h1.Vips = append(h1.Vips, &pb.VIPHolding{Address: "2001:db8::10", State: "released", Reason: "no majority", LoadBalancers: []string{"acme/web"}})
	if got := Assess(dual, []*pb.HostObservation{h1}); got.Phase != Degraded || !strings.Contains(got.Reason, "no host holds VIP 2001:db8::10, one of the load balancer's 2") {
		t.Errorf("dual stack, IPv6 VIP released: %s %q", got.Phase, got.Reason)
	}
	h1.Vips[1].State = "holding"
	if got := Assess(dual, []*pb.HostObservation{h1}); got.Phase != Serving || strings.Join(got.HeldBy, ",") != "n1" {
		t.Errorf("dual stack, both held: %s %q held by %v", got.Phase, got.Reason, got.HeldBy)
	}
	// An address several tenants' attachments carry, held for another
	// tenant only: not held for this one, and the reason says why.
	down := "tenant acme's attachment, which carries this VIP, is not up on this host (no namespace teapot-att-acme)"
	shared := func(id, state string, unserved bool) *pb.HostObservation {
		h := host(id, true, []bool{true}, state)
		if unserved {
			h.Vips[0].UnservedTenants = map[string]string{"acme": down}
		}
		return h
	}
	got := Assess(assessLB(), []*pb.HostObservation{shared("n1", "holding", true), shared("n2", "released", true)})
	if got.Phase != Failing || len(got.HeldBy) != 0 ||
		!strings.Contains(got.Reason, "no host holds VIP 192.0.2.10 for tenant acme, which shares the address with other tenants: no host that holds it has the tenant's attachment up") ||
		!strings.Contains(got.Reason, "n1: holds it for the other tenants that share it, not for acme: "+down) {
		t.Errorf("held for another tenant only: %s %q held by %v", got.Phase, got.Reason, got.HeldBy)
	}
	if got := Assess(assessLB(), []*pb.HostObservation{shared("n1", "released", true), shared("n2", "holding", false)}); got.Phase != Serving || strings.Join(got.HeldBy, ",") != "n2" {
		t.Errorf("held for this tenant by n2: %s %q held by %v", got.Phase, got.Reason, got.HeldBy)
	}
	held := Assess(assessLB(), []*pb.HostObservation{host("n2", true, []bool{true}, "announcing"), host("n1", true, []bool{true}, "announcing")})
	if strings.Join(held.HeldBy, ",") != "n1,n2" {
		t.Errorf("held by %v", held.HeldBy)
	}
}
