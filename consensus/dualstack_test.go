package consensus

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Dual-stack load balancers get one address per family through the write
// path, several in one write see each other's, a family the pool has run
// out of is refused (require) or left out (prefer), and a delete frees
// both addresses.
func TestDualStackWrites(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/28", "2001:db8:10::/126"), tenant("acme", "public"))
	dual := func(name, policy string) *pb.Object {
		o := lb("acme", name, "public")
		o.GetLoadBalancer().Vip = &pb.VIPRequest{Pool: "public", Families: []string{"ipv4", "ipv6"}, FamilyPolicy: policy}
		return o
	}
	addrs := func(o *pb.Object) string { return strings.Join(o.GetLoadBalancer().GetStatus().GetAddresses(), " ") }

	resp := apply(t, n, dual("a", ""), dual("b", ""), dual("c", ""))
	for i, want := range []string{"192.0.2.1 2001:db8:10::1", "192.0.2.2 2001:db8:10::2", "192.0.2.3 2001:db8:10::3"} {
		if got := addrs(resp.Objects[i]); got != want {
			t.Fatalf("objects[%d]: %q, want %q", i, got, want)
		}
		if got := resp.Objects[i].GetLoadBalancer().GetStatus().GetAddress(); got != strings.Fields(want)[0] {
			t.Fatalf("objects[%d]: status.address %q", i, got)
		}
	}
	rev := n.Revision()
	_, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{dual("d", "require")}}, false)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "no free IPv6 address") {
		t.Fatalf("IPv6 exhausted under require: %v", err)
	}
	if n.Revision() != rev {
		t.Fatal("a refused write changed the state")
	}
	d := apply(t, n, dual("d", "prefer")).Objects[0]
	if got := addrs(d); got != "192.0.2.4" {
		t.Fatalf("prefer with IPv6 exhausted: %q", got)
	}
	if ps := api.LoadBalancerProblems(d.GetLoadBalancer()); !slices.ContainsFunc(ps, func(p *pb.Problem) bool { return p.GetField() == "vip.families" }) {
		t.Fatalf("no vip.families problem for the IPv4-only VIP: %v", ps)
	}

	// The same spec applied again stays as it is while the pool has no
	// free IPv6 address.
	if r := apply(t, n, dual("d", "prefer")); r.Results[0] != "unchanged" {
		t.Fatalf("d applied again with IPv6 exhausted: %s", r.Results[0])
	}

	if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "b"}}, false); err != nil {
		t.Fatal(err)
	}
	// b's IPv6 address is free: d applied again gets it.
	if r := apply(t, n, dual("d", "prefer")); r.Results[0] != "configured" || addrs(r.Objects[0]) != "192.0.2.4 2001:db8:10::2" {
		t.Fatalf("d applied again with an IPv6 address free: %s %q", r.Results[0], addrs(r.Objects[0]))
	}
	if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "d"}}, false); err != nil {
		t.Fatal(err)
	}
	if got := addrs(apply(t, n, dual("e", "")).Objects[0]); got != "192.0.2.2 2001:db8:10::2" {
		t.Fatalf("after b's delete: %q, want b's two addresses", got)
	}
	// An update keeps both addresses; dropping a family frees its address.
	a := dual("a", "")
	a.GetLoadBalancer().Listeners[0].Port = 8080
	if got := addrs(apply(t, n, a).Objects[0]); got != "192.0.2.1 2001:db8:10::1" {
		t.Fatalf("update: %q", got)
	}
	a.GetLoadBalancer().Vip.Families = []string{"ipv4"}
	if got := addrs(apply(t, n, a).Objects[0]); got != "192.0.2.1" {
		t.Fatalf("ipv4 only: %q", got)
	}
	if got := addrs(apply(t, n, dual("f", "")).Objects[0]); got != "192.0.2.4 2001:db8:10::1" {
		t.Fatalf("after a dropped IPv6: %q", got)
	}
}
