package vip

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// scaleManager is a host n1 of a three-host cluster with n arp VIPs, one
// load balancer lb-i each, all ready, past its start: synced, peers
// settled, rebalance windows closed. tick advances one heartbeat
// interval with the peers' heartbeats and runs the loop's evaluation.
func scaleManager(t *testing.T, n int) (*Manager, func()) {
	t.Helper()
	m, tick, _ := scaleState(t, n)
	return m, tick
}

// scaleState is scaleManager that also returns the objects of its state.
func scaleState(t *testing.T, n int) (*Manager, func(), []*pb.Object) {
	t.Helper()
	m, sink := loopTestManager(t)

	objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: ModeARP}}}}
	for _, id := range []string{"n1", "n2", "n3"} {
		objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String()}}})
	}
	ready := map[string]string{}
	addrOf := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{198, 18 + byte((i+1)>>16), byte((i + 1) >> 8), byte(i + 1)})
	}
	for i := range n {
		lb := &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i), Vip: &pb.VIPRequest{Pool: "bulk"},
			Status: &pb.LoadBalancerStatus{Address: addrOf(i).String()}}
		objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
		ready["t/"+lb.Name] = ""
	}
	m.Update(objs, 1)
	m.setReady(ready)

	now := time.Now()
	seq := map[string]uint64{}
	beats := func() {
		for _, id := range []string{"n2", "n3"} {
			seq[id]++
			m.receive(received{at: now, hb: &heartbeat{ID: id, Incarnation: 1, Seq: seq[id], Eligible: true, Holdings: true,
				Sightings: []sighting{{ID: "n1", Eligible: true, Settled: true}, {ID: other(id), Eligible: true, Settled: true}}}})
		}
	}
	tick := func() {
		now = now.Add(m.cfg.HeartbeatInterval)
		beats()
		m.evaluate(now, false)
		m.planBeats(now)
	}
	// Past the start: synced, peers settled, rebalance windows closed.
	for now0 := now; now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		tick()
	}
	return m, tick, objs
}

// TestTicksAtScaleLookAtNoVIP: with 10,000 arp VIPs on a host of a
// three-host cluster, the loop's heartbeat ticks (evaluate and the
// heartbeat plan, 50 a second at the default interval) look at no VIP and
// decide none again when nothing changed; a readiness report that changes
// nothing does not either; a load balancer that stops being ready
// recomputes its own VIP's readiness, not the others'. The heartbeats
// still carry what this host holds and what it is not ready for.
func TestTicksAtScaleLookAtNoVIP(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	const n = 10000
	m, tick := scaleManager(t, n)
	st := &m.loop
	if len(st.heldARP) == 0 || len(st.heldARP) == n {
		t.Fatalf("holds %d of %d VIPs; want the share this host ranks first for", len(st.heldARP), n)
	}

	st.ready.examined, st.converges = 0, 0
	for range 50 {
		tick()
	}
	if st.ready.examined != 0 || st.converges != 0 {
		t.Errorf("50 ticks with nothing new: looked at %d VIPs, decided every VIP %d times; want 0 and 0", st.ready.examined, st.converges)
	}
	plan := m.beats.plan.Load()
	if plan == nil || len(plan.hb.Holding) != len(st.heldARP) || len(plan.hb.NotReady) != 0 {
		t.Fatalf("heartbeat plan %+v: want the %d VIPs held and none not ready", plan, len(st.heldARP))
	}

	// The data plane says again what it said: nothing to do.
	m.setReadyFor(map[string]string{"t/lb-7": ""}, nil)
	tick()
	if st.ready.examined != 0 || st.converges != 0 {
		t.Errorf("a readiness report that changes nothing: looked at %d VIPs, %d whole decisions; want 0 and 0", st.ready.examined, st.converges)
	}

	// One held VIP's load balancer stops being ready.
	held := st.heldARP[len(st.heldARP)/2]
	lb := fmt.Sprintf("t/lb-%d", int(held.As4()[1]-18)<<16|int(held.As4()[2])<<8|int(held.As4()[3])-1)
	m.setReadyFor(map[string]string{lb: "no member is healthy"}, nil)
	tick()
	if st.ready.examined != 1 {
		t.Errorf("one load balancer not ready: looked at the readiness of %d VIPs, want 1", st.ready.examined)
	}
	if st.records[held].held || st.holding[held] {
		t.Errorf("still holds %s, whose only load balancer %s is not ready", held, lb)
	}
	plan = m.beats.plan.Load()
	if len(plan.hb.NotReady) != 1 || plan.hb.NotReady[0] != held {
		t.Errorf("heartbeat says not ready for %v, want [%s]", plan.hb.NotReady, held)
	}
	st.ready.examined, st.converges = 0, 0
	for range 20 {
		tick()
	}
	if st.ready.examined != 0 || st.converges != 0 {
		t.Errorf("20 ticks after: looked at %d VIPs, %d whole decisions; want 0 and 0", st.ready.examined, st.converges)
	}
}

func other(id string) string {
	if id == "n2" {
		return "n3"
	}
	return "n2"
}

// loopTestManager returns a Manager for n1 whose loop a test drives by
// hand (receive, evaluate, planBeats), with 100ms detection, and a socket
// its heartbeats go to and are never read from.
func loopTestManager(t *testing.T) (*Manager, *net.UDPConn) {
	t.Helper()
	m := &Manager{
		cfg:  Config{NodeID: "n1", HeartbeatInterval: 20 * time.Millisecond, StateMaxAge: time.Hour},
		dead: 100 * time.Millisecond, log: slog.New(slog.DiscardHandler),
		kick: make(chan struct{}, 1), ready: map[string]string{}, key: []byte("key"),
	}
	m.arp = &iface{name: "vip-test"}
	m.quorum = m.dead - m.cfg.HeartbeatInterval
	m.settle = settleMultiple * m.dead
	m.gap = gapMultiple * m.dead
	udp := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	m.conn = udp()
	sink := udp() // the peers' heartbeats go here and are never read
	m.act = newActuator(m)
	m.beats = newBeatSender(m)
	m.loop.init()
	m.loop.linkDirty = false // the interface is not read: it is up
	arrivals := map[string]*peerArrival{}
	m.arrivals.Store(&arrivals)

	return m, sink
}

// TestLoadBalancerChangesRecomputeTheirVIPsOnly: with 10,000 arp VIPs, a
// load balancer created, one deleted and one moved to another address
// (UpdateLoadBalancers, the data plane's readiness of those alone) look at
// the readiness of the VIPs they change and decide those VIPs alone,
// never all of them, and leave the loop's view of the VIPs, its
// decisions, what it holds and what it publishes as a whole new state
// decided from scratch would.
func TestLoadBalancerChangesRecomputeTheirVIPsOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	const n = 10000
	m, tick := scaleManager(t, n)
	st := &m.loop
	lbObj := func(name string, a netip.Addr) *pb.Object {
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Tenant: "t", Name: name,
			Vip: &pb.VIPRequest{Pool: "bulk"}, Status: &pb.LoadBalancerStatus{Address: a.String()}}}}
	}
	addr := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{198, 18 + byte((i+1)>>16), byte((i + 1) >> 8), byte(i + 1)})
	}
	// What the state holds: lb-i at addr(i).
	stored := map[string]*pb.Object{}
	for i := range n {
		stored[fmt.Sprintf("lb-%d", i)] = lbObj(fmt.Sprintf("lb-%d", i), addr(i))
	}
	write := func(rev uint64, name string, next *pb.Object, why string) {
		t.Helper()
		prev := stored[name]
		if next == nil {
			delete(stored, name)
		} else {
			stored[name] = next
		}
		changes := func(yield func(*pb.Object, *pb.Object) bool) { yield(prev, next) }
		if !m.UpdateLoadBalancers(changes, rev) {
			t.Fatalf("revision %d: UpdateLoadBalancers refused a change of a load balancer", rev)
		}
		ready := map[string]string{}
		var gone []string
		if next != nil {
			ready["t/"+name] = why
		} else {
			gone = append(gone, "t/"+name)
		}
		m.setReadyFor(ready, gone)
	}
	check := func(what string, wantExamined int) {
		t.Helper()
		full, builds := st.ready.full, st.allBGPBuilds
		st.ready.examined, st.converges, st.decided = 0, 0, 0
		tick()
		if st.bgpProblem == "" || st.allBGPBuilds != builds {
			// This host announces none (no bgp: section), and its
			// heartbeats list every bgp VIP as not ready: that list holds
			// while no bgp VIP changes.
			t.Errorf("%s: bgp problem %q; the list of every bgp VIP built %d times, want 0", what, st.bgpProblem, st.allBGPBuilds-builds)
		}
		if st.ready.full != full || st.ready.examined > wantExamined {
			t.Errorf("%s: recomputed the readiness of every VIP %d times and looked at %d VIPs; want 0 and at most %d",
				what, st.ready.full-full, st.ready.examined, wantExamined)
		}
		if st.converges != 0 || st.decided > wantExamined {
			t.Errorf("%s: decided every VIP %d times and %d VIPs in all; want 0 and at most %d", what, st.converges, st.decided, wantExamined)
		}
		// Every VIP decided again from scratch gives the same.
		sameAsDecidedAgain(t, m, what, tick, func(r *record) string {
			return fmt.Sprint(r.held, r.reason, r.spec.LBs)
		}, func(p, w *pb.VIPHolding) bool {
			return p.Address == w.Address && p.State == w.State && p.Reason == w.Reason && slices.Equal(p.LoadBalancers, w.LoadBalancers)
		})
		// The same as a whole new state gives.
		var objs []*pb.Object
		objs = append(objs, &pb.Object{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: ModeARP}}})
		for _, o := range stored {
			objs = append(objs, o)
		}
		whole := desiredState(objs)
		sameVIP := func(a, b vipSpec) bool {
			return a.Addr == b.Addr && a.Mode == b.Mode && a.Pool == b.Pool && slices.Equal(a.LBs, b.LBs)
		}
		if !slices.EqualFunc(slices.Collect(st.want.VIPs.All()), slices.Collect(whole.VIPs.All()), sameVIP) {
			t.Fatalf("%s: the VIPs differ from those of the whole state (%d, want %d)", what, st.want.VIPs.Len(), whole.VIPs.Len())
		}
		var again readiness
		again.ready, again.have = st.ready.ready, st.ready.have
		again.recompute(st.want)
		if !maps.Equal(again.notReady, st.ready.notReady) || !slices.Equal(again.arpNotReady, st.ready.arpNotReady) ||
			!slices.Equal(again.bgpNotReady, st.ready.bgpNotReady) ||
			!maps.EqualFunc(again.vipsOf, st.ready.vipsOf, slices.Equal) {
			t.Errorf("%s: readiness kept up to date differs from a recomputation: not ready %v, want %v", what, st.ready.arpNotReady, again.arpNotReady)
		}
	}
	tick()

	write(2, "new", lbObj("new", addr(n+5)), "")
	check("a load balancer created", 1)
	if _, ok := st.records[addr(n+5)]; !ok {
		t.Errorf("no decision for the new VIP %s", addr(n+5))
	}
	write(3, "lb-40", nil, "")
	check("a load balancer deleted", 1)
	if _, ok := st.records[addr(40)]; ok {
		t.Errorf("the VIP %s of the deleted load balancer is still decided", addr(40))
	}
	write(4, "lb-41", lbObj("lb-41", addr(42)), "")
	check("a load balancer moved to the address of another", 2)
	write(5, "other", lbObj("other", addr(n+9)), "no member is healthy")
	check("a load balancer created not ready", 1)
	if st.ready.notReady[addr(n+9)] == "" {
		t.Errorf("the new VIP %s is ready; its only load balancer is not", addr(n+9))
	}
}

// TestViewChangesDecideTheVIPsThatReadIt: on a host with arp, bgp and
// static VIPs, a peer that goes quiet and comes back (what a loaded
// machine does to heartbeats) decides the arp VIPs again, and neither the
// static VIPs nor the bgp ones, whose decisions do not read the view;
// what the host then holds, hands the actuator and publishes is what
// deciding every VIP again gives.
func TestViewChangesDecideTheVIPsThatReadIt(t *testing.T) {
	const nARP, nStatic, nBGP = 200, 3000, 1000
	m, sink := loopTestManager(t)
	st := &m.loop
	objs := []*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "l2", Cidrs: []string{"198.18.0.0/16"}, Mode: ModeARP}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "fixed", Cidrs: []string{"198.19.0.0/17"}, Mode: ModeStatic}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "routed", Cidrs: []string{"198.19.128.0/17"}, Mode: ModeBGP}}},
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String()}}})
	}
	ready := map[string]string{}
	add := func(pool string, base netip.Addr, n int) {
		a := base
		for i := range n {
			a = a.Next()
			lb := &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("%s-%d", pool, i), Vip: &pb.VIPRequest{Pool: pool},
				Status: &pb.LoadBalancerStatus{Address: a.String()}}
			objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
			ready["t/"+lb.Name] = ""
		}
	}
	add("l2", netip.MustParseAddr("198.18.0.0"), nARP)
	add("fixed", netip.MustParseAddr("198.19.0.0"), nStatic)
	add("routed", netip.MustParseAddr("198.19.128.0"), nBGP)
	m.Update(objs, 1)
	m.setReady(ready)

	now := time.Now()
	seq := map[string]uint64{}
	quiet := map[string]bool{}
	notReady := map[string][]netip.Addr{}
	tick := func() {
		now = now.Add(m.cfg.HeartbeatInterval)
		for _, id := range []string{"n2", "n3"} {
			if quiet[id] {
				continue
			}
			var sights []sighting
			for _, o := range []string{"n1", other(id)} {
				if !quiet[o] {
					sights = append(sights, sighting{ID: o, Eligible: true, Settled: true})
				}
			}
			seq[id]++
			m.receive(received{at: now, hb: &heartbeat{ID: id, Incarnation: 1, Seq: seq[id], Eligible: true, Holdings: true, Sightings: sights,
				NotReady: notReady[id]}})
		}
		m.evaluate(now, false)
		m.planBeats(now)
	}
	for now0 := now; now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		tick()
	}
	if len(st.heldARP) == 0 || len(st.heldARP) == nARP {
		t.Fatalf("holds %d of %d arp VIPs; want the share this host ranks first for", len(st.heldARP), nARP)
	}

	// Ticks decide again no more VIPs than the arp ones, for each
	// evaluation whose view changed, and never every VIP.
	run := func(what string, ticks int) {
		t.Helper()
		st.converges, st.decided = 0, 0
		sig := st.sigARP
		changed := 0
		for range ticks {
			tick()
			if st.sigARP != sig {
				changed++
				sig = st.sigARP
			}
		}
		if changed == 0 {
			t.Fatalf("%s: the view did not change", what)
		}
		if st.converges != 0 || st.decided > changed*nARP {
			t.Errorf("%s: %d whole decisions and %d VIPs decided over %d view changes; want 0 and at most %d (the arp VIPs, each time)",
				what, st.converges, st.decided, changed, changed*nARP)
		}
		// An arp VIP's reason tells how it came to be held ("took over"
		// the first time, "holds it" after): deciding it twice words it
		// anew.
		sameAsDecidedAgain(t, m, what, func() { m.evaluate(now, false) }, func(r *record) string {
			if r.spec.Mode == ModeARP {
				return fmt.Sprint(r.held)
			}
			return fmt.Sprint(r.held, r.reason)
		}, func(p, w *pb.VIPHolding) bool { return p.Address == w.Address && p.State == w.State })
	}
	quiet["n3"] = true
	run("n3 goes quiet", int(3*m.dead/m.cfg.HeartbeatInterval))
	for a, r := range st.records {
		if r.spec.Mode == ModeARP && !r.held && r.reason == "n3 ranks first" {
			t.Fatalf("%s: still left to n3, which is dead", a)
		}
	}
	quiet["n3"] = false
	run("n3 comes back", int(2*rebalanceMultiple*m.settle/m.cfg.HeartbeatInterval))

	// A peer's heartbeats that list bgp VIPs as not ready, and then no
	// more, decide no VIP again: no decision reads them (the serving
	// watch does).
	var bgp []netip.Addr
	for vs := range st.want.VIPs.All() {
		if vs.Mode == ModeBGP && len(bgp) < nBGP/2 {
			bgp = append(bgp, vs.Addr)
		}
	}
	for _, list := range [][]netip.Addr{bgp, bgp[:10], nil} {
		st.converges, st.decided = 0, 0
		sig := st.sigARP
		notReady["n2"] = list
		tick()
		if p := st.peers["n2"]; len(p.NotReady) != len(list) {
			t.Fatalf("n2 read not ready for %d VIPs, want %d", len(p.NotReady), len(list))
		}
		if st.sigARP != sig || st.converges != 0 || st.decided != 0 {
			t.Errorf("n2 not ready for %d bgp VIPs: arp signature changed %t, %d whole decisions and %d VIPs decided; want none",
				len(list), st.sigARP != sig, st.converges, st.decided)
		}
	}
	// One arp VIP among them decides the arp VIPs again.
	st.decided = 0
	notReady["n2"] = []netip.Addr{netip.MustParseAddr("198.18.0.1")}
	tick()
	if st.decided == 0 {
		t.Errorf("n2 not ready for an arp VIP decided no VIP again")
	}
}

// sameAsDecidedAgain checks that deciding every VIP again (pokeAll, then
// step, one evaluation) leaves each VIP's outcome, what the loop holds,
// what it hands the actuator and what it publishes (as samePub compares
// them) as they were.
func sameAsDecidedAgain(t *testing.T, m *Manager, what string, step func(), outcome func(*record) string, samePub func(p, w *pb.VIPHolding) bool) {
	t.Helper()
	st := &m.loop
	outcomes := func() map[netip.Addr]string {
		out := map[netip.Addr]string{}
		for a, r := range st.records {
			out[a] = outcome(r)
		}
		return out
	}
	partial, holding := outcomes(), maps.Clone(st.holding)
	published := slices.Clone(m.pub.vips)
	m.act.mu.Lock()
	acting := maps.Clone(m.act.want)
	m.act.mu.Unlock()
	st.converges = 0
	m.pokeAll()
	step()
	if st.converges != 1 {
		t.Fatalf("%s: pokeAll did not decide every VIP", what)
	}
	if again := outcomes(); !maps.Equal(again, partial) {
		t.Errorf("%s: %d VIPs decided, %d after deciding every VIP again", what, len(partial), len(again))
		for a, o := range again {
			if partial[a] != o {
				t.Errorf("%s: %s decided %s, from scratch %s", what, a, partial[a], o)
			}
		}
	}
	if !maps.Equal(holding, st.holding) {
		t.Errorf("%s: holds %d arp VIPs, %d when every VIP is decided again", what, len(holding), len(st.holding))
	}
	m.act.mu.Lock()
	if !maps.EqualFunc(acting, m.act.want, func(a, b target) bool {
		return a.mode == b.mode && a.iface == b.iface && a.announce == b.announce && a.route.key() == b.route.key()
	}) {
		t.Errorf("%s: the actuator was given %d VIPs to hold, %d when every VIP is decided again", what, len(acting), len(m.act.want))
	}
	m.act.mu.Unlock()
	if !slices.EqualFunc(published, m.pub.vips, samePub) {
		t.Errorf("%s: publishes %d VIPs, not what deciding every VIP again does (%d)", what, len(published), len(m.pub.vips))
	}
}

// TestPeersHearBeforeVIPsGo: a host that stops being eligible (it stops,
// and its handover ended at once) tells its peers in the evaluation that
// lets its arp VIPs go, even when a heartbeat went out a moment before
// (the handover starting): otherwise the peers learn only from the next
// one, and the VIPs go unheld meanwhile.
func TestPeersHearBeforeVIPsGo(t *testing.T) {
	m, sink := loopTestManager(t)
	st := &m.loop
	objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "l2", Cidrs: []string{"198.18.0.0/16"}, Mode: ModeARP}}}}
	for _, id := range []string{"n1", "n2", "n3"} {
		objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String()}}})
	}
	ready := map[string]string{}
	a := netip.MustParseAddr("198.18.0.0")
	for i := range 30 {
		a = a.Next()
		objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i),
			Vip: &pb.VIPRequest{Pool: "l2"}, Status: &pb.LoadBalancerStatus{Address: a.String()}}}})
		ready[fmt.Sprintf("t/lb-%d", i)] = ""
	}
	m.Update(objs, 1)
	m.setReady(ready)
	now := time.Now()
	seq := map[string]uint64{}
	tick := func() {
		now = now.Add(m.cfg.HeartbeatInterval)
		for _, id := range []string{"n2", "n3"} {
			seq[id]++
			m.receive(received{at: now, hb: &heartbeat{ID: id, Incarnation: 1, Seq: seq[id], Eligible: true, Holdings: true,
				Sightings: []sighting{{ID: "n1", Eligible: true, Settled: true}, {ID: other(id), Eligible: true, Settled: true}}}})
		}
		m.evaluate(now, false)
		m.planBeats(now)
	}
	for now0 := now; now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		tick()
	}
	if len(st.holding) == 0 || !st.eligible {
		t.Fatalf("holds %d arp VIPs, eligible %t; want some, and eligible", len(st.holding), st.eligible)
	}
	// What was sent so far is not what this test reads.
	buf := make([]byte, 64<<10)
	drain := func() []*heartbeat {
		var out []*heartbeat
		for {
			_ = sink.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, _, err := sink.ReadFrom(buf)
			if err != nil {
				return out
			}
			if hb, err := parseHeartbeat(buf[:n], m.key); err == nil {
				out = append(out, hb)
			}
		}
	}
	drain()

	// A heartbeat went out a moment ago; then the host stops, with no
	// clients to hand over.
	now = now.Add(time.Millisecond)
	m.trigger(now)
	drain()
	m.stopping = true
	now = now.Add(time.Millisecond)
	m.evaluate(now, false)
	if len(st.holding) != 0 {
		t.Fatalf("stopping: still holds %d arp VIPs", len(st.holding))
	}
	told := false
	for _, hb := range drain() {
		if hb.ID == "n1" && !hb.Eligible {
			told = true
		}
	}
	if !told {
		t.Errorf("let its arp VIPs go without a heartbeat saying it is no longer eligible")
	}
}
