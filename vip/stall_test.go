package vip

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestStalledHolderLosesItsVIPsOnce: n1 holds the arp VIPs it ranks
// first for and is paused for longer than the detection time; n2 and n3
// take its VIPs meanwhile. When n1 runs again it first reads the
// heartbeats the kernel queued during the pause, which still show the old
// holdings, then a fresh one from n2, which makes its majority again,
// while n3's news of what it took is still on the way. n1 releases its
// VIPs once and takes none back: without the hold after regaining the
// majority it would take back those n3 took (it ranks first and, as far
// as it knows, nobody holds them), and n3, the healthy host, would let
// them go.
func TestStalledHolderLosesItsVIPsOnce(t *testing.T) {
	const n = 30
	m, sink := loopTestManager(t)
	hosts := []string{"n1", "n2", "n3"}
	objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "web", Cidrs: []string{"198.18.0.0/24"}, Mode: ModeARP}}}}
	for _, id := range hosts {
		objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String()}}})
	}
	ready := map[string]string{}
	var addrs []netip.Addr
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		addrs = append(addrs, a)
		lb := &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i), Vip: &pb.VIPRequest{Pool: "web"},
			Status: &pb.LoadBalancerStatus{Address: a.String()}}
		objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
		ready["t/"+lb.Name] = ""
	}
	m.Update(objs, 1)
	m.setReady(ready)

	// holders: who holds each VIP; at first the host ranked first.
	holders := map[netip.Addr]string{}
	for _, a := range addrs {
		holders[a] = rank(a, hosts)[0]
	}
	heldBy := func(id string) []netip.Addr {
		var out []netip.Addr
		for _, a := range addrs {
			if holders[a] == id {
				out = append(out, a)
			}
		}
		return out
	}
	seq := map[string]uint64{}
	// beat delivers a heartbeat of id that arrived at at, in which id
	// last heard n1 n1Age before sending it, and holds what holding says.
	beat := func(id string, at time.Time, n1Age time.Duration, holding []netip.Addr) {
		seq[id]++
		m.receive(received{at: at, hb: &heartbeat{ID: id, Incarnation: 1, Seq: seq[id], Eligible: true,
			Holdings: true, HoldingSent: true, Holding: holding,
			Sightings: []sighting{{ID: "n1", Age: n1Age, Eligible: true, Settled: true}, {ID: other(id), Eligible: true, Settled: true}}}})
	}
	now := time.Now()
	tick := func() {
		now = now.Add(m.cfg.HeartbeatInterval)
		for _, id := range []string{"n2", "n3"} {
			beat(id, now, 0, heldBy(id))
		}
		m.evaluate(now, false)
		m.planBeats(now)
	}
	// Past the start: synced, peers settled, rebalance windows closed.
	for now0 := now; now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		tick()
	}
	st := &m.loop
	mine := heldBy("n1")
	if len(mine) == 0 || !slices.Equal(st.heldARP, mine) {
		t.Fatalf("before the pause n1 holds %v, want the VIPs it ranks first for: %v", st.heldARP, mine)
	}

	// The pause: 120ms, past the detection time (100ms). The peers keep
	// sending; the kernel stamps their heartbeats as they arrive.
	paused := now
	pause := m.dead + m.cfg.HeartbeatInterval
	for d := m.cfg.HeartbeatInterval; d <= pause; d += m.cfg.HeartbeatInterval {
		for _, id := range []string{"n2", "n3"} {
			beat(id, paused.Add(d), d, heldBy(id))
		}
	}
	// At the detection time they took n1's VIPs: each VIP to the host
	// ranked next.
	for _, a := range mine {
		holders[a] = rank(a, hosts)[1]
	}
	now = paused.Add(pause + time.Millisecond)
	m.evaluate(now, false)
	if len(st.heldARP) != 0 {
		t.Fatalf("after the pause n1 still holds %v; its peers took it for dead", st.heldARP)
	}
	m.planBeats(now)

	// n2 heard n1's first heartbeat and answered at once, with what it
	// holds now; n3's answer is still on the way.
	now = now.Add(2 * time.Millisecond)
	beat("n2", now, time.Millisecond, heldBy("n2"))
	m.evaluate(now, false)
	if st.quorum != "majority" {
		t.Fatal("n1 does not count n2's fresh answer towards its majority: the case is not reproduced")
	}
	if len(st.heldARP) != 0 {
		t.Errorf("n1 regained its majority and at once took back %v, which n3 holds", st.heldARP)
	}
	// Then everyone hears everyone again; nothing comes back to n1.
	for range 3 * int(m.dead/m.cfg.HeartbeatInterval) {
		tick()
		if len(st.heldARP) != 0 {
			t.Fatalf("n1 took back %v from live, healthy holders", st.heldARP)
		}
	}
	// A VIP whose holder dies goes to the next live host as usual: n1 is
	// not kept from taking over for good.
	for _, a := range addrs {
		if holders[a] == "n3" {
			holders[a] = slices.DeleteFunc(rank(a, hosts), func(h string) bool { return h == "n3" })[0]
		}
	}
	for range 2 * int(m.dead/m.cfg.HeartbeatInterval) {
		now = now.Add(m.cfg.HeartbeatInterval)
		seq["n2"]++ // n2 no longer hears n3
		m.receive(received{at: now, hb: &heartbeat{ID: "n2", Incarnation: 1, Seq: seq["n2"], Eligible: true,
			Holdings: true, HoldingSent: true, Holding: heldBy("n2"), Sightings: []sighting{{ID: "n1", Eligible: true, Settled: true}}}})
		m.evaluate(now, false)
		m.planBeats(now)
	}
	if want := heldBy("n1"); len(want) == 0 || !slices.Equal(st.heldARP, want) {
		t.Errorf("after n3 died n1 holds %v, want %v", st.heldARP, want)
	}
}
