package vip

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// readiness is the loop's copy of the data plane's readiness and what it
// makes of it for each VIP. It is kept up to date from the changes only:
// a heartbeat tick with nothing new looks at no VIP, and a load balancer
// whose readiness changed recomputes the VIPs it uses, not the others.
// The whole is recomputed only when the whole committed state (Update) or
// the whole readiness (setReady) is new; a state that UpdateLoadBalancers
// derived recomputes the VIPs it changed.
type readiness struct {
	// ready is the loop's own copy of Manager.ready.
	ready map[string]string
	have  bool
	// want is the committed state the rest was computed for; vipsOf
	// indexes its VIPs by load balancer.
	want   *desired
	vipsOf map[string][]netip.Addr
	// notReady says why this host cannot serve each VIP it cannot serve;
	// unserved says, for each VIP it can serve for some of the tenants
	// that share it only, why not for the others, by tenant (readiness.why).
	// arpNotReady lists the arp VIPs of either, sorted, and arpPartly
	// those of unserved: the heartbeats' not-ready and partly ready
	// addresses. bgpNotReady lists the bgp VIPs of notReady, sorted,
	// which this host announces to no tenant's speaker and no router: the
	// heartbeats add them to the not-ready list when they fit, so that
	// the peers' serving watches leave them out (servedFor). The slices
	// are never changed once built: the heartbeat plan shares them.
	notReady    map[netip.Addr]string
	unserved    map[netip.Addr]map[string]string
	arpNotReady []netip.Addr
	arpPartly   []netip.Addr
	bgpNotReady []netip.Addr
	// tenantSets are the heartbeats' tenant sets (setOf), sorted by
	// address; never changed once built, as the lists above.
	tenantSets []tenantSet
	// full counts the whole recomputations; changed holds the VIPs
	// whose readiness was recomputed since the last whole one, until
	// rebalanceWindows has looked at them.
	full    uint64
	changed map[netip.Addr]bool
	// examined counts the VIPs whose readiness was computed, the work
	// proportional to the state that a change must not cause.
	examined int
	// ifProblems says, by pool, why this host cannot carry the pool's arp
	// VIPs (its interface is missing or down: checkPoolIfaces);
	// ifChanged: they changed since the readiness was last recomputed.
	ifProblems map[string]string
	ifChanged  bool
	// attProblems says, by tenant, why this host cannot carry the VIPs
	// in the tenant's attachment (checkPoolIfaces).
	attProblems map[string]string
}

// takeReadiness brings the loop's copy of the readiness up to date with
// what setReady and setReadyFor said since it last looked, and recomputes
// the VIPs it affects. delta holds the addresses whose VIP changed from
// the state the readiness was computed for to the loop's state, when
// UpdateLoadBalancers derived the one from the other. It returns whether
// anything changed. The VIPs whose readiness it recomputes are decided
// again: all of them after a whole recomputation, else those alone.
func (m *Manager) takeReadiness(delta map[netip.Addr]bool) bool {
	st := &m.loop
	rd := &st.ready
	// A state derived from the one computed for (same epoch) changed the
	// VIPs at the addresses in delta alone.
	var vips []netip.Addr
	derived := rd.want != st.want && rd.want != nil && st.want != nil && rd.want.epoch == st.want.epoch
	if derived {
		vips = slices.Collect(maps.Keys(delta))
	}
	m.mu.Lock()
	all := m.readyAll || (rd.want != st.want && !derived) || rd.have != m.haveReady || rd.ifChanged
	rd.ifChanged = false
	var lbs []string
	switch {
	case m.readyAll:
		rd.ready = maps.Clone(m.ready)
	case len(m.readyDelta) > 0:
		if rd.ready == nil {
			rd.ready = map[string]string{}
		}
		for lb := range m.readyDelta {
			if why, ok := m.ready[lb]; ok {
				rd.ready[lb] = why
			} else {
				delete(rd.ready, lb)
			}
			lbs = append(lbs, lb)
		}
	}
	rd.have = m.haveReady
	m.readyAll, m.readyDelta = false, nil
	m.mu.Unlock()

	switch {
	case st.want == nil:
		rd.want, rd.vipsOf, rd.notReady, rd.unserved, rd.arpNotReady, rd.arpPartly = nil, nil, map[netip.Addr]string{}, map[netip.Addr]map[string]string{}, nil, nil
		rd.bgpNotReady, rd.tenantSets = nil, nil
		return all
	case all:
		rd.recompute(st.want)
		st.decideAll = true
		return true
	case len(lbs) == 0 && !derived:
		return false
	}
	arpChanged, bgpChanged := false, false
	seen := map[netip.Addr]bool{}
	prev, bgpSet := rd.want, false
	// The VIPs the new state changed: their load balancers, then their
	// readiness.
	for _, a := range vips {
		old, had := rd.want.vip(a)
		vs, has := st.want.vip(a)
		if had {
			for _, lb := range old.LBs {
				rd.vipsOf[lb] = slices.DeleteFunc(rd.vipsOf[lb], func(x netip.Addr) bool { return x == a })
				if len(rd.vipsOf[lb]) == 0 {
					delete(rd.vipsOf, lb)
				}
			}
		}
		if has {
			for _, lb := range vs.LBs {
				rd.vipsOf[lb] = append(rd.vipsOf[lb], a)
			}
		}
		if had && old.Mode == ModeARP && (rd.notReady[a] != "" || rd.unserved[a] != nil) {
			arpChanged = true
		}
		// The bgp list filters by the mode of the VIP now at the address.
		if had && old.Mode == ModeBGP || has && vs.Mode == ModeBGP {
			bgpChanged, bgpSet = true, true
		}
		if !has {
			delete(rd.notReady, a)
			delete(rd.unserved, a)
			delete(rd.changed, a)
			continue
		}
		seen[a] = true
	}
	rd.want = st.want
	if !bgpSet && st.allBGPFor == prev {
		// No bgp VIP came, went or changed: the list of every one
		// (bgpVIPs) is the new state's too.
		st.allBGPFor = st.want
	}
	for _, lb := range lbs {
		for _, a := range rd.vipsOf[lb] {
			seen[a] = true
		}
	}
	for a := range seen {
		vs, _ := st.want.vip(a)
		st.pending[a] = true
		rd.changed[a] = true
		rd.examined++
		why, unserved := rd.why(vs)
		if why == rd.notReady[a] && maps.Equal(unserved, rd.unserved[a]) {
			continue
		}
		if why == "" {
			delete(rd.notReady, a)
		} else {
			rd.notReady[a] = why
		}
		if unserved == nil {
			delete(rd.unserved, a)
		} else {
			rd.unserved[a] = unserved
		}
		switch vs.Mode {
		case ModeARP:
			arpChanged = true
		case ModeBGP:
			bgpChanged = true
		}
	}
	if arpChanged {
		// New slices: those in the heartbeat plan stay as they are.
		rd.arpNotReady = rd.arpList(rd.arpNotReady, seen, func(a netip.Addr) bool { return rd.notReady[a] != "" || rd.unserved[a] != nil })
		rd.arpPartly = rd.arpList(rd.arpPartly, seen, func(a netip.Addr) bool { return rd.unserved[a] != nil })
	}
	if bgpChanged {
		rd.bgpNotReady = rd.modeList(ModeBGP, rd.bgpNotReady, seen, func(a netip.Addr) bool { return rd.notReady[a] != "" })
	}
	// The tenant sets of the VIPs looked at, and of those gone.
	redo := seen
	for _, a := range vips {
		if !seen[a] {
			if len(redo) == len(seen) {
				redo = maps.Clone(seen)
			}
			redo[a] = true
		}
	}
	rd.updateSets(redo)
	return true
}

// setOf returns the tenant set the heartbeats carry for the VIP at a
// (false: none): that of an address the attachments of several tenants
// share (vipSpec.Spaces) and that this host can carry for some of them
// only, an arp VIP of the partly ready list or a bgp VIP, for which also
// none of them (its peers otherwise count every eligible host as
// announcing a bgp VIP). A peer reads the tenants whose names' digest
// matches those of its own state for the address (tenantSet.tenants).
func (rd *readiness) setOf(a netip.Addr) (tenantSet, bool) {
	vs, ok := rd.want.vip(a)
	if !ok || len(vs.Spaces) < 2 {
		return tenantSet{}, false
	}
	unserved := rd.unserved[a]
	switch {
	case vs.Mode == ModeARP && unserved != nil && rd.notReady[a] == "":
	case vs.Mode == ModeBGP && rd.notReady[a] != "":
		return newTenantSet(a, vs.Spaces, allTenants(vs.Spaces))
	case vs.Mode == ModeBGP && unserved != nil:
	default:
		return tenantSet{}, false
	}
	return newTenantSet(a, vs.Spaces, unserved)
}

// allTenants is unserved with every tenant of spaces.
func allTenants(spaces []string) map[string]string {
	out := make(map[string]string, len(spaces))
	for _, t := range spaces {
		out[t] = "not ready"
	}
	return out
}

// updateSets makes tenantSets again for the addresses of redo (their VIP
// or its readiness changed, or the VIP is gone): a new slice when one of
// them has a set or had one, as the heartbeat plan shares the old one;
// else, the common case of addresses that no tenants share, it looks at
// those addresses alone.
func (rd *readiness) updateSets(redo map[netip.Addr]bool) {
	var fresh []tenantSet
	touched := false
	for a := range redo {
		_, had := slices.BinarySearchFunc(rd.tenantSets, a, func(s tenantSet, a netip.Addr) int { return s.Addr.Compare(a) })
		s, has := rd.setOf(a)
		if has {
			fresh = append(fresh, s)
		}
		touched = touched || had || has
	}
	if !touched {
		return
	}
	out := make([]tenantSet, 0, len(rd.tenantSets)+len(fresh))
	for _, s := range rd.tenantSets {
		if !redo[s.Addr] {
			out = append(out, s)
		}
	}
	out = append(out, fresh...)
	slices.SortFunc(out, func(x, y tenantSet) int { return x.Addr.Compare(y.Addr) })
	if !slices.EqualFunc(out, rd.tenantSets, tenantSet.equal) {
		rd.tenantSets = out
	}
}

// arpList returns a new sorted list of the addresses of old and of the
// arp VIPs of seen for which in holds.
func (rd *readiness) arpList(old []netip.Addr, seen map[netip.Addr]bool, in func(netip.Addr) bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range old {
		if in(a) {
			out = append(out, a)
		}
	}
	for a := range seen {
		vs, _ := rd.want.vip(a)
		if vs.Mode != ModeARP || !in(a) {
			continue
		}
		if j, found := slices.BinarySearchFunc(out, a, netip.Addr.Compare); !found {
			out = slices.Insert(out, j, a)
		}
	}
	return out
}

// modeList returns a new sorted list of the addresses of old and of seen
// whose VIP is of mode and for which in holds.
func (rd *readiness) modeList(mode string, old []netip.Addr, seen map[netip.Addr]bool, in func(netip.Addr) bool) []netip.Addr {
	of := func(a netip.Addr) bool {
		vs, ok := rd.want.vip(a)
		return ok && vs.Mode == mode && in(a)
	}
	var out []netip.Addr
	for _, a := range old {
		if of(a) {
			out = append(out, a)
		}
	}
	for a := range seen {
		if !of(a) {
			continue
		}
		if j, found := slices.BinarySearchFunc(out, a, netip.Addr.Compare); !found {
			out = slices.Insert(out, j, a)
		}
	}
	return out
}

// recompute derives everything from want and the readiness.
func (rd *readiness) recompute(want *desired) {
	rd.full++
	rd.want = want
	rd.changed = map[netip.Addr]bool{}
	rd.vipsOf = make(map[string][]netip.Addr, want.VIPs.Len())
	rd.notReady = map[netip.Addr]string{}
	rd.unserved = map[netip.Addr]map[string]string{}
	var arp, partly, bgp []netip.Addr
	var sets []tenantSet
	for vs := range want.VIPs.All() {
		for _, lb := range vs.LBs {
			rd.vipsOf[lb] = append(rd.vipsOf[lb], vs.Addr)
		}
		rd.examined++
		why, unserved := rd.why(vs)
		switch {
		case why != "":
			rd.notReady[vs.Addr] = why
		case unserved != nil:
			rd.unserved[vs.Addr] = unserved
			if vs.Mode == ModeARP {
				partly = append(partly, vs.Addr)
			}
		default:
			continue
		}
		if s, ok := rd.setOf(vs.Addr); ok {
			sets = append(sets, s)
		}
		switch {
		case vs.Mode == ModeARP:
			arp = append(arp, vs.Addr)
		case vs.Mode == ModeBGP && why != "":
			bgp = append(bgp, vs.Addr)
		}
	}
	// want.VIPs is sorted by address, and so are arp, partly, bgp and sets.
	rd.arpNotReady, rd.arpPartly, rd.bgpNotReady, rd.tenantSets = arp, partly, bgp, sets
}

// rebalanceWindows returns the arp VIPs whose rebalance window is open
// (see self.Rebalance), and notes when this host could first hold each
// ready arp VIP. Only a VIP that became ready, or all of them after a
// recomputation or a time when this host could hold none, are looked at;
// the windows still open are kept in rebalanceOpen.
func (m *Manager) rebalanceWindows(now time.Time) map[netip.Addr]bool {
	st := &m.loop
	rd := &st.ready
	window := rebalanceMultiple * m.settle
	stamp := func(vs vipSpec) {
		if vs.Mode != ModeARP || rd.notReady[vs.Addr] != "" {
			return
		}
		if _, ok := st.rebalanceFrom[vs.Addr]; !ok {
			st.rebalanceFrom[vs.Addr] = now
			st.rebalanceOpen[vs.Addr] = now
		}
	}
	if st.rebalancePass != rd.full {
		st.rebalancePass = rd.full
		for vs := range st.want.VIPs.All() {
			rd.examined++
			stamp(vs)
		}
	} else {
		for a := range rd.changed {
			if vs, ok := st.want.vip(a); ok {
				stamp(vs)
			}
		}
	}
	clear(rd.changed)
	out := map[netip.Addr]bool{}
	for a, from := range st.rebalanceOpen {
		if now.Sub(from) >= window {
			delete(st.rebalanceOpen, a)
			continue
		}
		if rd.notReady[a] == "" {
			out[a] = true
		}
	}
	return out
}

// heldChanged keeps holding and heldARP, the arp VIPs held here, equal
// to those of hold; they are replaced, never changed, when they differ.
func (m *Manager) heldChanged(hold map[netip.Addr]target) {
	st := &m.loop
	held := map[netip.Addr]bool{}
	for a, t := range hold {
		if t.mode == ModeARP {
			held[a] = true
		}
	}
	if maps.Equal(held, st.holding) {
		return
	}
	st.holding = held
	st.heldARP = slices.SortedFunc(maps.Keys(held), netip.Addr.Compare)
}
