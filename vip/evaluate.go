package vip

import (
	"fmt"
	"net/netip"
	"time"
)

// inputs are what the loop takes from the Manager's inputs (under m.mu)
// at the start of an evaluation.
type inputs struct {
	want     *desired
	revision uint64
	// delta holds the addresses changed since the state the loop holds,
	// when want is new.
	delta     map[netip.Addr]bool
	stopping  bool
	haveKey   bool
	contactOf func() time.Time
}

// evaluate recomputes the view and the decisions and converges to them:
// every VIP's when all is set, an input that changes every decision came
// (pokeAll) or the view's signature changed, else those of the VIPs a
// change touched. It returns when to evaluate again if nothing else
// happens. It only orchestrates: the rules are computeView, eligible and
// decide (decide.go, eligible.go), all pure.
func (m *Manager) evaluate(now time.Time, all bool) time.Time {
	st := &m.loop
	in := m.takeInputs()
	if m.decideAllAsked.Swap(false) || all {
		st.decideAll = true
	}
	m.catchUp(now, in)
	contact := now
	if in.contactOf != nil {
		contact = in.contactOf()
	}
	wake := m.noteSync(now, contact, in.revision)
	v := m.view(now)
	m.noteLiveness(now, v)
	reannounce := m.takeReannounce()
	st.revision = in.revision

	drained := st.want != nil && st.want.Draining[m.cfg.NodeID]
	handingOver := m.handoverStep(now, drained || in.stopping)
	if v.Quorum && st.want != nil && st.quorum == "none" {
		st.rejoined = now
	}
	el := eligible(m.standing(now, v, in, contact, drained, handingOver))
	wake = earliest(wake, el.Wake)
	st.bgpProblem = el.BGP.Problem
	// A change of the standing sends heartbeats at once, and planning
	// them notes what they tell the peers of this host's lists (not
	// ready for any address, the held or the partly ready list left
	// out): selves reads that after, so that these decisions count on
	// what the peers act on.
	m.noteEligibility(now, el)
	me, arpMe, bgpMe := m.selves(now, el)
	m.noteQuorum(v)
	m.decideChanged(now, v, me, arpMe, bgpMe, reannounce)
	m.publish(v)
	return earliest(v.Next, wake)
}

// takeInputs takes what changed in the Manager's inputs. The addresses
// changed since the state the loop holds are taken with the state
// itself: an Update or UpdateLoadBalancers that lands while the loop
// adopts it starts a delta of its own, relative to want.
func (m *Manager) takeInputs() inputs {
	st := &m.loop
	m.mu.Lock()
	defer m.mu.Unlock()
	in := inputs{want: m.want, revision: m.revision, stopping: m.stopping, haveKey: len(m.key) > 0, contactOf: m.contact}
	if in.want != st.want {
		in.delta, m.wantDelta = m.wantDelta, nil
	}
	if m.linkChanged {
		m.linkChanged, st.linkDirty = false, true
	}
	return in
}

// catchUp brings the loop's state up to the inputs: a new committed
// state, the data plane's readiness, the links.
func (m *Manager) catchUp(now time.Time, in inputs) {
	st := &m.loop
	if in.want != st.want && in.want != nil {
		m.adopt(in.want, now, in.delta)
	}
	if st.afterAdopt != nil {
		st.afterAdopt()
	}
	if in.want != st.poolIfsFor || st.linkDirty {
		// Before the readiness: a pool whose interface is missing or
		// down is not ready here.
		st.poolIfsFor = st.want
		m.checkPoolIfaces()
	}
	m.takeReadiness(in.delta)
	if st.linkDirty {
		st.linkDirty = false
		m.checkLinks()
	}
}

// view computes this host's view of the cluster; a member seen a moment
// ago and never heard does not count yet (joinGrace).
func (m *Manager) view(now time.Time) view {
	st := &m.loop
	var counted []string
	for id := range st.members {
		p := st.peers[id]
		if t, ok := st.seenAt[id]; ok && now.Sub(t) < joinGrace && (p == nil || p.Heard.IsZero()) {
			continue
		}
		counted = append(counted, id)
	}
	return computeView(viewInput{
		Self: m.cfg.NodeID, Counted: counted, Now: now,
		Dead: m.dead, Quorum: m.quorum, Settle: m.settle, Interval: m.cfg.HeartbeatInterval, HoldDown: m.holdDown,
		Peers: st.peers,
	})
}

// takeReannounce reports whether the held VIPs are to be announced
// again (a link came back), counting one more take for each.
func (m *Manager) takeReannounce() bool {
	st := &m.loop
	if !st.reannounce {
		return false
	}
	st.reannounce = false
	for _, r := range st.records {
		if r.held {
			r.takes++
		}
	}
	return true
}

// standing gathers what eligible reads.
func (m *Manager) standing(now time.Time, v view, in inputs, contact time.Time, drained, handingOver bool) standing {
	st := &m.loop
	s := standing{
		ID: m.cfg.NodeID, Now: now, Dead: m.dead, View: v,
		Leaving: st.leaving, Stopping: in.stopping, HandingOver: handingOver,
		HaveState: st.want != nil, Synced: !st.sync.synced.IsZero(), Drained: drained, Reported: st.ready.have,
		HaveKey: in.haveKey, Peers: len(st.members) > 0,
		Rejoined: st.rejoined, HandedOver: st.handover.doneAt,
		HasARP: m.arp != nil, ARPUp: st.arpUp, ARPInterface: m.cfg.Interface,
		HasBGP: m.bgpIf != nil, BGPUp: st.bgpUp, Speaker: m.spk != nil,
		Contact: contact, StateMaxAge: m.cfg.StateMaxAge,
	}
	if m.bgpIf != nil {
		s.BGPInterface = m.bgpIf.name
	}
	return s
}

// selves completes the standing eligible decided with what the loop
// keeps: the readiness per VIP (shared with the loop's readiness:
// decisions only read it), the arp VIPs held and the rebalance windows
// open, marking for a decision the VIPs whose window opened or closed.
func (m *Manager) selves(now time.Time, el eligibility) (me, arpMe, bgpMe self) {
	st := &m.loop
	notReady := st.ready.notReady
	if notReady == nil {
		notReady = map[netip.Addr]string{}
	}
	me, arpMe, bgpMe = el.Any, el.ARP, el.BGP
	me.NotReady, arpMe.NotReady, bgpMe.NotReady = notReady, notReady, notReady
	me.Partly, arpMe.Partly, bgpMe.Partly = st.ready.unserved, st.ready.unserved, st.ready.unserved
	arpMe.PartlyUnsent, arpMe.NotReadyAll, arpMe.HoldingUnsent = st.partlyUnsent, st.notReadyAllSent, st.holdingUnsent
	arpMe.Rebalance = map[netip.Addr]bool{}
	if el.Rebalancing {
		// The window of each VIP opens when this host could first hold it
		// (a majority, and its data plane ready for it).
		arpMe.Rebalance = m.rebalanceWindows(now)
	} else {
		// What became ready meanwhile is looked at when it can be held.
		st.rebalancePass = 0
	}
	// A window that opens or closes changes its VIP's decision alone.
	for a := range arpMe.Rebalance {
		if !st.rebalance[a] {
			st.pending[a] = true
		}
	}
	for a := range st.rebalance {
		if !arpMe.Rebalance[a] {
			st.pending[a] = true
		}
	}
	st.rebalance = arpMe.Rebalance
	// The decisions of VIPs whose window is open weigh the number of VIPs
	// this host holds (overloaded).
	if len(st.holding) != st.rebalanceHeld {
		st.rebalanceHeld = len(st.holding)
		for a := range arpMe.Rebalance {
			st.pending[a] = true
		}
	}
	// Shared with the loop: decisions only read it, and it is replaced,
	// not changed, when a holding changes.
	arpMe.Holding = st.holding
	return me, arpMe, bgpMe
}

// noteEligibility tells the peers at once when this host's arp standing
// changes (eligible, handing over, handed off).
func (m *Manager) noteEligibility(now time.Time, el eligibility) {
	st := &m.loop
	handedOff := st.handover.done && !el.Eligible
	if el.Eligible == st.eligible && el.ARP.Handover == st.handingOver && handedOff == st.handedOff {
		return
	}
	lost := st.eligible && !el.Eligible
	st.eligible, st.handingOver, st.handedOff = el.Eligible, el.ARP.Handover, handedOff
	if lost {
		// Its arp VIPs go below, in this evaluation: the peers hear
		// first, even when a heartbeat went out a moment ago (a
		// handover that ended at once), or they would take them only
		// from the next one.
		st.lastTrigger = now
		m.sendHeartbeats(now)
	} else {
		m.trigger(now)
	}
}

// noteQuorum logs a change of this host's standing towards the majority.
func (m *Manager) noteQuorum(v view) {
	st := &m.loop
	q := quorumState(v)
	if q == st.quorum || st.want == nil {
		return
	}
	st.quorum = q
	switch q {
	case "majority":
		m.log.Info("sees a majority of the cluster", "sees", v.Mutual, "needs", v.Need)
	case "hold-down":
		m.log.Warn("lost sight of the majority of the cluster a moment ago; keeps its arp VIPs for the hold-down, takes none",
			"sees", v.Mutual, "needs", v.Need, "until", v.Until.Format(time.RFC3339Nano))
	case "keep":
		m.log.Warn("no majority in two-way contact, but the others cannot make one without this host; keeps its arp VIPs, takes none",
			"sees", v.Mutual, "needs", v.Need, "until", v.Until.Format(time.RFC3339Nano))
	default:
		m.log.Warn("lost sight of the majority of the cluster; releasing arp VIPs", "sees", v.Mutual, "needs", v.Need)
	}
}

// decideChanged decides every VIP again when asked to (decideAll), else
// those of the modes whose signature changed and those a change touched
// (pending), and converges to the decisions. A change of the view or of
// this host's problems decides again the VIPs of the modes that read it:
// a peer that goes quiet on a loaded machine costs the arp VIPs, not
// every VIP.
func (m *Manager) decideChanged(now time.Time, v view, me, arpMe, bgpMe self, reannounce bool) {
	st := &m.loop
	sessions := 0
	if m.spk != nil {
		sessions = m.spk.established()
	}
	st.sessions = sessions
	sigARP := signature(v, st.peers, arpMe.Problem, fmt.Sprint(arpMe.KeepOnly, arpMe.HoldDown, arpMe.Rejoining, arpMe.HandOff, arpMe.NotReadyAll, arpMe.HoldingUnsent))
	sigBGP := fmt.Sprint(bgpMe.Problem, "|", sessions)
	switch {
	case st.want == nil:
	case st.decideAll:
		m.converge(now, v, arpMe, bgpMe, me)
	default:
		if reannounce || sigARP != st.sigARP {
			st.want.pendMode(st.pending, ModeARP)
		}
		if sigBGP != st.sigBGP {
			st.want.pendMode(st.pending, ModeBGP)
		}
		if len(st.pending) > 0 {
			m.convergeSome(now, v, arpMe, bgpMe, me)
		}
	}
	st.sigARP, st.sigBGP = sigARP, sigBGP
}

// earliest returns the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
