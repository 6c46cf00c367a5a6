package vip

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A VIP's decision depends on the VIP itself (its load balancers, its
// ranking, this host's readiness for it, its rebalance window) and, by
// mode: an arp VIP's on the view's signature (who is alive, eligible and
// ready, the peers' holdings, this host's problems and flags) and on this
// host's holdings while a rebalance window is open; a bgp VIP's on this
// host's problems and its BGP sessions; a static VIP's on nothing more.
// The loop decides every VIP again when something they all depend on
// changes (converge: a new whole state, every readiness), and only the
// VIPs in loopState.pending otherwise (convergeSome): a load balancer
// created, deleted or moved, a readiness change, a rebalance window that
// opened or closed, or a signature change, which adds every VIP of its
// mode.

// converge decides every VIP, logs the moves and hands the set to hold
// to the actuator.
func (m *Manager) converge(now time.Time, v view, arpMe, bgpMe, me self) {
	st := &m.loop
	st.converges++
	st.decideAll = false
	clear(st.pending)
	wanted := map[netip.Addr]bool{}
	hold := map[netip.Addr]target{}
	for vs := range st.want.VIPs.All() {
		wanted[vs.Addr] = true
		if t, ok := m.decideOne(vs, now, v, arpMe, bgpMe, me); ok {
			hold[vs.Addr] = t
		}
	}
	for a := range st.records {
		if !wanted[a] {
			m.forget(a)
		}
	}
	m.heldChanged(hold)
	m.act.set(hold, st.want.Ranges)
}

// convergeSome decides the VIPs in pending alone, and hands the actuator
// what changes for them.
func (m *Manager) convergeSome(now time.Time, v view, arpMe, bgpMe, me self) {
	st := &m.loop
	changes := make(map[netip.Addr]*target, len(st.pending))
	var flips []netip.Addr // arp VIPs whose holding here changes
	for a := range st.pending {
		var t target
		ok := false
		if vs, found := st.want.vip(a); found {
			t, ok = m.decideOne(vs, now, v, arpMe, bgpMe, me)
		} else {
			m.forget(a)
		}
		if ok {
			changes[a] = &t
		} else {
			changes[a] = nil
		}
		if (ok && t.mode == ModeARP) != st.holding[a] {
			flips = append(flips, a)
		}
	}
	clear(st.pending)
	if len(flips) > 0 {
		// A new map and slice: the heartbeat plan shares the old ones.
		held := maps.Clone(st.holding)
		for _, a := range flips {
			if held[a] {
				delete(held, a)
			} else {
				held[a] = true
			}
		}
		st.holding = held
		st.heldARP = slices.SortedFunc(maps.Keys(held), netip.Addr.Compare)
	}
	m.act.change(changes, st.want.Ranges)
}

// decideOne decides one VIP, notes the outcome, and returns what the
// actuator must hold for it (false: nothing).
func (m *Manager) decideOne(vs vipSpec, now time.Time, v view, arpMe, bgpMe, me self) (target, bool) {
	st := &m.loop
	st.decided++
	var d decision
	var t target
	// The tenants sharing the address whose attachment is not up here:
	// it is carried for the others alone.
	unserved := st.ready.unserved[vs.Addr]
	switch vs.Mode {
	case ModeARP:
		d = decide(vs, st.ranks[vs.Addr], arpMe, v, st.peers, m.dead, st.prev[vs.Addr])
		if d.Holder != "" {
			st.prev[vs.Addr] = d.Holder
		}
		t = m.arpTarget(vs, unserved)
		switch {
		case len(unserved) > 0 && d.Hold && d.Holder == m.cfg.NodeID:
			d.Reason += "; for tenant " + strings.Join(servedSpaces(vs.Spaces, unserved), ", tenant ") +
				" only: no live host that can hold it has the attachments of all its tenants up, and here " + unservedWhy(unserved)
		case len(unserved) > 0 && d.Hold:
			d.Reason += "; for tenant " + strings.Join(servedSpaces(vs.Spaces, unserved), ", tenant ") + " only: " + unservedWhy(unserved)
		case len(unserved) > 0:
			d.Reason += "; here it could be carried for tenant " + strings.Join(servedSpaces(vs.Spaces, unserved), ", tenant ") +
				" only: " + unservedWhy(unserved)
		}
	case ModeBGP:
		d = decide(vs, nil, bgpMe, v, st.peers, m.dead, "")
		if len(vs.Spaces) > 0 {
			// A VIP of a bgp pool in tenants' attachments: on the device in
			// each tenant's namespace, as an arp one, and announced to
			// those tenants' own speakers alone.
			spaces := servedSpaces(vs.Spaces, unserved)
			t = m.arpTarget(vs, unserved)
			t.mode, t.route = ModeBGP, route{Addr: vs.Addr, Communities: vs.Communities, Spaces: spaces}
			if d.Hold {
				d.Reason = "ready and current; announced to the speakers of tenant " + strings.Join(spaces, ", tenant ") + " from inside their attachments"
				if m.cfg.TenantVIPs == nil {
					d.Reason = "ready and current; " + errNoTenantVIPs.Error()
				} else if p := m.cfg.TenantVIPs.VIPProblem(vs.Addr); p != "" {
					// The address stays for the flows in flight, as a
					// fabric bgp VIP's without a session.
					d.Reason = "ready and current; " + p
				}
				if len(unserved) > 0 {
					d.Reason += "; not for the others: " + unservedWhy(unserved)
				}
			}
			break
		}
		if d.Hold && m.spk != nil && st.sessions == 0 {
			// The route stays in the speaker and goes out as soon as a
			// session is up; the address stays for the flows in flight.
			d.Reason = "ready and current; no BGP session is established, so no router has the route"
		}
		t = target{mode: ModeBGP, iface: m.bgpIf, route: route{Addr: vs.Addr, Communities: vs.Communities}}
	default:
		d = decide(vs, nil, me, v, st.peers, m.dead, "")
	}
	m.note(vs, d, unserved, now)
	if !d.Hold || (vs.Mode != ModeARP && vs.Mode != ModeBGP) {
		return target{}, false
	}
	if vs.Mode == ModeARP {
		t.announce = st.records[vs.Addr].takes
	}
	return t, true
}

// forget drops what the loop knows of a VIP no load balancer uses any
// more.
func (m *Manager) forget(a netip.Addr) {
	st := &m.loop
	r := st.records[a]
	if r == nil {
		return
	}
	if r.held {
		m.logMove(r.spec, false, "no load balancer uses it any more")
	}
	st.dirtyAddrs[a] = true
	delete(st.records, a)
	delete(st.prev, a)
	delete(st.rebalanceFrom, a)
	delete(st.rebalanceOpen, a)
}

// unservedWhy says why a VIP is not carried for the tenants of unserved.
func unservedWhy(unserved map[string]string) string {
	var why []string
	for _, t := range slices.Sorted(maps.Keys(unserved)) {
		why = append(why, unserved[t])
	}
	return strings.Join(why, "; ")
}

// note records the outcome for one VIP and logs a move.
func (m *Manager) note(vs vipSpec, d decision, unserved map[string]string, now time.Time) {
	st := &m.loop
	r := st.records[vs.Addr]
	if r == nil {
		r = &record{since: now}
		st.records[vs.Addr] = r
	}
	if d.Hold && !r.held {
		r.takes++
	}
	if d.Hold != r.held {
		m.logMove(vs, d.Hold, d.Reason)
		if vs.Mode != ModeStatic {
			m.moves.note(d.Hold, now)
		}
	}
	if d.Hold != r.held || d.Local != r.local {
		r.since = now
	}
	if d.Hold != r.held || d.Reason != r.reason || d.Local != r.local || !slices.Equal(vs.LBs, r.spec.LBs) || vs.Mode != r.spec.Mode ||
		!maps.Equal(unserved, r.unserved) {
		st.dirtyAddrs[vs.Addr] = true
	}
	if !slices.Equal(vs.Spaces, r.spec.Spaces) {
		r.tenantsSince = sinceFor(vs.Spaces, r.spec.Spaces, r.tenantsSince, st.revision)
		m.serving.latestSince = max(m.serving.latestSince, st.revision)
	}
	r.spec, r.held, r.reason, r.local, r.unserved = vs, d.Hold, d.Reason, d.Local, unserved
	if d.Hold {
		r.everHeld = true
	}
}

// publish copies the status out for Describe: the VIPs when they
// changed, the peers every time. The VIPs whose records changed are
// replaced in the list published last; the list is built anew only when
// most of them changed.
func (m *Manager) publish(v view) {
	st := &m.loop
	changed := len(st.dirtyAddrs) > 0
	switch {
	case !changed:
	case len(st.dirtyAddrs) > len(st.pubVIPs)/4:
		st.pubVIPs = st.pubVIPs[:0:0]
		for _, a := range slices.SortedFunc(maps.Keys(st.records), netip.Addr.Compare) {
			if h := st.records[a].holding(a); h != nil {
				st.pubVIPs = append(st.pubVIPs, h)
			}
		}
	default:
		// A new slice: Describe may still read the last one.
		vips := slices.Clone(st.pubVIPs)
		for a := range st.dirtyAddrs {
			var h *pb.VIPHolding
			if r := st.records[a]; r != nil {
				h = r.holding(a)
			}
			i, found := slices.BinarySearchFunc(vips, a, holdingCompare)
			switch {
			case found && h != nil:
				vips[i] = h
			case found:
				vips = slices.Delete(vips, i, i+1)
			case h != nil:
				vips = slices.Insert(vips, i, h)
			}
		}
		st.pubVIPs = vips
	}
	clear(st.dirtyAddrs)
	m.publishServing(v, changed)
	vips := st.pubVIPs
	peers := make([]peerStatus, 0, len(st.members))
	for _, id := range slices.Sorted(maps.Keys(st.members)) {
		ps := peerStatus{id: id}
		if p := st.peers[id]; p != nil {
			ps.heard = p.Heard
		}
		_, ps.alive = v.Alive[id]
		peers = append(peers, ps)
	}
	if errs := m.act.errors(); len(errs) > 0 || st.actErrs {
		st.actErrs = len(errs) > 0
		changed = true
		vips = make([]*pb.VIPHolding, 0, len(st.pubVIPs))
		for _, h := range st.pubVIPs {
			if e := errs[netip.MustParseAddr(h.Address)]; e != "" {
				h = cloneHolding(h)
				h.State, h.Reason = "released", "cannot hold it: "+e
			}
			vips = append(vips, h)
		}
	}
	m.mu.Lock()
	if changed {
		m.pub.vips = vips
	}
	m.pub.peers = peers
	m.mu.Unlock()
}

// holdingCompare orders published VIPs by address.
func holdingCompare(h *pb.VIPHolding, a netip.Addr) int {
	return netip.MustParseAddr(h.Address).Compare(a)
}
