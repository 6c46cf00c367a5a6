package vip

import (
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// servingState is what the loop last told the serving watch: the VIPs
// some host holds or announces, for which tenants, and the view it read
// that from.
type servingState struct {
	watch atomic.Pointer[func(map[netip.Addr][]string)]
	sig   string
	last  map[netip.Addr][]string
	// latestSince is the latest revision of the records' tenantsSince: a
	// peer's revision that reaches one of them (servedFor) is below it
	// until then.
	latestSince uint64
}

// SetServingWatch has the loop call f, from its own goroutine, with the
// VIPs that some host holds (arp) or announces or binds (bgp, static) as
// far as this host knows: itself, and the live peers by their last
// heartbeats (an arp VIP held by a peer that lists its holdings; a bgp VIP
// of a live, eligible peer whose not-ready list is known whole and does
// not name it; a static VIP of a live, eligible peer that does not report
// it not ready).
// Each VIP maps to the tenants it is carried for: none listed for an
// address of the hosts' own network (every tenant that uses it), else
// those of the tenants whose attachments share it (vipSpec.Spaces) that
// some host carries it for, sorted (servedFor); a VIP carried for none
// is left out. f is called once the loop first decided and then on
// every change; it must not block and must not keep the map, which is
// never changed after the call. Call it before Run.
func (m *Manager) SetServingWatch(f func(map[netip.Addr][]string)) {
	if m == nil {
		return
	}
	m.serving.watch.Store(&f)
}

// publishServing recomputes the serving set when a record changed or the
// view of the peers did, and calls the watch when it differs.
func (m *Manager) publishServing(v view, recordsChanged bool) {
	f := m.serving.watch.Load()
	if f == nil {
		return
	}
	st := &m.loop
	sig := servingSignature(v, st.peers, m.serving.latestSince)
	if !recordsChanged && sig == m.serving.sig && m.serving.last != nil {
		return
	}
	m.serving.sig = sig
	out := make(map[netip.Addr][]string, len(st.records))
	for a, r := range st.records {
		if tenants, ok := servedFor(a, r, v, st.peers); ok {
			out[a] = tenants
		}
	}
	if m.serving.last != nil && maps.EqualFunc(out, m.serving.last, slices.Equal) {
		return
	}
	m.serving.last = out
	(*f)(out)
}

// servingSignature is the signature of the decisions with what only the
// serving rule reads of the live peers: the versions of their tenant
// sets and of the bgp VIPs of their not-ready lists (ServingVersion), and
// their revisions up to since (serving.latestSince), which
// change while a peer's state catches up with one that gave an address a
// tenant here, and no more once it has.
func servingSignature(v view, peers map[string]*peerState, since uint64) string {
	var b strings.Builder
	b.WriteString(signature(v, peers))
	for _, id := range slices.Sorted(maps.Keys(v.Alive)) {
		p := peers[id]
		if p == nil {
			continue
		}
		if p.ServingVersion > 0 {
			b.WriteString("|" + id + ":" + strconv.FormatUint(p.ServingVersion, 10))
		}
		if p.Revision < since {
			b.WriteString("|" + id + "@" + strconv.FormatUint(p.Revision, 10))
		}
	}
	return b.String()
}

// servedFor is the serving rule of one VIP: whether some host carries it
// (ok), and for which tenants. An address of the hosts' own network
// (no Spaces) is carried for every tenant (nil) by this host when it holds
// it, by a live peer that says it holds it (arp), by a live eligible peer
// not reporting it not ready in a not-ready list known whole (bgp:
// bgpKnown) or not reporting it not ready (static). An address that the
// attachments of tenants share is carried for those of r.spec.Spaces
// that a host carries it for (sorted):
//
//   - this host: those it holds it for (record.unserved names the others);
//   - an arp peer that says it holds it: every one, unless the address is
//     in its partly ready list, or it shares it among several tenants and
//     is not ready for any address (its list did not fit): then those of
//     its tenant set;
//   - a bgp peer as above: every one of a single tenant; of several, those
//     of its tenant set, and every one when its heartbeats carry tenant
//     sets and none for the address;
//   - a static VIP is answered as one of the host's network: no host says
//     which tenants it binds it for, and its pool's interface decides
//     alone (readiness.why).
//
// A peer that sends a set for the address counts for the tenants of its
// set alone, also where this host's state gives the address a single
// tenant. A peer counts for those tenants alone that the address has
// had here since a revision no later than the one its heartbeats act on
// (record.tenantsSince): a state behind this host's may lack a tenant
// added since, and a peer that holds the address for every tenant of its
// state does not carry it for that one, though it lists it neither as
// partly ready nor in a set; a set from a state behind matches this
// host's list of tenants only by chance, or by a tenant's name chosen to
// match its 32-bit digest.
//
// A peer whose tenants of the address are not known (no tenant set where
// one is needed: it sends none, of an earlier version, or its list did
// not fit; a set made from another list of tenants: one of the two has
// not applied the latest committed entry; or, for a tenant, a state
// behind the one that gave the address that tenant here) carries it for
// none of them: a tenant's name is answered only with an address some
// host is known to carry for that tenant, and a lag of one entry costs
// the answer for as long as it lasts, where the other choice would
// answer it with an address that may reach another tenant's load
// balancer.
func servedFor(a netip.Addr, r *record, v view, peers map[string]*peerState) ([]string, bool) {
	spaces := r.spec.Spaces
	if len(spaces) == 0 || r.spec.Mode == ModeStatic {
		return nil, servedSomewhere(a, r, v, peers)
	}
	carried := make([]bool, len(spaces))
	// mark takes tenants in the order of spaces, as servedSpaces and
	// tenantSet.tenants give them, those that the address has had here
	// since revision or earlier.
	mark := func(tenants []string, revision uint64) {
		j := 0
		for i, t := range spaces {
			if j < len(tenants) && tenants[j] == t {
				carried[i] = carried[i] || i >= len(r.tenantsSince) || r.tenantsSince[i] <= revision
				j++
			}
		}
	}
	if r.held {
		mark(servedSpaces(spaces, r.unserved), math.MaxUint64)
	}
	for id, h := range v.Alive {
		p := peers[id]
		var set tenantSet
		var hasSet bool
		if p != nil && p.TenantsKnown {
			set, hasSet = p.Tenants[a]
		}
		switch {
		case r.spec.Mode == ModeARP && (p == nil || !p.HoldingKnown || !p.Holding[a]):
		case r.spec.Mode == ModeBGP && !(h.Eligible && !h.NotReadyAll && !h.NotReady[a] && bgpKnown(p)):
		case hasSet:
			// For some of the tenants of its state: those of its set,
			// when that state gives the address this host's tenants
			// (and, for a tenant, is not behind the one that gave it
			// here: their lists then match by chance, or by a name
			// chosen to match the digest).
			if tenants, ok := set.tenants(spaces); ok {
				mark(tenants, p.Revision)
			}
		case r.spec.Mode == ModeARP && h.Partly[a]:
			// For some, and it does not say which: not known.
		case p == nil:
		case len(spaces) == 1, r.spec.Mode == ModeARP && !h.NotReadyAll, r.spec.Mode == ModeBGP && p.TenantsKnown:
			// For every tenant of its state, which has those that this
			// host's has had since a revision it acts on; others not known.
			mark(spaces, p.Revision)
		}
	}
	var out []string
	for i, t := range spaces {
		if carried[i] {
			out = append(out, t)
		}
	}
	return out, len(out) > 0
}

// sinceFor returns, for each tenant of spaces (sorted), the revision from
// which an address has had it: that of old (sorted, its revisions in
// oldSince) for a tenant it had, revision for one it did not.
func sinceFor(spaces, old []string, oldSince []uint64, revision uint64) []uint64 {
	out := make([]uint64, len(spaces))
	for i, t := range spaces {
		out[i] = revision
		if j, ok := slices.BinarySearch(old, t); ok && j < len(oldSince) {
			out[i] = oldSince[j]
		}
	}
	return out
}

// bgpKnown reports whether the last heartbeat of peer p listed the bgp
// VIPs it is not ready for: it carried the tenant sets, which a sender
// leaves out when those addresses do not fit in its not-ready list (a
// host of an earlier version sends no sets, and lists no bgp VIP). A peer
// whose list is not known whole is taken for announcing no bgp VIP, as
// one of them may be withdrawn there: a name is answered only with an
// address some host is known to announce.
func bgpKnown(p *peerState) bool {
	return p != nil && p.TenantsKnown
}

// servedSomewhere is the serving rule of a VIP of the hosts' own network.
func servedSomewhere(a netip.Addr, r *record, v view, peers map[string]*peerState) bool {
	if r.held {
		return true
	}
	for id, h := range v.Alive {
		if r.spec.Mode != ModeARP {
			if h.Eligible && !h.NotReadyAll && !h.NotReady[a] && (r.spec.Mode != ModeBGP || bgpKnown(peers[id])) {
				return true
			}
			continue
		}
		if p := peers[id]; p != nil && p.HoldingKnown && p.Holding[a] {
			return true
		}
	}
	return false
}
