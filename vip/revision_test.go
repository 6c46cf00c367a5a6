package vip

import (
	"maps"
	"net/netip"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestUpdateRevision: a revision that changes no VIP only moves the
// revision the manager acts on; a load balancer created goes through
// UpdateLoadBalancers (no new whole state); a VIP pool changed gives the
// whole state. None of them touches the readiness, which comes from the
// observed state alone (TestReadinessFollowsTheObservedState).
func TestUpdateRevision(t *testing.T) {
	m, _ := loopTestManager(t)
	lbObj := func(name, addr string, members ...string) *pb.Object {
		lb := &pb.LoadBalancer{Tenant: "t", Name: name, Vip: &pb.VIPRequest{Pool: "bulk"},
			Status: &pb.LoadBalancerStatus{Address: addr}, Pools: map[string]*pb.BackendPool{"app": {}}}
		for _, a := range members {
			lb.Pools["app"].Members = append(lb.Pools["app"].Members, &pb.Member{Address: a})
		}
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}
	}
	pool := &pb.Object{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: ModeARP}}}
	web := lbObj("web", "198.18.0.1", "192.0.2.1:80")
	objs := []*pb.Object{pool, web}
	state := func() ([]*pb.Object, uint64) { return objs, 7 }
	one := func(prev, next *pb.Object) func(func(*pb.Object, *pb.Object) bool) {
		return func(yield func(*pb.Object, *pb.Object) bool) { yield(prev, next) }
	}
	m.Update(objs, 1)
	ready := map[string]string{"t/web": "", "t/api": "no member is healthy"}
	m.setReady(ready)

	// A member added: no VIP changes, and the manager acts on the
	// revision (its heartbeats say so).
	want := m.want
	m.UpdateRevision(one(web, lbObj("web", "198.18.0.1", "192.0.2.1:80", "192.0.2.2:80")), 2, state)
	if m.want != want || m.revision != 2 {
		t.Errorf("a member added: state changed %v, revision %d; want unchanged, 2", m.want != want, m.revision)
	}

	// A load balancer created: derived from the state, not a whole one.
	api := lbObj("api", "198.18.0.2")
	m.UpdateRevision(one(nil, api), 3, state)
	if m.epochs != 1 || m.revision != 3 {
		t.Errorf("a load balancer created: %d whole states, revision %d; want 1, 3", m.epochs, m.revision)
	}
	if _, ok := m.want.vip(netip.MustParseAddr("198.18.0.2")); !ok {
		t.Error("a load balancer created: its VIP is not in the state")
	}

	// A VIP pool changed: the whole state.
	objs = []*pb.Object{pool, web, api}
	m.UpdateRevision(one(pool, pool), 8, state)
	if m.epochs != 2 || m.revision != 7 {
		t.Errorf("a VIP pool changed: %d whole states, revision %d; want 2, 7 (the state's)", m.epochs, m.revision)
	}
	if !maps.Equal(m.ready, ready) || len(m.readyDelta) != 0 {
		t.Errorf("revisions changed the readiness: %q (delta %v), want %q", m.ready, m.readyDelta, ready)
	}
}

// TestNoteRevisionRaisesTheRevisionOnly: a revision that changes nothing
// the manager reads still raises the revision its heartbeats carry (a
// restarted host compares it with its peers'), never lowers it, and is
// ignored before the first state.
func TestNoteRevisionRaisesTheRevisionOnly(t *testing.T) {
	m, _ := loopTestManager(t)
	m.NoteRevision(3)
	if m.revision != 0 {
		t.Fatalf("revision %d before any state, want 0", m.revision)
	}
	m.Update([]*pb.Object{{Kind: &pb.Object_Node{Node: &pb.Node{Id: "n1"}}}}, 5)
	m.NoteRevision(7)
	m.NoteRevision(6)
	if m.revision != 7 {
		t.Fatalf("revision %d, want 7", m.revision)
	}
	m.evaluate(time.Now(), true)
	if m.loop.revision != 7 {
		t.Fatalf("the loop acts on revision %d, want 7", m.loop.revision)
	}
}
