package vip

import (
	"maps"
	"net/netip"
	"sync/atomic"
)

// servingState is what the loop last told the serving watch: the VIPs
// some host holds or announces, and the view it read that from.
type servingState struct {
	watch atomic.Pointer[func(map[netip.Addr]bool)]
	sig   string
	last  map[netip.Addr]bool
}

// SetServingWatch has the loop call f, from its own goroutine, with the
// VIPs that some host holds (arp) or announces or binds (bgp, static) as
// far as this host knows: itself, and the live peers by their last
// heartbeats (an arp VIP held by a peer that lists its holdings; a bgp or
// static VIP of a live, eligible peer that does not report it not ready).
// f is called once the loop first decided and then on every change; it
// must not block and must not keep the map, which is never changed after
// the call. Call it before Run.
func (m *Manager) SetServingWatch(f func(map[netip.Addr]bool)) {
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
	sig := signature(v, st.peers)
	if !recordsChanged && sig == m.serving.sig && m.serving.last != nil {
		return
	}
	m.serving.sig = sig
	out := make(map[netip.Addr]bool, len(st.records))
	for a, r := range st.records {
		if servedSomewhere(a, r, v, st.peers) {
			out[a] = true
		}
	}
	if m.serving.last != nil && maps.Equal(out, m.serving.last) {
		return
	}
	m.serving.last = out
	(*f)(out)
}

// servedSomewhere is the serving rule of one VIP.
func servedSomewhere(a netip.Addr, r *record, v view, peers map[string]*peerState) bool {
	if r.held {
		return true
	}
	for id, h := range v.Alive {
		if r.spec.Mode != ModeARP {
			if h.Eligible && !h.NotReadyAll && !h.NotReady[a] {
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
