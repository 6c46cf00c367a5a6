package tenantbgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// fullResync is how often a pass judges every session's routes again
// even though none changed (a safety net: a change is otherwise seen
// through gobgp's events).
const fullResync = 30 * time.Second

// judged is one route a session holds, with why it is dropped ("" when
// it may be installed).
type judged struct {
	prefix netip.Prefix
	nh     netip.Addr
	reason string
}

// peerRoutes are one session's routes, judged, kept from pass to pass: a
// pass judges again only the routes that changed since (rib.go), and all
// of a session's routes only when the world or the host's addresses
// changed, so a large table that does not change costs nothing, and one
// tenant's churn costs the judging of its own changes. tenant and space
// are the session's when they were judged.
type peerRoutes struct {
	routes        map[netip.Prefix]*judged
	tenant, space string
}

// judgedChanges is what a pass's judging changed: the tenants whose
// routes (accepted or dropped) changed, whose lists are built again, and
// per space the tenants whose accepted routes in it changed, with how
// many of them changed: the install of the space is theirs, shared by
// those counts (install.go).
type judgedChanges struct {
	tenants map[string]bool
	spaces  map[string]map[string]int
}

func newJudgedChanges() judgedChanges {
	return judgedChanges{tenants: map[string]bool{}, spaces: map[string]map[string]int{}}
}

// listed notes that tenant's routes changed, and accepted that n of its
// accepted routes in space did (one that was accepted, is, or both).
func (c judgedChanges) listed(tenant string) { c.tenants[tenant] = true }

func (c judgedChanges) accepted(space, tenant string, n int) {
	c.tenants[tenant] = true
	if n <= 0 {
		return
	}
	if c.spaces[space] == nil {
		c.spaces[space] = map[string]int{}
	}
	c.spaces[space][tenant] += n
}

// gone notes the routes of pr leaving.
func (c judgedChanges) gone(pr *peerRoutes) {
	c.listed(pr.tenant)
	n := 0
	for _, j := range pr.routes {
		if j.reason == "" {
			n++
		}
	}
	c.accepted(pr.space, pr.tenant, n)
}

// judgeSessions takes what changed in each session's routes and judges
// it, judges every route again when the world or the host's addresses
// changed or every fullResync, and returns what changed. The time each
// session takes is charged to its tenant.
func (r *Relay) judgeSessions(w *world, host []netip.Addr, now time.Time) judgedChanges {
	changes := r.takeChanges(r.peers)
	full := w != r.judgedWorld || !slices.Equal(host, r.judgedHost) || now.Sub(r.lastFull) >= fullResync
	if full {
		r.judgedWorld, r.judgedHost, r.lastFull = w, host, now
	}
	ch := newJudgedChanges()
	for a, pr := range r.judged {
		if _, ok := r.peers[a]; !ok {
			delete(r.judged, a)
			ch.gone(pr)
		}
	}
	spent := map[string]time.Duration{}
	for a := range r.peers {
		c, ok := changes[a]
		pr := r.judged[a]
		if !ok && !full && pr != nil {
			continue
		}
		start := time.Now()
		s := r.sessions[a]
		tenant, space := s.tenant, s.key.space
		t := w.tenants[tenant]
		judge := func(p netip.Prefix, nh netip.Addr) *judged {
			j := &judged{prefix: p, nh: nh, reason: ReasonUnknownPeer}
			if t != nil {
				j.reason = w.judge(t, p, nh, host)
			}
			return j
		}
		if pr == nil || c.whole || pr.tenant != tenant || pr.space != space {
			if pr != nil {
				ch.gone(pr)
			}
			pr = &peerRoutes{routes: make(map[netip.Prefix]*judged, len(c.routes)), tenant: tenant, space: space}
			r.judged[a] = pr
			ch.listed(tenant)
		}
		for _, p := range c.gone {
			if old := pr.routes[p]; old != nil {
				delete(pr.routes, p)
				ch.listed(tenant)
				if old.reason == "" {
					ch.accepted(space, tenant, 1)
				}
			}
		}
		for p, nh := range c.routes {
			j := judge(p, nh)
			old := pr.routes[p]
			pr.routes[p] = j
			ch.listed(tenant)
			if j.reason == "" || (old != nil && old.reason == "") {
				ch.accepted(space, tenant, 1)
			}
		}
		if full {
			for p, j := range pr.routes {
				if why := judge(p, j.nh).reason; why != j.reason {
					if why == "" || j.reason == "" {
						ch.accepted(space, tenant, 1)
					}
					j.reason = why
					ch.listed(tenant)
				}
			}
		}
		spent[tenant] += time.Since(start)
	}
	r.charge(spent)
	return ch
}

// charge adds the time spent on each tenant's routes to its count.
func (r *Relay) charge(spent map[string]time.Duration) {
	if len(spent) == 0 {
		return
	}
	r.mu.Lock()
	for tenant, d := range spent {
		r.judgeTime[tenant] += d
	}
	r.mu.Unlock()
}

// listed returns the first maxListed of rs by prefix and peer as
// observed, with the whole count. It keeps the first maxListed in order
// as it goes rather than sorting all of rs.
func listed(rs []routeRef) ([]*pb.TenantRoute, uint32) {
	less := func(x, y routeRef) int {
		if c := cmpPrefix(x.j.prefix, y.j.prefix); c != 0 {
			return c
		}
		return x.speaker.addr.Compare(y.speaker.addr)
	}
	first := make([]routeRef, 0, min(len(rs), maxListed)+1)
	for _, rf := range rs {
		if len(first) == maxListed && less(rf, first[maxListed-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(first, rf, less)
		first = slices.Insert(first, i, rf)
		if len(first) > maxListed {
			first = first[:maxListed]
		}
	}
	out := make([]*pb.TenantRoute, 0, len(first))
	for _, rf := range first {
		out = append(out, rf.route())
	}
	return out, uint32(len(rs))
}

func (rf routeRef) route() *pb.TenantRoute {
	return &pb.TenantRoute{Prefix: rf.j.prefix.String(), NextHop: addrString(rf.j.nh), Peer: rf.speaker.addr.String(), Reason: rf.why}
}

func cmpPrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// dropKey is a drop as reported.
type dropKey struct {
	peer   peerKey
	prefix netip.Prefix
	reason string
}

// reportDrops sends an event for each of tenant's drops not reported when
// its lists were last built, at most maxEvents, then one that counts the
// rest.
func (r *Relay) reportDrops(tenant string, drops []routeRef) {
	now := make(map[dropKey]bool, len(drops))
	sent, more := 0, 0
	was := r.dropped[tenant]
	for _, d := range drops {
		key := dropKey{peer: d.speaker, prefix: d.j.prefix, reason: d.why}
		now[key] = true
		if was[key] {
			continue
		}
		if sent >= maxEvents {
			more++
			continue
		}
		sent++
		r.log.Warn("tenant route dropped", "tenant", tenant, "peer", d.speaker, "prefix", d.j.prefix, "nextHop", addrString(d.j.nh), "reason", d.why)
		r.event(tenant, fmt.Sprintf("route %s via %s from %s dropped: %s", d.j.prefix, addrString(d.j.nh), d.speaker, d.why))
	}
	if more > 0 {
		r.event(tenant, fmt.Sprintf("%d more routes from the tenant's speakers dropped (explain tenant %s lists them)", more, tenant))
	}
	if len(now) == 0 {
		delete(r.dropped, tenant)
		return
	}
	r.dropped[tenant] = now
}
