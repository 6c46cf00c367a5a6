package vip

import (
	"encoding/binary"
	"errors"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// heartbeats is the failure detector's transport: the UDP socket, the
// channel from its reader (readHeartbeats) to the loop, the sender that
// runs on an OS thread of its own (beat.go), and the arrival times the
// reader stamps.
type heartbeats struct {
	conn  *net.UDPConn
	recv  chan received
	beats *beatSender
	// epoch is the origin of the reader's arrival times; arrivals maps
	// each member to its latest heartbeat as the reader saw it (the loop
	// replaces the map when the members change).
	epoch    time.Time
	arrivals atomic.Pointer[map[string]*peerArrival]
}

// received is one heartbeat as the reader took it off the socket.
type received struct {
	hb *heartbeat
	at time.Time
}

// readHeartbeats reads datagrams until done is closed, the socket is
// closed or its read deadline passes, and hands the valid ones to the
// loop. Like the sender it runs on an OS thread of its own at a raised
// priority and waits in poll(2), so that the kernel wakes it when a
// datagram arrives; it notes each peer's latest heartbeat (arrivals), so
// that this host's heartbeats say it heard its peers on time even when
// the decision loop lags behind on a loaded machine.
func (m *Manager) readHeartbeats(done <-chan struct{}) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	_, _ = raisePriority()
	buf := make([]byte, maxDatagram+1)
	oob := make([]byte, 128)
	var lastBad time.Time
	rc, err := m.conn.SyscallConn()
	if err != nil {
		return
	}
	for {
		select {
		case <-done:
			return
		default:
		}
		ready := false
		cerr := rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(fds, 50)
			ready = n > 0
		})
		if cerr != nil {
			return // closed
		}
		if !ready {
			continue
		}
		n, oobn, _, from, err := m.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		at := arrival(time.Now(), oob[:oobn])
		m.mu.Lock()
		key := m.key
		m.mu.Unlock()
		if len(key) == 0 {
			continue
		}
		hb, err := parseHeartbeat(buf[:n], key)
		if err != nil {
			if at.Sub(lastBad) > 10*time.Second {
				lastBad = at
				m.log.Warn("dropped a datagram on the heartbeat port", "from", from, "err", err)
			}
			continue
		}
		if arr := (*m.arrivals.Load())[hb.ID]; arr != nil && arr.note(hb) {
			arr.at.Store(int64(at.Sub(m.epoch)))
		}
		select {
		case m.recv <- received{hb: hb, at: at}:
		case <-m.stop:
			return
		}
	}
}

// peerArrival is the latest heartbeat of a peer as the reader saw it.
type peerArrival struct {
	at       atomic.Int64 // since Manager.epoch (0: none)
	inc, seq uint64       // the reader's own
	top      uint64       // the highest ordered incarnation noted
}

// note reports whether hb is newer than the heartbeats of the peer noted
// so far, and notes it then: not one that says the peer leaves, one of
// the same process with a sequence not above the last, nor one of an
// earlier process than the latest (an ordered incarnation below top). A
// recorded heartbeat sent again then does not have this host's own
// heartbeats say that it heard the peer a moment ago.
func (a *peerArrival) note(hb *heartbeat) bool {
	if hb.Leaving || hb.Ordered && hb.Incarnation < a.top || hb.Incarnation == a.inc && hb.Seq <= a.seq {
		return false
	}
	a.inc, a.seq = hb.Incarnation, hb.Seq
	if hb.Ordered {
		a.top = hb.Incarnation
	}
	return true
}

// heardAt returns when the peer's latest heartbeat arrived (zero: none).
func (m *Manager) heardAt(a *peerArrival) time.Time {
	if a == nil {
		return time.Time{}
	}
	ns := a.at.Load()
	if ns == 0 {
		return time.Time{}
	}
	return m.epoch.Add(time.Duration(ns))
}

// incarnationLive reports whether the process of peer id whose
// heartbeats this host takes is still heard at now: its last one came
// less than the dead time before, and it did not say it leaves. A
// heartbeat of another process of the peer (another incarnation) is taken
// only once it is not: a host that restarts has stopped sending from its
// earlier process by then.
func (m *Manager) incarnationLive(id string, now time.Time) bool {
	p := m.loop.peers[id]
	return p != nil && !p.Left && !p.Heard.IsZero() && now.Sub(p.Heard) < m.dead
}

// refuseIncarnation notes a heartbeat of peer id refused as of another
// process than the one heard, or (earlier) of an earlier process than
// the latest taken: it counts it for teapot_lb_vip_heartbeats_refused_total
// and says so at most once a minute per peer.
func (m *Manager) refuseIncarnation(id string, now time.Time, earlier bool) {
	st := &m.loop
	st.refusedIncarnations++
	reason := refusedAnother
	if earlier {
		reason = refusedEarlier
	}
	m.refused.note(id, reason)
	if last, ok := st.refusedIncarnationLog[id]; ok && now.Sub(last) < time.Minute {
		return
	}
	st.refusedIncarnationLog[id] = now
	if earlier {
		m.log.Warn("refused heartbeats of an earlier process of a peer than the latest heard: recorded and sent again, or a second host with its node id",
			"peer", id, "refused_from_all_peers", st.refusedIncarnations)
		return
	}
	m.log.Warn("refused heartbeats of another process of a peer while the one heard still sends: replayed, or two hosts with one node id",
		"peer", id, "refused_from_all_peers", st.refusedIncarnations)
}

// receive takes one heartbeat into the peers' state.
func (m *Manager) receive(r received) {
	st := &m.loop
	hb := r.hb
	if _, ok := st.members[hb.ID]; !ok || hb.ID == m.cfg.NodeID {
		return
	}
	if top, ok := st.topIncarnation[hb.ID]; ok && hb.Ordered && hb.Incarnation < top {
		// A process of the peer earlier than one taken, live or not:
		// its heartbeat recorded and sent again. Taken once the peer
		// is dead or has left, it would have the peer look alive and
		// keep its VIPs, nobody taking them over.
		m.refuseIncarnation(hb.ID, r.at, true)
		return
	}
	if last, ok := st.lastSeq[hb.ID]; ok {
		if last[0] == hb.Incarnation && hb.Seq <= last[1] {
			return
		}
		if last[0] != hb.Incarnation && m.incarnationLive(hb.ID, r.at) {
			// Another process of the peer while the one heard is still
			// heard (and did not say it leaves): a heartbeat of an
			// earlier process replayed, or two hosts with one node id.
			// Taken, it would stand for the peer: a replayed "leaving"
			// would have the others take a live host's VIPs.
			m.refuseIncarnation(hb.ID, r.at, false)
			return
		}
	}
	// What is left open: a heartbeat without Ordered (a host of an
	// earlier version, or one rolled back to it) is refused only as
	// above, so that a host that runs such a version is heard; a
	// recording made while the peer ran it can still stand for a dead
	// peer, as before. This host keeps the highest incarnation and the
	// last sequence in memory only: after it restarts, or after the
	// peer was out of the cluster's members, the first heartbeat it
	// takes of the peer sets them again, so that a recording of any
	// earlier process of a peer dead by then is taken until the peer's
	// own heartbeats come (a greater incarnation) or the recording
	// ends. The same holds for heartbeats of the latest process kept
	// from this host and delivered late: the datagram carries no clock
	// of the sender's to refuse them by age, and one would be a new
	// trailing part that hosts of earlier versions refuse unless sent
	// only to peers that read it.
	st.lastSeq[hb.ID] = [2]uint64{hb.Incarnation, hb.Seq}
	if hb.Ordered {
		st.topIncarnation[hb.ID] = max(st.topIncarnation[hb.ID], hb.Incarnation)
	}
	p := st.peers[hb.ID]
	if p == nil {
		p = &peerState{}
		st.peers[hb.ID] = p
	}
	if hb.Leaving {
		if !p.Left {
			m.log.Info("peer is shutting down; taking over its VIPs", "peer", hb.ID)
		}
		p.Left = true
		p.Version++
		return
	}
	wasDead := p.Left || p.Heard.IsZero() || r.at.Sub(p.Heard) >= m.dead
	if p.Left || p.Heard.IsZero() || r.at.Sub(p.Heard) >= m.gap {
		// Settling starts over only after a real absence: a lost
		// heartbeat or a short stall does not cost a peer its vote.
		p.AliveSince = r.at
	}
	p.Heard, p.Left, p.Revision = r.at, false, hb.Revision
	var holding map[netip.Addr]bool
	if hb.HoldingSent {
		holding = map[netip.Addr]bool{}
		for _, a := range hb.Holding {
			holding[a] = true
		}
	}
	p.Holdings = hb.Holdings
	if p.HoldingKnown != hb.HoldingSent || !maps.Equal(p.Holding, holding) {
		p.HoldingKnown, p.Holding = hb.HoldingSent, holding
		p.Version++
	}
	notReady := map[netip.Addr]bool{}
	for _, a := range hb.NotReady {
		notReady[a] = true
	}
	var partly map[netip.Addr]bool
	for _, a := range hb.Partly {
		if notReady[a] {
			if partly == nil {
				partly = map[netip.Addr]bool{}
			}
			partly[a] = true
		}
	}
	p.ReadsPartly, p.ReadsTenants = hb.ReadsPartly, hb.ReadsTenants
	var sets map[netip.Addr]tenantSet
	if hb.TenantsSent {
		sets = make(map[netip.Addr]tenantSet, len(hb.Tenants))
		for _, s := range hb.Tenants {
			sets[s.Addr] = s
		}
	}
	if p.TenantsKnown != hb.TenantsSent || !maps.EqualFunc(p.Tenants, sets, tenantSet.equal) {
		// They decide what the serving watch reports, not who holds a VIP.
		p.TenantsKnown, p.Tenants = hb.TenantsSent, sets
		p.ServingVersion++
	}
	notReadyChanged := !maps.Equal(p.NotReady, notReady)
	if p.Eligible != hb.Eligible || p.Handover != hb.Handover || p.NotReadyAll != hb.NotReadyAll || !maps.Equal(p.Partly, partly) ||
		notReadyChanged && m.decisionsRead(p.NotReady, notReady) {
		p.Eligible, p.Handover, p.NotReadyAll, p.NotReady, p.Partly = hb.Eligible, hb.Handover, hb.NotReadyAll, notReady, partly
		p.Version++
	} else if notReadyChanged {
		// Only bgp VIPs of this host's state came or went: no decision
		// reads them, the serving watch does.
		p.NotReady = notReady
		p.ServingVersion++
	}
	p.Sightings = hb.Sightings
	seesMe := slices.ContainsFunc(hb.Sightings, func(s sighting) bool { return s.ID == m.cfg.NodeID && s.Age < m.dead })
	if seesMe && p.LostMe {
		// It hears this host again after taking it for dead: it may have
		// announced this host's VIPs meanwhile, and releases them now.
		st.reannounce = true
	}
	p.LostMe = !seesMe
	if wasDead {
		// Tell it at once that it is heard, so that it counts this host
		// towards its majority without waiting for the next tick.
		m.trigger(r.at)
	}
}

// decisionsRead reports whether the not-ready lists old and new of a peer
// differ in an address that a decision of this host reads: any but a bgp
// VIP of its committed state (a bgp decision reads this host's readiness
// alone). A VIP that changes its mode in a later state is decided again
// then, with the list as it is.
func (m *Manager) decisionsRead(old, new map[netip.Addr]bool) bool {
	want := m.loop.want
	read := func(a netip.Addr) bool {
		if want == nil {
			return true
		}
		vs, ok := want.vip(a)
		return !ok || vs.Mode != ModeBGP
	}
	for a := range old {
		if !new[a] && read(a) {
			return true
		}
	}
	for a := range new {
		if !old[a] && read(a) {
			return true
		}
	}
	return false
}

// trigger sends heartbeats now, at most four times per interval.
func (m *Manager) trigger(now time.Time) {
	st := &m.loop
	if now.Sub(st.lastTrigger) < m.cfg.HeartbeatInterval/4 {
		return
	}
	st.lastTrigger = now
	m.sendHeartbeats(now)
}

// sendHeartbeats plans this host's heartbeat and sends it to every
// member now.
func (m *Manager) sendHeartbeats(now time.Time) {
	m.planBeats(now)
	m.beats.send(now)
}

// planBeats hands the heartbeat thread what this host's heartbeats say
// from now on, and reports whether that changes what the peers read of
// this host's lists (noteSent).
func (m *Manager) planBeats(now time.Time) bool {
	st := &m.loop
	m.mu.Lock()
	key := m.key
	m.mu.Unlock()
	haveReady := st.ready.have
	if len(key) == 0 || len(st.members) == 0 {
		m.beats.plan.Store(nil)
		return m.noteSent(false, false, false)
	}
	p := &beatPlan{key: key, built: now, stale: m.gap, pause: m.quorum, settle: m.settle}
	p.hb = heartbeat{
		ID: m.cfg.NodeID, Incarnation: m.incarnation, Ordered: true, Revision: st.revision,
		Eligible: st.eligible && !st.leaving, Leaving: st.leaving, Handover: (st.eligible && st.handingOver || st.handedOff) && !st.leaving,
		NotReadyAll: st.want == nil || !haveReady, Holdings: true, ReadsPartly: true, ReadsTenants: true,
	}
	for _, id := range slices.Sorted(maps.Keys(st.peers)) {
		pe := st.peers[id]
		// Peers heard within the gap are listed, the dead ones with their
		// age: a peer not listed has not been heard for a whole gap, so it
		// settles again from scratch (takeoverAt counts on it).
		if pe.Left || pe.Heard.IsZero() || now.Sub(pe.Heard) >= m.gap || !(sighting{ID: id}).fits(len(p.hb.Sightings)) {
			continue
		}
		p.hb.Sightings = append(p.hb.Sightings, sighting{ID: id, Eligible: pe.Eligible})
		p.heard = append(p.heard, pe.Heard)
		p.arrived = append(p.arrived, (*m.arrivals.Load())[id])
		p.since = append(p.since, pe.AliveSince)
	}
	// Both lists are kept by the loop as the holdings and the readiness
	// change, and never changed once built: a tick costs what the peers
	// cost, not what the VIPs do.
	p.hb.Holding = st.heldARP
	if st.want != nil && haveReady {
		p.hb.NotReady, p.hb.Partly, p.hb.PartlySent = st.ready.arpNotReady, st.ready.arpPartly, true
		p.hb.NotReadyBGP = st.ready.bgpNotReady
		if st.bgpProblem != "" {
			// It announces none of them: withdrawn everywhere.
			p.hb.NotReadyBGP = st.bgpVIPs()
		}
		p.hb.Tenants, p.hb.TenantsSent = st.ready.tenantSets, true
	}
	if len(p.hb.NotReady) > maxDatagram/20 {
		// It would not fit next to the sightings: not ready for any.
		p.hb.NotReady, p.hb.NotReadyBGP, p.hb.NotReadyAll = nil, nil, true
	}
	withHolding, withPartly, withTenants := false, false, false
	for _, id := range slices.Sorted(maps.Keys(st.members)) {
		// Held addresses only to a peer that reads them.
		pe := st.peers[id]
		d := beatDest{id: id, addr: st.members[id].Heartbeat, withHolding: pe != nil && pe.Holdings,
			withPartly: pe != nil && pe.Holdings && pe.ReadsPartly, withTenants: pe != nil && pe.Holdings && pe.ReadsPartly && pe.ReadsTenants}
		p.to = append(p.to, d)
		withHolding, withPartly, withTenants = withHolding || d.withHolding, withPartly || d.withPartly, withTenants || d.withTenants
	}
	// This host counts on what its peers read of it, no more: a list that
	// does not fit next to the rest is left out (the not-ready list
	// becomes "not ready for any"), and the peers take this host for not
	// ready for those addresses, or for a host that does not say what it
	// holds. Counting on the list all the same, it would keep an address
	// it holds while a peer takes it too (self.NotReadyAll,
	// HoldingUnsent, PartlyUnsent).
	if cap(st.beatScratch) < maxDatagram {
		st.beatScratch = make([]byte, 0, maxDatagram)
	}
	// The tenant sets decide no holder: a peer that does not get them
	// takes this host's tenants of those addresses for not known and does
	// not claim the addresses for them (servedFor); this host's own
	// serving watch reads what it carries itself.
	_, sent := p.hb.appendParts(st.beatScratch[:0], withHolding, withPartly, withTenants)
	changed := m.noteSent(sent.NotReadyAll, withHolding && !sent.Holding, withPartly && len(p.hb.Partly) > 0 && !sent.Partly)
	m.beats.plan.Store(p)
	return changed
}

// bgpVIPs returns every bgp VIP of the loop's state, sorted, never
// changed once built (the heartbeat plan shares it). It is built again
// for a whole new state, or a derived one that changed a bgp VIP
// (takeReadiness keeps it for the others): a host that announces none
// (no bgp: section) does not go over every VIP at each change.
func (st *loopState) bgpVIPs() []netip.Addr {
	if st.allBGPFor != st.want {
		st.allBGPBuilds++
		st.allBGP, st.allBGPFor = nil, st.want
		if st.want != nil {
			for vs := range st.want.VIPs.All() {
				if vs.Mode == ModeBGP {
					st.allBGP = append(st.allBGP, vs.Addr)
				}
			}
		}
	}
	return st.allBGP
}

// noteSent keeps what the heartbeats tell the peers, for the next
// decisions: a change of the first two changes the signature of the arp
// decisions, one of the last those of the partly ready addresses. It
// reports whether any of them changed.
func (m *Manager) noteSent(notReadyAll, holdingUnsent, partlyUnsent bool) bool {
	st := &m.loop
	changed := notReadyAll != st.notReadyAllSent || holdingUnsent != st.holdingUnsent || partlyUnsent != st.partlyUnsent
	st.notReadyAllSent, st.holdingUnsent = notReadyAll, holdingUnsent
	if partlyUnsent != st.partlyUnsent {
		st.partlyUnsent = partlyUnsent
		for _, a := range st.ready.arpPartly {
			st.pending[a] = true
		}
	}
	return changed
}

// setSocketOptions marks heartbeats as network control traffic (DSCP
// CS6) and asks the kernel to stamp each datagram with its arrival time.
func setSocketOptions(c *net.UDPConn, v4 bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if v4 {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, 0xc0)
		} else {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0xc0)
		}
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
}

// arrival is when a datagram read at now reached the host: the kernel's
// stamp in oob when there is one. A process that was paused (a long
// garbage collection, a starved CPU) then still sees that its peers'
// heartbeats came in time. The result keeps now's monotonic reading.
func arrival(now time.Time, oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return now
	}
	for _, msg := range msgs {
		if msg.Header.Level != unix.SOL_SOCKET || msg.Header.Type != unix.SCM_TIMESTAMPNS || len(msg.Data) != 16 {
			continue
		}
		sec := int64(binary.NativeEndian.Uint64(msg.Data[0:8]))
		nsec := int64(binary.NativeEndian.Uint64(msg.Data[8:16]))
		delay := now.Round(0).Sub(time.Unix(sec, nsec))
		if delay < 0 || delay > time.Minute {
			return now
		}
		return now.Add(-delay)
	}
	return now
}
