package vip

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestUndrainDecidesOnTheHeartbeatItSends: n1 of three hosts carries
// IPv6 addresses that tenants ta and tb share, and address a, which tb
// and tc share; tc's attachment is not up on n1, and n2 and n3 carry a
// for nobody (not ready). While ta's attachment is not up on n1 either,
// its list of partly ready addresses does not fit in its heartbeats (300
// shared addresses), and with 420 its not-ready list does not fit either
// (it says not ready for any address): it is no candidate for a. n1 is
// drained; meanwhile ta's attachment comes up, and n1 is undrained. The
// evaluation that takes the new state finds the attachment up (a is the
// one partly ready address left, and both lists fit) and n1 eligible
// again, and sends a heartbeat at once that says both: n2 and n3 count
// n1, the only host that can carry a (for tb), as its holder. n1 decides
// a on that heartbeat and holds it in that evaluation. Deciding on the
// one planned before, with the lists left out, it held a for nobody: with
// 300 for good, as nothing decided a again while the peers' heartbeats
// stayed the same; with 420 until the next evaluation, whose signature
// changed with "not ready for any".
func TestUndrainDecidesOnTheHeartbeatItSends(t *testing.T) {
	for _, n := range []int{300, 420} {
		t.Run(fmt.Sprint(n, " shared"), func(t *testing.T) { undrainWithAttachmentUp(t, n) })
	}
}

func undrainWithAttachmentUp(t *testing.T, n int) {
	dir := t.TempDir()
	boundNetns(t, dir, api.AttachmentNamespace("tb"))
	m, sink := loopTestManager(t)
	m.cfg.NetnsDir = dir
	st := &m.loop
	hosts := []string{"n1", "n2", "n3"}
	shared := manyAddrs(n) // within 2001:db8::/119
	a := netip.MustParseAddr("2001:db8:1::1")
	objs := func(drained bool) []*pb.Object {
		pool := func(tenant string, cidrs ...string) *pb.Object {
			return api.Wrap(&pb.VIPPool{Name: tenant + "-private", Cidrs: cidrs, Mode: ModeARP, Attachment: tenant})
		}
		out := []*pb.Object{
			pool("ta", "2001:db8::/119"), pool("tb", "2001:db8::/119", "2001:db8:1::/120"), pool("tc", "2001:db8:1::/120"),
		}
		for _, id := range hosts {
			out = append(out, api.Wrap(&pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String(), Draining: drained && id == "n1"}))
		}
		lb := func(tenant, name string, addr netip.Addr) *pb.Object {
			return api.Wrap(&pb.LoadBalancer{Tenant: tenant, Name: name, Vip: &pb.VIPRequest{Pool: tenant + "-private"},
				Status: &pb.LoadBalancerStatus{Address: addr.String()}})
		}
		for i, x := range shared {
			out = append(out, lb("ta", fmt.Sprint("web-", i), x), lb("tb", fmt.Sprint("web-", i), x))
		}
		return append(out, lb("tb", "api", a), lb("tc", "api", a))
	}
	ready := map[string]string{"tb/api": "", "tc/api": ""}
	for i := range shared {
		ready[fmt.Sprint("ta/web-", i)], ready[fmt.Sprint("tb/web-", i)] = "", ""
	}
	// n2 and n3 hold the shared addresses, each those it ranks first for
	// of the two, and carry a for nobody.
	holding := map[string][]netip.Addr{}
	for _, x := range shared {
		h := rank(x, hosts[1:])[0]
		holding[h] = append(holding[h], x)
	}
	revision := uint64(1)
	m.Update(objs(false), revision)
	m.setReady(ready)
	now, seq := time.Now(), uint64(0)
	tick := func() {
		now = now.Add(m.cfg.HeartbeatInterval)
		seq++
		for _, id := range hosts[1:] {
			m.receive(received{at: now, hb: &heartbeat{ID: id, Incarnation: 1, Seq: seq, Revision: revision, Eligible: true,
				Holdings: true, HoldingSent: true, Holding: holding[id], ReadsPartly: true, PartlySent: true,
				NotReady:  []netip.Addr{a},
				Sightings: []sighting{{ID: "n1", Eligible: true, Settled: true}, {ID: other(id), Eligible: true, Settled: true}}}})
		}
		m.beatTick(now)
	}
	for now0 := now; now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		tick()
	}
	if all := n > maxDatagram/20; !st.eligible || !st.partlyUnsent || st.notReadyAllSent != all || len(st.ready.arpPartly) != n+1 || st.holding[a] {
		t.Fatalf("before: eligible %t, partly list left out %t, not ready for any %t, partly ready %d, holds a %t; want eligible, %d partly ready left out, not ready for any %t, a not held",
			st.eligible, st.partlyUnsent, st.notReadyAllSent, len(st.ready.arpPartly), st.holding[a], n+1, all)
	}

	revision++
	m.Update(objs(true), revision)
	for range 2 * int(m.dead/m.cfg.HeartbeatInterval) {
		tick()
	}
	if st.eligible {
		t.Fatal("drained, n1 is still eligible")
	}

	// ta's attachment comes up on n1, and n1 is undrained: the loop takes
	// the new state between two ticks.
	boundNetns(t, dir, api.AttachmentNamespace("ta"))
	revision++
	m.Update(objs(false), revision)
	now = now.Add(time.Millisecond)
	m.evaluate(now, false)
	if !st.eligible || st.partlyUnsent || st.notReadyAllSent || len(st.ready.arpPartly) != 1 {
		t.Fatalf("undrained: eligible %t, partly list left out %t, not ready for any %t, partly ready %d; want eligible, a alone, sent",
			st.eligible, st.partlyUnsent, st.notReadyAllSent, len(st.ready.arpPartly))
	}
	if p := m.beats.plan.Load(); p == nil || !p.hb.Eligible {
		t.Fatal("the evaluation that made n1 eligible again sent no heartbeat saying so")
	}
	ticks := 0
	for ; !st.holding[a] && ticks < 50; ticks++ {
		tick()
	}
	if !st.holding[a] {
		t.Fatalf("n1 never held a in %d ticks, though its heartbeats make it a's only candidate for n2 and n3: %q", ticks, st.records[a].reason)
	}
	if ticks > 0 {
		t.Errorf("n1 held a only %d tick(s) after the evaluation whose heartbeat its peers act on, want in that one", ticks)
	}
	for x := range st.holding {
		if x != a {
			t.Errorf("n1 took %s, which a live peer holds", x)
		}
	}
}
