package vip

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// fakeDataPlane records what the loop asks of the data plane during a
// handover; pending is what HandoverPending answers, busy what
// CloseConnections without force answers (HTTP requests in progress);
// closed counts the calls with force.
type fakeDataPlane struct {
	mu      sync.Mutex
	on      []bool
	vips    []netip.Addr
	pending int
	busy    int
	gentle  int // calls without force
	closed  int
}

func (f *fakeDataPlane) HandOver(vips []netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = append(f.on, true)
	f.vips = vips
}

func (f *fakeDataPlane) EndHandover() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = append(f.on, false)
}

func (f *fakeDataPlane) HandoverPending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending
}

func (f *fakeDataPlane) CloseConnections(force bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = 0
	if !force {
		f.gentle++
		return f.busy
	}
	f.closed++
	f.busy = 0
	return 0
}

func (f *fakeDataPlane) state() ([]bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.on...), f.closed
}

// loopHarness runs n1's loop of a three-host cluster by hand with n arp
// VIPs: tick advances the clock one interval with heartbeats from n2 and
// n3 that see everyone, then runs the loop's heartbeat tick (beatTick).
type loopHarness struct {
	m     *Manager
	now   time.Time
	seq   map[string]uint64
	objs  func(drained bool) []*pb.Object
	ticks int
}

func newLoopHarness(t *testing.T, n int, dp Handover, timeout time.Duration) *loopHarness {
	t.Helper()
	m, sink := loopTestManager(t)
	m.cfg.Handover, m.cfg.HandoverTimeout = dp, timeout
	ready := map[string]string{}
	m.cfg.HandoverCloseGrace = DefaultHandoverCloseGrace
	h := &loopHarness{m: m, now: time.Now(), seq: map[string]uint64{}}
	h.objs = func(drained bool) []*pb.Object {
		objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "l2", Cidrs: []string{"198.18.0.0/24"}, Mode: ModeARP}}}}
		for _, id := range []string{"n1", "n2", "n3"} {
			objs = append(objs, &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: id, HeartbeatAddr: sink.LocalAddr().String(),
				Draining: drained && id == "n1"}}})
		}
		for i := range n {
			lb := &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i), Vip: &pb.VIPRequest{Pool: "l2"},
				Status: &pb.LoadBalancerStatus{Address: netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}).String()}}
			objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
			ready["t/"+lb.Name] = ""
		}
		return objs
	}
	h.update(false)
	m.setReady(ready)
	for now0 := h.now; h.now.Sub(now0) < 2*rebalanceMultiple*m.settle; {
		h.tick()
	}
	if len(m.loop.heldARP) == 0 {
		t.Fatalf("n1 holds none of %d VIPs", n)
	}
	return h
}

func (h *loopHarness) update(drained bool) {
	h.m.Update(h.objs(drained), h.m.loop.revision+1)
}

func (h *loopHarness) tick() {
	h.now = h.now.Add(h.m.cfg.HeartbeatInterval)
	for _, id := range []string{"n2", "n3"} {
		h.seq[id]++
		h.m.receive(received{at: h.now, hb: &heartbeat{ID: id, Incarnation: 1, Seq: h.seq[id], Eligible: true, Holdings: true,
			Sightings: []sighting{{ID: "n1", Eligible: true, Settled: true}, {ID: other(id), Eligible: true, Settled: true}}}})
	}
	h.m.beatTick(h.now)
	h.ticks++
}

// TestDrainedHolderKeepsItsVIPsWhileClientsAreHandedOver: a drained host
// that holds arp VIPs keeps them (its heartbeats say it is eligible, hands
// its clients over and list them, so its peers leave them and give it no
// other) and asks the data plane to hand
// its clients over; once the connections open at the drain have ended it
// closes what is left and lets every VIP go, and it never takes one
// meanwhile. Undrained, it tells the data plane to keep connections open
// again.
func TestDrainedHolderKeepsItsVIPsWhileClientsAreHandedOver(t *testing.T) {
	dp := &fakeDataPlane{pending: 3}
	h := newLoopHarness(t, 30, dp, time.Minute)
	st := &h.m.loop
	held := len(st.heldARP)
	h.update(true)
	for range 50 {
		h.tick()
		if len(st.heldARP) != held {
			t.Fatalf("holds %d VIPs during the handover, held %d", len(st.heldARP), held)
		}
		plan := h.m.beats.plan.Load()
		if !plan.hb.Eligible || !plan.hb.Handover || len(plan.hb.Holding) != held {
			t.Fatalf("heartbeat during the handover: eligible %v, handing over %v, holding %d; want true, true, %d",
				plan.hb.Eligible, plan.hb.Handover, len(plan.hb.Holding), held)
		}
	}
	for a, r := range st.records {
		if r.held && r.reason != "keeps it while its clients are handed over (drained or stopping)" {
			t.Fatalf("%s: reason %q", a, r.reason)
		}
	}
	if on, closed := dp.state(); len(on) != 1 || !on[0] || closed != 0 {
		t.Fatalf("data plane asked %v, closed %d times; want [true], 0", on, closed)
	}
	dp.mu.Lock()
	handed := dp.vips
	dp.mu.Unlock()
	if !slices.Equal(handed, st.heldARP) {
		t.Fatalf("handed over %v, holds %v", handed, st.heldARP)
	}
	// The last connection open at the drain ends.
	dp.mu.Lock()
	dp.pending = 0
	dp.mu.Unlock()
	h.tick()
	// Not eligible, and handed over: its peers say why they take its VIPs.
	if plan := h.m.beats.plan.Load(); plan.hb.Eligible || !plan.hb.Handover {
		t.Fatalf("heartbeat after the handover: eligible %v, handing over %v; want false, true", plan.hb.Eligible, plan.hb.Handover)
	}
	// The peers here never say they took the VIPs: each stays until the
	// hand-off's bound, then goes.
	ended := h.now
	for len(st.heldARP) > 0 && h.now.Sub(ended) < time.Second {
		for a, r := range st.records {
			if r.held && !strings.HasPrefix(r.reason, "hands it to ") {
				t.Fatalf("%s kept after the handover: reason %q", a, r.reason)
			}
		}
		h.tick()
	}
	if took, most := h.now.Sub(ended), handOffMultiple*h.m.dead+2*h.m.cfg.HeartbeatInterval; took > most {
		t.Fatalf("let its VIPs go %s after the handover, want within %s", took, most)
	}
	if plan := h.m.beats.plan.Load(); plan.hb.Eligible || len(plan.hb.Holding) != 0 {
		t.Fatalf("heartbeat after the hand-off: eligible %v, holding %d", plan.hb.Eligible, len(plan.hb.Holding))
	}
	if _, closed := dp.state(); closed != 1 {
		t.Fatalf("CloseConnections called %d times, want 1", closed)
	}
	for range 10 {
		h.tick()
	}
	if _, closed := dp.state(); closed != 1 {
		t.Fatalf("CloseConnections called %d times after the handover, want 1", closed)
	}
	h.update(false)
	h.tick()
	if on, _ := dp.state(); len(on) != 2 || on[1] {
		t.Fatalf("undrained: data plane asked %v; want [true false]", on)
	}
}

// TestHandoverEndsAtItsTimeout: connections that never end (WebSockets,
// watches) hold the VIPs for the handover timeout, not longer; a stop
// hands over the same way.
func TestHandoverEndsAtItsTimeout(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop=%v", stop), func(t *testing.T) {
			dp := &fakeDataPlane{pending: 2}
			const timeout = time.Second
			h := newLoopHarness(t, 10, dp, timeout)
			st := &h.m.loop
			if stop {
				h.m.mu.Lock()
				h.m.stopping = true
				h.m.mu.Unlock()
			} else {
				h.update(true)
			}
			start := h.now
			for len(st.heldARP) > 0 && h.now.Sub(start) < 2*timeout {
				h.tick()
			}
			took := h.now.Sub(start)
			most := timeout + 2*h.m.cfg.HeartbeatInterval
			if !stop {
				most += handOffMultiple * h.m.dead // drained: kept for the next holder
			}
			if took < timeout || took > most {
				t.Fatalf("let its VIPs go %s after the handover began, want at the %s timeout", took, timeout)
			}
			if _, closed := dp.state(); closed != 1 {
				t.Fatalf("CloseConnections called %d times, want 1", closed)
			}
			if !h.m.handedOver.Load() {
				t.Fatal("handedOver not set")
			}
		})
	}
}

// TestHandoverLetsRequestsInProgressFinish: when the connections open at
// the drain have ended, the host keeps its VIPs while HTTP requests are
// still in progress on the connections left (closing the idle ones), and
// lets them go as soon as none is, or at the close grace at the latest,
// closing what is left then.
func TestHandoverLetsRequestsInProgressFinish(t *testing.T) {
	for _, finish := range []bool{true, false} {
		t.Run(fmt.Sprintf("finish=%v", finish), func(t *testing.T) {
			dp := &fakeDataPlane{pending: 1, busy: 2}
			h := newLoopHarness(t, 10, dp, time.Minute)
			st := &h.m.loop
			held := len(st.heldARP)
			h.update(true)
			h.tick()
			dp.mu.Lock()
			dp.pending = 0 // the connections open at the drain ended
			dp.mu.Unlock()
			h.tick()
			closing := h.now
			// Requests in progress: the VIPs stay, the heartbeats say so.
			for h.now.Sub(closing) < h.m.cfg.HandoverCloseGrace/2 {
				h.tick()
				if len(st.heldARP) != held || !h.m.beats.plan.Load().hb.Eligible {
					t.Fatalf("%s after the connections began to close: holds %d of %d VIPs, eligible %v",
						h.now.Sub(closing), len(st.heldARP), held, h.m.beats.plan.Load().hb.Eligible)
				}
			}
			dp.mu.Lock()
			if dp.gentle < 2 || dp.closed != 0 {
				t.Fatalf("CloseConnections: %d calls without force, %d with; want them repeated, none forced", dp.gentle, dp.closed)
			}
			if finish {
				dp.busy = 0 // the last response went out
			}
			dp.mu.Unlock()
			h.tick()
			done := h.now
			for !h.m.handedOver.Load() && h.now.Sub(closing) < 2*h.m.cfg.HandoverCloseGrace {
				h.tick()
			}
			took := h.now.Sub(closing)
			switch {
			case finish && h.now != done:
				t.Fatalf("handed over %s after the last request ended, want at once", h.now.Sub(done))
			case !finish && (took < h.m.cfg.HandoverCloseGrace || took > h.m.cfg.HandoverCloseGrace+2*h.m.cfg.HeartbeatInterval):
				t.Fatalf("handed over %s after the connections began to close, want at the %s grace", took, h.m.cfg.HandoverCloseGrace)
			}
			if plan := h.m.beats.plan.Load(); plan.hb.Eligible {
				t.Fatal("heartbeat after the handover: still eligible")
			}
			if _, closed := dp.state(); closed != 1 {
				t.Fatalf("CloseConnections with force called %d times, want 1", closed)
			}
		})
	}
}

// TestHandoverClosesOncePerTick: while the connections left close, a
// heartbeat tick that decides again at once (its heartbeat changes what
// the peers read of this host's lists: here its not-ready list grows past
// what fits, then fits again) asks the data plane to close them once, not
// once per decision: each call goes over every connection of the VIPs.
func TestHandoverClosesOncePerTick(t *testing.T) {
	dp := &fakeDataPlane{pending: 1, busy: 2}
	h := newLoopHarness(t, 10, dp, time.Minute)
	st := &h.m.loop
	h.update(true)
	h.tick()
	dp.mu.Lock()
	dp.pending = 0 // the connections open at the drain ended
	dp.mu.Unlock()
	calls := func() int {
		dp.mu.Lock()
		defer dp.mu.Unlock()
		return dp.gentle
	}
	h.tick()
	if n := calls(); n != 1 {
		t.Fatalf("the tick the connections began to close: %d calls without force, want 1", n)
	}
	for i, notReady := range [][]netip.Addr{manyAddrs(410), nil} {
		before := calls()
		st.ready.arpNotReady = notReady
		h.tick()
		if st.notReadyAllSent != (notReady != nil) {
			t.Fatalf("tick %d: heartbeats say not ready for any: %v, want %v", i, st.notReadyAllSent, notReady != nil)
		}
		if n := calls() - before; n != 1 {
			t.Fatalf("tick %d, decided twice: %d calls without force, want 1", i, n)
		}
	}
	if h.m.handedOver.Load() {
		t.Fatal("handed over while requests are in progress")
	}
	dp.mu.Lock()
	dp.busy = 0 // the last response went out
	dp.mu.Unlock()
	before := calls()
	h.tick()
	if n := calls() - before; n != 1 || !h.m.handedOver.Load() {
		t.Fatalf("the tick the last request ended: %d calls without force, handed over %v; want 1, true", n, h.m.handedOver.Load())
	}
	if _, closed := dp.state(); closed != 1 {
		t.Fatalf("CloseConnections with force called %d times, want 1", closed)
	}
}

// TestHostHoldingNothingHandsNothingOver: a drained host that holds no
// arp VIP does not ask the data plane for anything.
func TestHostHoldingNothingHandsNothingOver(t *testing.T) {
	dp := &fakeDataPlane{pending: 5}
	h := newLoopHarness(t, 10, dp, time.Minute)
	h.m.loop.holding = map[netip.Addr]bool{}
	h.m.loop.handover = handoverState{}
	h.m.handoverStep(h.now, true)
	if on, closed := dp.state(); len(on) != 0 || closed != 0 || !h.m.handedOver.Load() {
		t.Fatalf("data plane asked %v, closed %d, handed over %v; want nothing and true", on, closed, h.m.handedOver.Load())
	}
}

// TestStopBeforeAnyStateHandsNothingOver: a host stopped before it had
// the committed state holds nothing and does not wait for a handover.
func TestStopBeforeAnyStateHandsNothingOver(t *testing.T) {
	dp := &fakeDataPlane{pending: 5}
	m := &Manager{
		cfg:  Config{NodeID: "n1", HeartbeatInterval: 20 * time.Millisecond, StateMaxAge: time.Hour, Handover: dp, HandoverTimeout: time.Minute},
		dead: 100 * time.Millisecond, log: slog.New(slog.DiscardHandler),
		kick: make(chan struct{}, 1), ready: map[string]string{},
	}
	m.arp = &iface{name: "vip-test"}
	m.quorum = m.dead - m.cfg.HeartbeatInterval
	m.settle = settleMultiple * m.dead
	m.gap = gapMultiple * m.dead
	m.act = newActuator(m)
	m.beats = newBeatSender(m)
	m.loop.init()
	m.loop.linkDirty = false
	arrivals := map[string]*peerArrival{}
	m.arrivals.Store(&arrivals)
	m.stopping = true
	m.evaluate(time.Now(), true)
	if !m.handedOver.Load() {
		t.Fatal("a host without state waits for a handover")
	}
	if on, closed := dp.state(); len(on) != 0 || closed != 0 {
		t.Fatalf("data plane asked %v, closed %d; want nothing", on, closed)
	}
}
