package vip

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// peerLoop runs n1's loop of a three-host cluster by hand, with n arp
// VIPs; the peers' heartbeats list what they hold (hosts of this
// version), as the test sets it.
type peerLoop struct {
	t       *testing.T
	m       *Manager
	now     time.Time
	seq     map[string]uint64
	inc     map[string]uint64
	vips    []netip.Addr
	holding map[string]map[netip.Addr]bool
	// alive and handover: which peers send heartbeats, and which of
	// them say they hand their clients over. quiet: peers that are alive
	// (the others report them) but whose own heartbeats do not reach
	// this host.
	alive, handover, quiet map[string]bool
	// ordered: the peers' incarnations are ordered (hosts of this
	// version); sent: every heartbeat the peers sent, in order.
	ordered bool
	sent    []received
}

func newPeerLoop(t *testing.T, n int) *peerLoop {
	t.Helper()
	m, sink := loopTestManager(t)
	l := &peerLoop{t: t, m: m, now: time.Now(), seq: map[string]uint64{}, inc: map[string]uint64{"n2": 1, "n3": 1},
		holding: map[string]map[netip.Addr]bool{"n2": {}, "n3": {}},
		alive:   map[string]bool{"n2": true, "n3": true}, handover: map[string]bool{}, quiet: map[string]bool{}}
	objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "l2", Cidrs: []string{"198.18.0.0/24"}, Mode: ModeARP}}}}
	for _, id := range []string{"n1", "n2", "n3"} {
		objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String()}}})
	}
	ready := map[string]string{}
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		l.vips = append(l.vips, a)
		lb := &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i), Vip: &pb.VIPRequest{Pool: "l2"},
			Status: &pb.LoadBalancerStatus{Address: a.String()}}
		objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
		ready["t/"+lb.Name] = ""
		// Each peer holds what it ranks first for among the three.
		if first := rank(a, []string{"n1", "n2", "n3"})[0]; first != "n1" {
			l.holding[first][a] = true
		}
	}
	m.Update(objs, 1)
	m.setReady(ready)
	for now0 := l.now; l.now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		l.tick()
	}
	for _, a := range l.vips {
		if m.loop.holding[a] != (rank(a, []string{"n1", "n2", "n3"})[0] == "n1") {
			t.Fatalf("%s: n1 holds it %v; want the first-ranked host to", a, m.loop.holding[a])
		}
	}
	return l
}

func (l *peerLoop) tick() {
	l.now = l.now.Add(l.m.cfg.HeartbeatInterval)
	for _, id := range []string{"n2", "n3"} {
		if !l.alive[id] || l.quiet[id] {
			continue
		}
		var sights []sighting
		for _, o := range []string{"n1", "n2", "n3"} {
			if o != id && (o == "n1" || l.alive[o]) {
				sights = append(sights, sighting{ID: o, Eligible: true, Settled: true})
			}
		}
		var held []netip.Addr
		for a := range l.holding[id] {
			held = append(held, a)
		}
		l.seq[id]++
		r := received{at: l.now, hb: &heartbeat{ID: id, Incarnation: l.inc[id], Seq: l.seq[id], Ordered: l.ordered, Eligible: true,
			Handover: l.handover[id], Holdings: true, HoldingSent: true, Holding: held, Sightings: sights}}
		l.sent = append(l.sent, r)
		l.m.receive(r)
	}
	l.m.beatTick(l.now)
}

// TestPeerHandingOverIsNoCandidateForOthersVIPs: a peer that hands its
// clients over keeps the VIPs it holds (this host leaves them), but is no
// candidate for any other: when a third host dies meanwhile, this host
// takes the dead host's VIPs at its detection time, also those the
// handing-over peer ranks first for, instead of leaving them without a
// holder until the handover ends.
func TestPeerHandingOverIsNoCandidateForOthersVIPs(t *testing.T) {
	l := newPeerLoop(t, 60)
	m, st := l.m, &l.m.loop
	var n2First int // of n3's VIPs, those n2 ranks above n1 for
	for a := range l.holding["n3"] {
		if rank(a, []string{"n1", "n2"})[0] == "n2" {
			n2First++
		}
	}
	if n2First == 0 || len(l.holding["n2"]) == 0 {
		t.Fatalf("the ranking gives n2 none of n3's VIPs (%d) or holds none (%d): pick other addresses", n2First, len(l.holding["n2"]))
	}
	l.handover["n2"] = true
	for range 10 {
		l.tick()
	}
	for a := range l.holding["n2"] {
		if st.holding[a] {
			t.Fatalf("took %s from n2, which hands its clients over and holds it", a)
		}
	}
	l.alive["n3"] = false
	died := l.now
	for l.now.Sub(died) < m.dead+5*m.cfg.HeartbeatInterval {
		l.tick()
		for a := range l.holding["n2"] {
			if st.holding[a] {
				t.Fatalf("took %s from n2, which hands its clients over and holds it", a)
			}
		}
	}
	for a := range l.holding["n3"] {
		if !st.holding[a] {
			t.Fatalf("%s of the dead n3 not taken %s after its death (n2 ranks first among the live: %v): %q",
				a, l.now.Sub(died), rank(a, []string{"n1", "n2"})[0] == "n2", st.records[a].reason)
		}
		if r := st.records[a].reason; !strings.HasPrefix(r, "took over: no heartbeat from n3") {
			t.Fatalf("%s: reason %q", a, r)
		}
	}
}

// TestRestartedHostWaitsForItsPeersRevision: a host restarts with the
// state it restored from disk (revision 5), in which it is not drained,
// while its peers act on revision 9, in which it is: the leader's
// heartbeat came, but not yet the entries it missed. It holds nothing
// and says it is not eligible until its state reaches revision 9, where
// it finds itself drained, so it never takes a VIP, not even for a
// moment; without the peers' revision it would take back the VIPs it
// ranks first for from the peers that stood in for it.
func TestRestartedHostWaitsForItsPeersRevision(t *testing.T) {
	m, sink := loopTestManager(t)
	now := time.Now()
	m.loop.sync.started = now
	hosts := []string{"n1", "n2", "n3"}
	state := func(drained bool) []*pb.Object {
		objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "l2", Cidrs: []string{"198.18.0.0/24"}, Mode: ModeARP}}}}
		for _, id := range hosts {
			objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String(),
				Draining: drained && id == "n1"}}})
		}
		for i := range 60 {
			lb := &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i), Vip: &pb.VIPRequest{Pool: "l2"},
				Status: &pb.LoadBalancerStatus{Address: netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}).String()}}
			objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
		}
		return objs
	}
	// The peers hold every VIP: their own and, shared between them, those
	// n1 ranks first for (it was drained).
	holding := map[string][]netip.Addr{}
	for i := range 60 {
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		h := rank(a, hosts)[0]
		if h == "n1" {
			h = rank(a, hosts[1:])[0]
		}
		holding[h] = append(holding[h], a)
	}
	m.Update(state(false), 5)
	ready := map[string]string{}
	for i := range 60 {
		ready[fmt.Sprintf("t/lb-%d", i)] = ""
	}
	m.setReady(ready)
	seq := uint64(0)
	tick := func() {
		now = now.Add(m.cfg.HeartbeatInterval)
		seq++
		for _, id := range hosts[1:] {
			other := hosts[1]
			if id == other {
				other = hosts[2]
			}
			m.receive(received{at: now, hb: &heartbeat{ID: id, Incarnation: 1, Seq: seq, Revision: 9, Eligible: true,
				Holdings: true, HoldingSent: true, Holding: holding[id],
				Sightings: []sighting{{ID: "n1", Eligible: false, Settled: true}, {ID: other, Eligible: true, Settled: true}}}})
		}
		m.evaluate(now, false)
		m.planBeats(now)
		for a, r := range m.loop.records {
			if r.held {
				t.Fatalf("%s after the start: took %s (%s)", now.Sub(m.loop.sync.started), a, r.reason)
			}
		}
		if plan := m.beats.plan.Load(); plan != nil && plan.hb.Eligible {
			t.Fatalf("%s after the start: says it is eligible", now.Sub(m.loop.sync.started))
		}
	}
	// Well past a detection time and the settling time on the old state.
	for range 3 * int(m.settle/m.cfg.HeartbeatInterval) {
		tick()
	}
	if !m.loop.sync.synced.IsZero() {
		t.Fatal("synced on a state behind its peers'")
	}
	m.Update(state(true), 9)
	for range 2 * int(m.settle/m.cfg.HeartbeatInterval) {
		tick()
	}
	if m.loop.sync.synced.IsZero() {
		t.Fatal("not synced once its state reached its peers' revision")
	}
	if r := m.loop.records[holding["n2"][0]]; r == nil || !strings.Contains(r.reason, problemDrained) {
		t.Fatalf("once caught up: reason %v, want that it is drained", r)
	}
}

// TestNotReadyForAnyInItsHeartbeatsLetsGo: when this host's heartbeats
// start saying that it is not ready for any address (its not-ready list
// grew past what they carry), its peers count it for none and take its
// arp VIPs: it lets them go in the tick that plans that heartbeat (it
// decides again at once), though no VIP's readiness of its own changed;
// when the list fits again, it takes back those nobody holds in one tick
// too.
func TestNotReadyForAnyInItsHeartbeatsLetsGo(t *testing.T) {
	l := newPeerLoop(t, 20)
	st := &l.m.loop
	held := len(st.holding)
	if held == 0 {
		t.Fatal("n1 holds none of the VIPs: pick other addresses")
	}
	// Not ready for 410 addresses that are no VIP here (no VIP's
	// decision reads them).
	// The tick that plans the heartbeat saying so decides again with it:
	// the peers take the VIPs as that heartbeat arrives.
	st.ready.arpNotReady = manyAddrs(410)
	l.tick()
	if len(st.holding) != 0 {
		t.Fatalf("n1 holds %d VIPs while its heartbeats say it is not ready for any", len(st.holding))
	}
	st.ready.arpNotReady = nil
	l.tick()
	if len(st.holding) != held {
		t.Fatalf("n1 holds %d VIPs once its not-ready list fits again, want %d", len(st.holding), held)
	}
}
