package vip

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// servedLBs is a data plane's readiness as the tests set it; it records
// which load balancers it was asked about.
type servedLBs struct {
	ready map[string]string
	whole int
	asked [][]string
}

func (s *servedLBs) Readiness() map[string]string {
	s.whole++
	return maps.Clone(s.ready)
}

func (s *servedLBs) ReadinessOf(lbs []string) (map[string]string, []string) {
	s.asked = append(s.asked, lbs)
	ready := map[string]string{}
	var gone []string
	for _, lb := range lbs {
		if why, ok := s.ready[lb]; ok {
			ready[lb] = why
		} else {
			gone = append(gone, lb)
		}
	}
	return ready, gone
}

// TestUpdateRevision: a revision that changes no VIP passes on the
// readiness of the load balancers it wrote or the data plane touched; a
// load balancer created goes through UpdateLoadBalancers (no new whole
// state) with its readiness; a VIP pool changed gives the whole state
// and the whole readiness.
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
	dp := &servedLBs{ready: map[string]string{"t/web": "", "t/api": "no member is healthy"}}
	one := func(prev, next *pb.Object) func(func(*pb.Object, *pb.Object) bool) {
		return func(yield func(*pb.Object, *pb.Object) bool) { yield(prev, next) }
	}
	m.Update(objs, 1)
	m.SetReady(dp.Readiness())
	dp.whole = 0

	// A member added: no VIP changes; the load balancer written and the
	// one the data plane touched are asked about, and the manager acts
	// on the revision (its heartbeats say so).
	want := m.want
	m.UpdateRevision(one(web, lbObj("web", "198.18.0.1", "192.0.2.1:80", "192.0.2.2:80")), 2, []string{"t/api", "t/web"}, state, dp)
	if m.want != want || m.revision != 2 || dp.whole != 0 {
		t.Errorf("a member added: state changed %v, revision %d, whole readiness %d times; want unchanged, 2, 0", m.want != want, m.revision, dp.whole)
	}
	if len(dp.asked) != 1 || !slices.Equal(dp.asked[0], []string{"t/api", "t/web"}) {
		t.Errorf("a member added asked the readiness of %v; want once [t/api t/web]", dp.asked)
	}

	// A load balancer created: derived from the state, not a whole one.
	dp.asked = nil
	api := lbObj("api", "198.18.0.2")
	m.UpdateRevision(one(nil, api), 3, nil, state, dp)
	if m.epochs != 1 || m.revision != 3 || dp.whole != 0 {
		t.Errorf("a load balancer created: %d whole states, revision %d, whole readiness %d times; want 1, 3, 0", m.epochs, m.revision, dp.whole)
	}
	if _, ok := m.want.vip(netip.MustParseAddr("198.18.0.2")); !ok {
		t.Error("a load balancer created: its VIP is not in the state")
	}
	if len(dp.asked) != 1 || !slices.Equal(dp.asked[0], []string{"t/api"}) || m.ready["t/api"] == "" {
		t.Errorf("a load balancer created asked the readiness of %v (it is %q); want once [t/api], not ready", dp.asked, m.ready["t/api"])
	}

	// A VIP pool changed: the whole state and the whole readiness.
	dp.asked = nil
	objs = []*pb.Object{pool, web, api}
	m.UpdateRevision(one(pool, pool), 8, nil, state, dp)
	if m.epochs != 2 || m.revision != 7 || dp.whole != 1 || len(dp.asked) != 0 {
		t.Errorf("a VIP pool changed: %d whole states, revision %d, whole readiness %d times, asked %v; want 2, 7 (the state's), 1, none",
			m.epochs, m.revision, dp.whole, dp.asked)
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
