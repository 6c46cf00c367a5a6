package vip

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestStateLandingWhileAdoptingKeepsTheDelta: a load balancer created by
// UpdateLoadBalancers and not ready, whose state the loop adopts while a
// whole state (Update) or another change (UpdateLoadBalancers) lands,
// leaves its VIP not ready in that very evaluation, and the readiness
// kept up to date equals a recomputation after each step.
func TestStateLandingWhileAdoptingKeepsTheDelta(t *testing.T) {
	m, tick, objs := scaleState(t, 100)
	st := &m.loop
	lbObj := func(name string, a netip.Addr) *pb.Object {
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Tenant: "t", Name: name,
			Vip: &pb.VIPRequest{Pool: "bulk"}, Status: &pb.LoadBalancerStatus{Address: a.String()}}}}
	}
	create := func(rev uint64, name string, a netip.Addr) *pb.Object {
		t.Helper()
		o := lbObj(name, a)
		changes := func(yield func(*pb.Object, *pb.Object) bool) { yield(nil, o) }
		if !m.UpdateLoadBalancers(changes, rev) {
			t.Fatalf("revision %d: UpdateLoadBalancers refused a load balancer created", rev)
		}
		m.setReadyFor(map[string]string{"t/" + name: "no member is healthy"}, nil)
		return o
	}
	check := func(what string, notReady ...netip.Addr) {
		t.Helper()
		for _, a := range notReady {
			if _, ok := st.want.vip(a); !ok {
				t.Fatalf("%s: the loop's state has no VIP %s", what, a)
			}
			if st.ready.notReady[a] == "" {
				t.Errorf("%s: the VIP %s counts as ready; its only load balancer is not", what, a)
			}
			if r := st.records[a]; r != nil && r.held {
				t.Errorf("%s: this host holds the VIP %s it cannot serve", what, a)
			}
		}
		var again readiness
		again.ready, again.have = st.ready.ready, st.ready.have
		again.recompute(st.want)
		if !maps.Equal(again.notReady, st.ready.notReady) || !slices.Equal(again.arpNotReady, st.ready.arpNotReady) ||
			!slices.Equal(again.bgpNotReady, st.ready.bgpNotReady) ||
			!maps.EqualFunc(again.vipsOf, st.ready.vipsOf, slices.Equal) {
			t.Errorf("%s: readiness kept up to date differs from a recomputation: not ready %v, want %v",
				what, st.ready.arpNotReady, again.arpNotReady)
		}
	}

	// A whole state lands while the loop adopts a derived one.
	a1 := netip.MustParseAddr("198.19.200.1")
	o1 := create(2, "new-1", a1)
	st.afterAdopt = func() {
		st.afterAdopt = nil
		m.Update(append(slices.Clone(objs), o1), 3)
	}
	tick()
	if st.afterAdopt != nil {
		t.Fatal("the evaluation did not adopt the derived state")
	}
	check("a whole state landed while a derived one was adopted", a1)
	tick()
	check("the whole state adopted", a1)

	// A derived state lands while the loop adopts another derived one:
	// the second's change is looked at by the next evaluation alone.
	a2, a3 := netip.MustParseAddr("198.19.200.2"), netip.MustParseAddr("198.19.200.3")
	create(4, "new-2", a2)
	st.afterAdopt = func() {
		st.afterAdopt = nil
		create(5, "new-3", a3)
	}
	full := st.ready.full
	tick()
	check("a derived state landed while another was adopted", a2)
	tick()
	check("the second derived state adopted", a2, a3)
	if st.ready.full != full {
		t.Errorf("derived states recomputed the readiness of every VIP %d times; want 0", st.ready.full-full)
	}
}
