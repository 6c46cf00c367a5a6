package vip

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// joinGrace: a host that joins the cluster is not counted in the majority
// until it is first heard, for at most this long, so that a single host
// does not drop its VIPs while a second one starts up.
const joinGrace = 10 * time.Second

// settleMultiple: a peer back from the dead counts towards a majority
// after this many detection times (1s at the defaults). It is also about
// the longest silence of its last partner that a host holding VIPs
// rides out when the other hosts are dead (view.Keep).
const settleMultiple = 10

// gapMultiple: a peer settles again only after an absence of this many
// detection times (500ms at the defaults); a shorter one (a lost
// heartbeat, a stall) does not cost it its vote.
const gapMultiple = 5

// problemDrained is the problem of a host drained by the operator.
const problemDrained = "drained by the operator (cluster drain)"

// handOffMultiple: a drained host keeps each arp VIP it lets go until the
// next holder says it holds it, for at most this many detection times.
const handOffMultiple = 2

// rebalanceMultiple: a host that started takes back the arp VIPs it ranks
// first for during this many settling times (3s at the defaults) after it
// first sees a majority.
const rebalanceMultiple = 3

// loopState belongs to the goroutine in Run (and to Close after it).
type loopState struct {
	running, stopped bool // guarded by Manager.mu

	peers   map[string]*peerState
	lastSeq map[string][2]uint64 // incarnation, seq
	// topIncarnation is the highest ordered incarnation taken of each
	// peer (heartbeat.Ordered): one below it is of an earlier process.
	topIncarnation map[string]uint64
	// refusedIncarnations counts the heartbeats refused as of another
	// process of a peer than the one heard, or of an earlier one than the
	// latest taken (receive);
	// refusedIncarnationLog is when that was last logged, by peer.
	refusedIncarnations   uint64
	refusedIncarnationLog map[string]time.Time
	want                  *desired
	// afterAdopt, when set, runs between taking the inputs and taking the
	// readiness; tests land inputs there.
	afterAdopt func()
	members    map[string]member
	seenAt     map[string]time.Time // when a member first appeared in the state
	ranks      map[netip.Addr][]string
	prev       map[netip.Addr]string // holder computed last time (arp)
	records    map[netip.Addr]*record
	alive      map[string]bool
	quorum     string // quorumState of the last view
	// rejoined: when this host last regained its majority after it had
	// lost it and released its arp VIPs (see self.Rejoining).
	rejoined time.Time
	// rebalanceFrom: when this process could first hold each arp VIP;
	// rebalanceOpen: those of them whose window may still be open;
	// rebalancePass: the readiness recomputation (readiness.full) whose
	// VIPs were all looked at (0: look at them all next time).
	rebalanceFrom map[netip.Addr]time.Time
	rebalanceOpen map[netip.Addr]time.Time
	rebalancePass uint64
	// ready: the data plane's readiness and what it means for each VIP.
	ready readiness
	// What the last heartbeats told the peers (planBeats): partlyUnsent,
	// they left out the partly ready addresses; notReadyAllSent, they
	// said not ready for any address; holdingUnsent, they left out the
	// held addresses (a list that does not fit is left out).
	// beatScratch is where planBeats encodes one to find out.
	partlyUnsent, notReadyAllSent, holdingUnsent bool
	beatScratch                                  []byte
	// holding and heldARP (sorted, never changed once built): the arp
	// VIPs held here, rebuilt when a record's holding changes.
	holding map[netip.Addr]bool
	heldARP []netip.Addr
	// bgpProblem is why this host announces no bgp VIP at all (eligible's
	// bgp standing: its bgp interface down, its state too old, no bgp:
	// section), "" when it can; its heartbeats then list every bgp VIP of
	// the state as not ready (allBGP, built once a state), so that the
	// peers' serving watches do not count it for any.
	bgpProblem   string
	allBGP       []netip.Addr
	allBGPFor    *desired
	allBGPBuilds int
	// converges counts the passes that decide every VIP (converge): only
	// a change of the view's signature or of the whole state causes one.
	// decided counts single decisions, those passes' and the others'.
	converges uint64
	decided   int
	// decideAll: the next evaluation decides every VIP; else pending
	// holds those it decides again (convergeSome).
	decideAll bool
	pending   map[netip.Addr]bool
	// rebalance: the arp VIPs whose rebalance window was open at the last
	// evaluation; rebalanceHeld: the arp VIPs held here then.
	rebalance     map[netip.Addr]bool
	rebalanceHeld int
	// arpUp and bgpUp: the interfaces can carry traffic.
	arpUp, bgpUp bool
	linkDirty    bool
	// poolIfsFor: the state whose pools' interfaces were last checked.
	poolIfsFor  *desired
	eligible    bool
	handingOver bool // it keeps its arp VIPs while its clients are handed over
	// handedOff: drained or stopping, it has handed its clients over and
	// lets its arp VIPs go; its heartbeats say so (not eligible, handing
	// over), so that its peers give that as the reason they take them.
	handedOff bool
	leaving   bool
	revision  uint64
	sessions  int // established BGP sessions at the last evaluation
	// sigARP and sigBGP: what the decisions of arp and of bgp VIPs read
	// of the view and this host's state, at the last evaluation. Those of
	// static VIPs read this host's readiness for each alone.
	sigARP, sigBGP string
	actErrs        bool // the actuator reported errors at the last publish
	// dirtyAddrs: the VIPs whose records changed since the last publish;
	// pubVIPs: the VIPs published last, sorted by address.
	dirtyAddrs  map[netip.Addr]bool
	pubVIPs     []*pb.VIPHolding
	lastTrigger time.Time
	sync        syncState
	// handover: this host keeps its arp VIPs while its clients are
	// handed over (handoverStep).
	handover handoverState
	// reannounce: a peer hears this host again after taking it for dead;
	// the VIPs held here are announced again (record.takes).
	reannounce bool
	// nsLinks: the subscriptions to the links of the attachments'
	// namespaces, while Run runs.
	nsLinks nsLinks
}

func (st *loopState) init() {
	st.peers = map[string]*peerState{}
	st.lastSeq = map[string][2]uint64{}
	st.topIncarnation = map[string]uint64{}
	st.refusedIncarnationLog = map[string]time.Time{}
	st.members = map[string]member{}
	st.seenAt = map[string]time.Time{}
	st.ranks = map[netip.Addr][]string{}
	st.prev = map[netip.Addr]string{}
	st.records = map[netip.Addr]*record{}
	st.alive = map[string]bool{}
	st.rebalanceFrom = map[netip.Addr]time.Time{}
	st.rebalanceOpen = map[netip.Addr]time.Time{}
	st.holding = map[netip.Addr]bool{}
	st.pending = map[netip.Addr]bool{}
	st.dirtyAddrs = map[netip.Addr]bool{}
	st.arpUp, st.bgpUp, st.linkDirty = true, true, true
}

// record is the status of one VIP on this host.
type record struct {
	spec     vipSpec
	held     bool
	since    time.Time
	reason   string
	local    bool
	everHeld bool
	// unserved: the tenants sharing the address whose attachment is not
	// up here, with why (readiness.unserved): it is not carried for them.
	unserved map[string]string
	// tenantsSince holds, for each tenant of spec.Spaces, the revision of
	// the committed state from which the address has had that tenant here
	// (sinceFor): a peer whose heartbeats act on an earlier one may not
	// give it the tenant (servedFor).
	tenantsSince []uint64
	// takes counts this host's takes of the VIP, and also the times a
	// peer came back into sight while it held it: each is a moment when
	// another host may have announced the VIP last, so the actuator
	// announces it again even if the address never left (arp).
	takes uint64
}

// run is Run's loop: heartbeats and decisions. It never waits on the
// kernel or the BGP speaker: the actuator does that work.
func (m *Manager) run(ctx context.Context) error {
	st := &m.loop
	beat := time.NewTicker(m.cfg.HeartbeatInterval)
	defer beat.Stop()
	links := time.NewTicker(leaseRenew)
	defer links.Stop()
	eval := time.NewTimer(time.Hour)
	defer eval.Stop()
	arm := func(at time.Time) {
		d := time.Hour
		if !at.IsZero() {
			d = max(time.Until(at), 0)
		}
		eval.Reset(d)
	}
	st.sync.started = time.Now()
	arm(m.evaluate(time.Now(), true))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.stop:
			return nil
		case r := <-m.recv:
			m.receive(r)
		case <-m.kick:
		case <-beat.C:
			// The heartbeat thread sends; this plans what it says, after
			// deciding on what came in: a process that was paused must
			// not announce holdings or a majority it has lost meanwhile.
			m.drainReceived()
			arm(m.beatTick(time.Now()))
			continue
		case <-eval.C:
		case <-links.C:
			// A link that changed changes the view's signature.
			st.linkDirty = true
		}
		// Heartbeats that came in meanwhile count before anyone is
		// judged dead.
		m.drainReceived()
		arm(m.evaluate(time.Now(), false))
	}
}

// beatTick decides on what came in, then plans what this host's
// heartbeats say, and returns when to evaluate next. When the plan
// changes what the peers read of this host's lists (not ready for any
// address, the held or the partly ready list left out), it decides again
// at once with what they read, and plans again: the peers act on the
// heartbeat as it arrives, and a host that counted on the earlier one
// until its next evaluation would keep, meanwhile, an address a peer
// takes.
func (m *Manager) beatTick(now time.Time) time.Time {
	wake := m.evaluate(now, false)
	if m.planBeats(now) {
		wake = m.evaluate(now, false)
		m.planBeats(now)
	}
	return wake
}

// drainReceived takes in the heartbeats waiting in the channel, and
// those still waiting in the socket: after a pause of this process (a
// loaded machine, a long garbage collection) the reader may not have run
// yet, and a peer whose heartbeats all arrived on time (the kernel
// stamps them) must not be judged dead for it. It waits for the reader
// for at most one interval.
func (m *Manager) drainReceived() {
	deadline := time.Now().Add(m.cfg.HeartbeatInterval)
	for {
		m.drainChannel()
		if !m.socketPending() || time.Now().After(deadline) {
			m.drainChannel()
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// socketPending reports whether a datagram waits in the heartbeat socket.
func (m *Manager) socketPending() bool {
	rc, err := m.conn.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// drainChannel takes in the heartbeats waiting in the channel.
func (m *Manager) drainChannel() {
	for range cap(m.recv) {
		select {
		case r := <-m.recv:
			m.receive(r)
		default:
			return
		}
	}
}

// noteSync marks this host as synced (syncStep) and returns when to look
// again (zero: no need). revision is the state revision it has.
func (m *Manager) noteSync(now, contact time.Time, revision uint64) time.Time {
	st := &m.loop
	if !st.sync.synced.IsZero() {
		return time.Time{}
	}
	// The revision its peers act on, of those heard since it started.
	var peers uint64
	for _, p := range st.peers {
		if !p.Left && !p.Heard.IsZero() && !p.Heard.Before(st.sync.started) {
			peers = max(peers, p.Revision)
		}
	}
	var wake time.Time
	st.sync, wake = syncStep(st.sync, now, contact, revision, peers, m.dead, m.cfg.HeartbeatInterval, m.cfg.StateMaxAge)
	if !st.sync.synced.IsZero() {
		args := []any{"after", now.Sub(st.sync.started).Round(time.Millisecond), "revision", revision}
		if revision < st.sync.target {
			m.log.Warn("heard the cluster; may hold VIPs, though its state has not reached the revision its peers act on",
				append(args, "peers_revision", st.sync.target, "waited", m.cfg.StateMaxAge)...)
		} else {
			m.log.Info("heard the cluster; may hold VIPs", args...)
		}
	}
	return wake
}

// syncState is how far a starting host is in hearing the cluster.
type syncState struct {
	// started is when the loop began; contacted is when it first saw the
	// leader's contact after that, synced when it then had the state for
	// a full detection time and its state reached target (zero: not yet).
	started, contacted, synced time.Time
	// target is the highest revision its peers acted on when that
	// detection time ended (targetSet).
	target    uint64
	targetSet bool
}

// syncStep marks a host synced once it has heard the Raft leader since
// it started, then waited a full detection time (dead), and its state
// (revision) has reached the revision its peers acted on at the end of
// that wait (peers, from their heartbeats; 0 when it heard none), or
// maxWait after the contact at the latest. Before that the state it has
// may be a partial one restored from disk, in which the other hosts may
// be missing, so that it would count a majority of one, or in which it
// is not drained yet: a leader's heartbeat says it is current before the
// entries it missed reach it, and on a busy machine these can take longer
// than a detection time. It returns the new state and when to look again
// (zero: no need).
func syncStep(s syncState, now, contact time.Time, revision, peers uint64, dead, poll, maxWait time.Duration) (syncState, time.Time) {
	if !s.synced.IsZero() {
		return s, time.Time{}
	}
	if s.contacted.IsZero() {
		if contact.IsZero() || contact.Before(s.started) {
			return s, now.Add(poll)
		}
		s.contacted = now
	}
	if now.Sub(s.contacted) < dead {
		return s, s.contacted.Add(dead)
	}
	if !s.targetSet {
		s.target, s.targetSet = peers, true
	}
	if revision < s.target && now.Sub(s.contacted) < maxWait {
		return s, now.Add(poll)
	}
	s.synced = now
	return s, time.Time{}
}

// staleProblem says why the committed state may be too old to announce
// bgp VIPs on ("" when it is current).
func staleProblem(now, contact time.Time, maxAge time.Duration) string {
	if age := now.Sub(contact); contact.IsZero() || age > maxAge {
		return fmt.Sprintf("no contact with the Raft leader for %s (the state may be stale; allowed %s)", age.Round(time.Second), maxAge)
	}
	return ""
}

// quorumState names a view's standing for the logs.
func quorumState(v view) string {
	switch {
	case v.Quorum:
		return "majority"
	case v.Keep && v.HoldDown:
		return "hold-down"
	case v.Keep:
		return "keep"
	}
	return "none"
}

// notReady says why this host cannot serve vs ("" when it can): it can
// when the data plane serves one of its load balancers. The rule for
// member health is the same for every mode and listener kind (see
// DESIGN.md "Member health and VIPs"): a load balancer whose listeners
// are open but none of whose members is healthy (observe.NoHealthyMember,
// or observe.Recovering in the hold-down after) is served: the VIP stays
// where it is, as every host dials the same members and releasing it
// would only turn the clients' errors into timeouts. Only a bgp pool with
// withdrawWhenDown withdraws it then, so that another site announcing the
// address takes the traffic.
func notReady(vs vipSpec, ready map[string]string, haveReady bool) string {
	if !haveReady {
		return "the data plane has not reported yet"
	}
	withdraw := vs.WithdrawWhenDown && vs.Mode == ModeBGP
	var why []string
	for _, lb := range vs.LBs {
		r, ok := ready[lb]
		if !ok {
			r = "not served by the data plane yet"
		}
		if r == "" || (!withdraw && observe.MemberHealthOnly(r)) {
			return ""
		}
		if withdraw && observe.MemberHealthOnly(r) {
			r += " (withdrawWhenDown)"
		}
		why = append(why, lb+": "+r)
	}
	return strings.Join(why, "; ")
}

// adopt takes a new committed state: members and rankings. delta holds
// the addresses whose VIP changed when UpdateLoadBalancers derived d from
// the state the loop holds: with the same members, only those are ranked
// and decided again.
func (m *Manager) adopt(d *desired, now time.Time, delta map[netip.Addr]bool) {
	st := &m.loop
	first := st.want == nil
	// A host that joins is given the grace only when this host was in
	// the previous state itself and had heard the cluster: after a
	// restart the first states may be partial, and nobody they lack may
	// be left out of the majority.
	grace := !first && !st.sync.synced.IsZero() && slices.ContainsFunc(st.want.Members, func(mb member) bool { return mb.ID == m.cfg.NodeID })
	members := map[string]member{}
	for _, mb := range d.Members {
		if mb.ID == m.cfg.NodeID {
			continue
		}
		members[mb.ID] = mb
		if _, ok := st.seenAt[mb.ID]; !ok && grace && st.members[mb.ID] == (member{}) {
			st.seenAt[mb.ID] = now
		}
	}
	for id := range st.peers {
		if _, ok := members[id]; !ok {
			delete(st.peers, id)
			delete(st.lastSeq, id)
			delete(st.topIncarnation, id)
			delete(st.refusedIncarnationLog, id)
			delete(st.seenAt, id)
		}
	}
	m.refused.forget(members)
	changed := first || !maps.Equal(members, st.members)
	st.members = members
	if changed {
		old := *m.arrivals.Load()
		arr := make(map[string]*peerArrival, len(members))
		for id := range members {
			if arr[id] = old[id]; arr[id] == nil {
				arr[id] = &peerArrival{}
			}
		}
		m.arrivals.Store(&arr)
	}
	hosts := append(slices.Collect(maps.Keys(members)), m.cfg.NodeID)
	if !changed && delta != nil && d.epoch == st.want.epoch {
		for a := range delta {
			st.pending[a] = true
			vs, ok := d.vip(a)
			switch {
			case !ok || vs.Mode != ModeARP:
				delete(st.ranks, a)
			case st.ranks[a] == nil:
				st.ranks[a] = rank(a, hosts)
			}
		}
		st.want = d
		return
	}
	st.decideAll = true
	ranks := make(map[netip.Addr][]string, d.VIPs.Len())
	for vs := range d.VIPs.All() {
		if vs.Mode != ModeARP {
			continue
		}
		if r, ok := st.ranks[vs.Addr]; ok && !changed {
			ranks[vs.Addr] = r
			continue
		}
		ranks[vs.Addr] = rank(vs.Addr, hosts)
	}
	st.ranks = ranks
	st.want = d
}

// logMove logs that this host takes or lets go of a VIP, and why.
func (m *Manager) logMove(vs vipSpec, take bool, reason string) {
	if vs.Mode == ModeStatic {
		return
	}
	msg := map[bool]map[bool]string{
		true:  {true: "VIP announced", false: "VIP withdrawn"},
		false: {true: "VIP taken", false: "VIP released"},
	}[vs.Mode == ModeBGP][take]
	m.log.Info(msg, "addr", vs.Addr, "mode", vs.Mode, "reason", reason, "lbs", strings.Join(vs.LBs, ","))
	if m.cfg.Events == nil {
		return
	}
	ev := &pb.Event{Type: observe.EventVIPTaken, Severity: observe.Info, Message: fmt.Sprintf("%s %s (%s): %s", msg, vs.Addr, vs.Mode, reason)}
	if !take {
		ev.Type, ev.Severity = observe.EventVIPReleased, observe.Warning
	}
	if len(vs.LBs) == 1 {
		ev.LoadBalancer = vs.LBs[0]
	}
	if len(vs.LBs) > 0 {
		ev.Tenant, _, _ = strings.Cut(vs.LBs[0], "/")
	}
	m.cfg.Events(ev)
}

// checkLinks reads the state of the interfaces.
func (m *Manager) checkLinks() {
	st := &m.loop
	check := func(f *iface, cur *bool) {
		if f == nil {
			return
		}
		up, err := f.up()
		if err != nil {
			up = false
		}
		if up != *cur {
			if up {
				m.log.Info("interface is up", "interface", f.name)
			} else {
				m.log.Warn("interface is down; releasing its VIPs", "interface", f.name, "err", err)
			}
		}
		*cur = up
	}
	check(m.arp, &st.arpUp)
	check(m.bgpIf, &st.bgpUp)
}

// noteLiveness logs peers coming and going, and notes when a peer it
// counted dead comes back (peerState.Gone and Back: it is returning for
// a detection time, hostView.Returning).
func (m *Manager) noteLiveness(now time.Time, v view) {
	st := &m.loop
	back := false
	for id := range v.Alive {
		if !st.alive[id] {
			m.log.Info("peer is alive", "peer", id)
			back = true
		}
		if p := st.peers[id]; p != nil && p.Gone {
			p.Gone, p.Back = false, now
		}
	}
	if back {
		// While out of sight, the peer may have taken and announced the
		// VIPs held here: they are announced again.
		for _, r := range st.records {
			if r.held {
				r.takes++
			}
		}
	}
	for id := range st.alive {
		if _, ok := v.Alive[id]; !ok {
			why := fmt.Sprintf("no heartbeat for %s", m.dead)
			p := st.peers[id]
			if p != nil && p.Left {
				why = "it is shutting down"
			}
			if p != nil {
				p.Gone = true
			}
			m.log.Warn("peer is dead", "peer", id, "reason", why)
		}
	}
	st.alive = map[string]bool{}
	for id := range v.Alive {
		st.alive[id] = true
	}
}

// holding is the status of one VIP, or nil when this host has nothing to
// say about it: an arp VIP it never held and has no reason of its own not
// to hold.
func (r *record) holding(a netip.Addr) *pb.VIPHolding {
	if r.spec.Mode == ModeARP && !r.held && !r.everHeld && !r.local {
		return nil
	}
	state := "released"
	switch {
	case r.held && r.spec.Mode == ModeBGP:
		state = "announcing"
	case r.held:
		state = "holding"
	case r.spec.Mode == ModeBGP:
		state = "withdrawn"
	}
	return &pb.VIPHolding{
		Address: a.String(), Mode: r.spec.Mode, State: state, Reason: r.reason,
		Since: timestamppb.New(r.since), LoadBalancers: slices.Clone(r.spec.LBs),
		UnservedTenants: maps.Clone(r.unserved),
	}
}

// signature sums up what the decisions depend on in a view and this
// host's problems; decisions are redone only when it changes (or the
// inputs do).
func signature(v view, peers map[string]*peerState, problems ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%t|%s", v.Quorum, strings.Join(problems, "|"))
	for _, id := range slices.Sorted(maps.Keys(v.Alive)) {
		h := v.Alive[id]
		var version uint64
		if p := peers[id]; p != nil {
			version = p.Version
		}
		fmt.Fprintf(&b, "|%s:%t:%t:%d:%t", id, h.Eligible, h.NotReadyAll, version, h.Returning)
	}
	return b.String()
}
