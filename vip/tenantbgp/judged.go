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
// tenant's churn costs the judging of its own changes.
type peerRoutes struct {
	routes map[netip.Prefix]*judged
}

// judgeSessions takes what changed in each session's routes and judges
// it, judges every route again when the world or the host's addresses
// changed or every fullResync, and reports whether anything changed. The
// time each session takes is charged to its tenant.
func (r *Relay) judgeSessions(w *world, host []netip.Addr, now time.Time) bool {
	changes := r.takeChanges(r.peers)
	full := w != r.judgedWorld || !slices.Equal(host, r.judgedHost) || now.Sub(r.lastFull) >= fullResync
	if full {
		r.judgedWorld, r.judgedHost, r.lastFull = w, host, now
	}
	changed := false
	for a := range r.judged {
		if _, ok := r.peers[a]; !ok {
			delete(r.judged, a)
			changed = true
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
		tenant := r.tenantOf(a)
		t := w.tenants[tenant]
		judge := func(p netip.Prefix, nh netip.Addr) *judged {
			j := &judged{prefix: p, nh: nh, reason: ReasonUnknownPeer}
			if t != nil {
				j.reason = w.judge(t, p, nh, host)
			}
			return j
		}
		if pr == nil || c.whole {
			pr = &peerRoutes{routes: make(map[netip.Prefix]*judged, len(c.routes))}
			r.judged[a] = pr
			changed = true
		}
		for _, p := range c.gone {
			delete(pr.routes, p)
		}
		for p, nh := range c.routes {
			pr.routes[p] = judge(p, nh)
		}
		if full {
			for p, j := range pr.routes {
				if why := judge(p, j.nh).reason; why != j.reason {
					j.reason = why
					changed = true
				}
			}
		}
		spent[tenant] += time.Since(start)
		if ok {
			changed = true
		}
	}
	if len(spent) > 0 {
		r.mu.Lock()
		for tenant, d := range spent {
			r.judgeTime[tenant] += d
		}
		r.mu.Unlock()
	}
	return changed
}

// routeRef is one route of the lists a pass builds: route j of the
// session gobgp knows as peer, whose speaker is speaker.
type routeRef struct {
	peer    netip.Addr
	speaker peerKey
	j       *judged
	why     string // the reason it is listed as dropped
}

// routeLists are a tenant's accepted and dropped routes as observed (the
// first maxListed of each) with whole counts.
type routeLists struct {
	accepted, dropped   []*pb.TenantRoute
	nAccepted, nDropped uint32
}

// install sets each table's routes to those the sessions' judged routes
// allow (the host's, and each attached tenant's namespace's), builds
// each tenant's lists and reports the new drops. It reports whether the
// kernel refused any route (the next pass then runs it again).
func (r *Relay) install(w *world) bool {
	// want holds the routes of each space ("" the host's table).
	want := map[string]map[netip.Prefix]netip.Addr{"": {}}
	for _, name := range w.attached {
		if r.cfg.Attachments != nil || r.cfg.SpaceRoutes != nil {
			want[name] = map[netip.Prefix]netip.Addr{}
		}
	}
	type spaced struct {
		space  string
		prefix netip.Prefix
	}
	from := map[spaced]routeRef{}
	peers := sortedAddrs(r.judged)
	for _, a := range peers {
		s := r.sessions[a]
		if s == nil || want[s.key.space] == nil {
			continue
		}
		in := want[s.key.space]
		for _, j := range r.judged[a].routes {
			if j.reason != "" {
				continue
			}
			// Several speakers of the tenant announce one prefix: the
			// lowest next hop carries it, on every host alike.
			if cur, ok := in[j.prefix]; !ok || j.nh.Less(cur) {
				in[j.prefix] = j.nh
				from[spaced{s.key.space, j.prefix}] = routeRef{peer: a, j: j}
			}
		}
	}
	failed := map[string]map[netip.Prefix]error{}
	retry := false
	for space, routes := range want {
		in := r.cfg.Routes
		if space != "" {
			in = r.spaceRoutes(space)
		}
		failed[space] = in.Set(routes)
		retry = retry || len(failed[space]) > 0
	}
	for space, in := range r.spaces {
		if _, ok := want[space]; !ok {
			// No longer attached here, or gone: its routes leave the
			// namespace (if it is still there).
			_ = in.Close()
			delete(r.spaces, space)
		}
	}
	r.failed = failed[""]
	acc, drop := map[string][]routeRef{}, map[string][]routeRef{}
	for _, a := range peers {
		s := r.sessions[a]
		if s == nil {
			continue
		}
		tenant, space := s.tenant, s.key.space
		for _, j := range r.judged[a].routes {
			switch {
			case j.reason != "":
				drop[tenant] = append(drop[tenant], routeRef{peer: a, j: j, why: j.reason})
			case from[spaced{space, j.prefix}].j != j:
				// another speaker of the tenant carries it
			case failed[space][j.prefix] != nil:
				drop[tenant] = append(drop[tenant], routeRef{peer: a, j: j, why: ReasonInstallFailed + ": " + failed[space][j.prefix].Error()})
			default:
				acc[tenant] = append(acc[tenant], routeRef{peer: a, j: j})
			}
		}
	}
	for _, rs := range [](map[string][]routeRef){acc, drop} {
		for _, list := range rs {
			for i := range list {
				list[i].speaker = r.sessions[list[i].peer].key
			}
		}
	}
	lists := map[string]*routeLists{}
	for name := range w.tenants {
		lists[name] = &routeLists{}
	}
	for tenant, rs := range acc {
		if l := lists[tenant]; l != nil {
			l.accepted, l.nAccepted = listed(rs)
		}
	}
	var drops []routeRef
	for tenant, rs := range drop {
		if l := lists[tenant]; l != nil {
			l.dropped, l.nDropped = listed(rs)
		}
		drops = append(drops, rs...)
	}
	r.lists = lists
	r.reportDrops(drops)
	return retry
}

// spaceRoutes is the installer of an attached tenant's namespace.
func (r *Relay) spaceRoutes(tenant string) Installer {
	in := r.spaces[tenant]
	if in == nil {
		if r.cfg.SpaceRoutes != nil {
			in = r.cfg.SpaceRoutes(tenant)
		} else {
			in = nsRoutes{att: r.cfg.Attachments, tenant: tenant}
		}
		r.spaces[tenant] = in
	}
	return in
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
	tenant string
	peer   peerKey
	prefix netip.Prefix
	reason string
}

// reportDrops sends an event for each drop not reported in the previous
// install, at most maxEvents per tenant and pass, then one that counts
// the rest.
func (r *Relay) reportDrops(drops []routeRef) {
	now := make(map[dropKey]bool, len(drops))
	sent, more := map[string]int{}, map[string]int{}
	for _, d := range drops {
		tenant := r.tenantOf(d.peer)
		key := dropKey{tenant: tenant, peer: d.speaker, prefix: d.j.prefix, reason: d.why}
		now[key] = true
		if r.dropped[key] {
			continue
		}
		if sent[tenant] >= maxEvents {
			more[tenant]++
			continue
		}
		sent[tenant]++
		r.log.Warn("tenant route dropped", "tenant", tenant, "peer", d.speaker, "prefix", d.j.prefix, "nextHop", addrString(d.j.nh), "reason", d.why)
		r.event(tenant, fmt.Sprintf("route %s via %s from %s dropped: %s", d.j.prefix, addrString(d.j.nh), d.speaker, d.why))
	}
	for tenant, n := range more {
		r.event(tenant, fmt.Sprintf("%d more routes from the tenant's speakers dropped (explain tenant %s lists them)", n, tenant))
	}
	r.dropped = now
}
