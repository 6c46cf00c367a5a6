package tenantbgp

import (
	"fmt"
	"net/netip"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// rib mirrors one session's Adj-RIB-In, kept from gobgp's events (an
// event per UPDATE message, after gobgp took it in), so that a pass reads
// only what changed and the prefix bound costs O(1) a route: gobgp's own
// prefix limit counts the whole Adj-RIB-In on every UPDATE, which makes a
// table sent one route a message cost the square of its size (20,000
// routes did not arrive in 90 s).
type rib struct {
	limit int
	// total counts the routes of all the tenant's sessions on this host,
	// shared by their mirrors; overTotal says the session was closed for
	// going over it rather than over limit.
	total     *tenantTotal
	overTotal bool
	routes    map[netip.Prefix]netip.Addr
	// changed are the prefixes changed since the last pass took them,
	// all that every route did (the session went down).
	changed map[netip.Prefix]struct{}
	all     bool
	// closedAt is when the session was closed for going over limit
	// (zero while it is not).
	closedAt time.Time
	// updates counts the UPDATE messages of the session's events into
	// bucket, and changes the route changes they carry into changeBucket
	// (rate.go), both at rate a second, in bursts of burst messages and
	// changeBurst changes; rateClosedAt is when the session was closed
	// for going over (zero while it is not; the pass then reports it and
	// dials it again).
	updates, changes         uint64
	bucket, changeBucket     *updateBucket
	rate, burst, changeBurst float64
	rateClosedAt             time.Time
}

// tenantTotal is the count of the routes all of a tenant's sessions
// hold on this host, and its bound (bgp.maxPrefixesTotal).
type tenantTotal struct {
	limit, n int
}

func newRIB(limit uint32, total *tenantTotal) *rib {
	return &rib{limit: int(limit), total: total, routes: map[netip.Prefix]netip.Addr{}, changed: map[netip.Prefix]struct{}{}, all: true}
}

// reset forgets the session's routes (they leave the tenant's total).
func (rb *rib) reset() {
	rb.total.n -= len(rb.routes)
	clear(rb.routes)
	clear(rb.changed)
	rb.all = true
}

// onPaths takes the paths of one UPDATE message into the sessions'
// mirrors, and closes a session that goes over its bound.
func (r *Relay) onPaths(ps []*apiutil.Path) {
	var over, fast []netip.Addr
	var counted netip.Addr
	now := time.Now()
	r.dmu.Lock()
	for i, p := range ps {
		a := p.PeerAddress.Unmap()
		rb := r.ribs[a]
		if rb == nil || !rb.closedAt.IsZero() || !rb.rateClosedAt.IsZero() {
			continue
		}
		if a != counted {
			// The paths of one UPDATE message, here as gobgp's events
			// come rather than at the next pass, so a flood is cut at its
			// burst: one from the session's bucket of messages, and one
			// a prefix announced or withdrawn (an End-of-RIB is a path
			// too) from its bucket of route changes.
			counted = a
			n := 0
			for _, q := range ps[i:] {
				if q.PeerAddress.Unmap() != a {
					break
				}
				n++
			}
			rb.updates++
			rb.changes += uint64(n)
			if rb.bucket == nil {
				rb.bucket = newBucket(0, now, rb.burst)
			}
			if rb.changeBucket == nil {
				rb.changeBucket = newBucket(0, now, rb.changeBurst)
			}
			overMsgs := rb.bucket.take(rb.updates, now, rb.rate, rb.burst)
			if rb.changeBucket.take(rb.changes, now, rb.rate, rb.changeBurst) || overMsgs {
				rb.reset()
				rb.rateClosedAt = now
				fast = append(fast, a)
				continue
			}
		}
		pfx, ok := prefixOf(p.Nlri)
		if !ok {
			continue
		}
		_, held := rb.routes[pfx]
		if p.Withdrawal {
			if held {
				delete(rb.routes, pfx)
				rb.total.n--
			}
		} else {
			rb.routes[pfx] = nextHop(p)
			if !held {
				rb.total.n++
			}
		}
		if !rb.all {
			rb.changed[pfx] = struct{}{}
		}
		if len(rb.routes) > rb.limit || rb.total.n > rb.total.limit {
			rb.overTotal = len(rb.routes) <= rb.limit
			rb.reset()
			rb.closedAt = time.Now()
			over = append(over, a)
		}
	}
	r.dmu.Unlock()
	for _, a := range over {
		r.closeOverLimit(a, "")
	}
	for _, a := range fast {
		r.closeOverRate(a)
	}
	r.poke()
}

// onPeer forgets the routes of a session that is no longer established
// (gobgp drops its Adj-RIB-In then).
func (r *Relay) onPeer(e *apiutil.WatchEventMessage_PeerEvent) {
	if e.Type == apiutil.PEER_EVENT_STATE && e.Peer.State.SessionState != bgp.BGP_FSM_ESTABLISHED {
		r.dmu.Lock()
		if rb := r.ribs[e.Peer.Conf.NeighborAddress.Unmap()]; rb != nil {
			rb.reset()
		}
		r.dmu.Unlock()
	}
	r.poke()
}

// closeOverLimit closes a's session for holding more than its bound: gobgp
// sends a Cease and drops the session's routes. held is what gobgp
// counted, when it was the pass that found it ("" when the mirror did).
func (r *Relay) closeOverLimit(a netip.Addr, held string) {
	comm := "prefix limit"
	if err := r.srv.DisablePeer(r.ctx, &gobgpapi.DisablePeerRequest{Address: a.String(), Communication: comm}); err != nil && r.ctx.Err() == nil {
		r.log.Warn("cannot close a tenant BGP session over its prefix bound", "peer", a, "held", held, "err", err)
	}
}

// takeChanges returns, per session of peers, what changed in its routes
// since the last call: the whole table after the session went down or
// came new, else the routes announced or withdrawn.
func (r *Relay) takeChanges(peers map[netip.Addr]string) map[netip.Addr]ribChange {
	out := map[netip.Addr]ribChange{}
	r.dmu.Lock()
	defer r.dmu.Unlock()
	for a := range peers {
		rb := r.ribs[a]
		if rb == nil {
			continue
		}
		if rb.all {
			c := ribChange{whole: true, routes: make(map[netip.Prefix]netip.Addr, len(rb.routes))}
			for p, nh := range rb.routes {
				c.routes[p] = nh
			}
			out[a] = c
		} else if len(rb.changed) > 0 {
			c := ribChange{routes: make(map[netip.Prefix]netip.Addr, len(rb.changed))}
			for p := range rb.changed {
				if nh, ok := rb.routes[p]; ok {
					c.routes[p] = nh
				} else {
					c.gone = append(c.gone, p)
				}
			}
			out[a] = c
		}
		rb.all = false
		clear(rb.changed)
	}
	return out
}

// ribChange is what changed in one session's routes: the whole table, or
// the routes changed (gone lists those withdrawn).
type ribChange struct {
	whole  bool
	routes map[netip.Prefix]netip.Addr
	gone   []netip.Prefix
}

// prefixLimited reports, for a session closed over its bound, the state
// to show, and dials it again LimitHold after it was closed.
func (r *Relay) prefixLimited(a netip.Addr, now time.Time) (state, reason string, closedAt time.Time) {
	r.dmu.Lock()
	rb := r.ribs[a]
	if rb == nil || rb.closedAt.IsZero() {
		r.dmu.Unlock()
		return "", "", time.Time{}
	}
	closedAt, limit, overTotal, total := rb.closedAt, rb.limit, rb.overTotal, rb.total.limit
	r.dmu.Unlock()
	reason = fmt.Sprintf("announced more than maxPrefixes (%d); dialled again %s after it was closed", limit, r.cfg.LimitHold)
	if overTotal {
		reason = fmt.Sprintf("took the tenant's sessions on this host over maxPrefixesTotal (%d routes together); dialled again %s after it was closed", total, r.cfg.LimitHold)
	}
	if now.Sub(closedAt) >= r.cfg.LimitHold {
		if err := r.srv.EnablePeer(r.ctx, &gobgpapi.EnablePeerRequest{Address: a.String()}); err == nil {
			r.dmu.Lock()
			rb.closedAt, rb.overTotal = time.Time{}, false
			rb.reset()
			r.dmu.Unlock()
			return "", "", time.Time{}
		}
	}
	return "prefix-limit", reason, closedAt
}

// overHeld closes a session whose Adj-RIB-In, as gobgp counts it, holds
// more than its bound though the mirror does not (routes gobgp rejected
// before the events, such as those with an AS path through this host's
// ASN more than 255 times).
func (r *Relay) overHeld(a netip.Addr, p *gobgpapi.Peer) {
	var held uint64
	for _, af := range p.GetAfiSafis() {
		held += af.GetState().GetReceived()
	}
	r.dmu.Lock()
	rb := r.ribs[a]
	over := rb != nil && rb.closedAt.IsZero() && held > uint64(rb.limit)
	if over {
		rb.overTotal = false
		rb.reset()
		rb.closedAt = time.Now()
	}
	r.dmu.Unlock()
	if over {
		r.closeOverLimit(a, fmt.Sprint(held))
	}
}
