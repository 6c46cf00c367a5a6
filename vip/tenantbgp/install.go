package tenantbgp

import (
	"net/netip"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// SpaceResync is how long a space's table (the host's, an attached
// tenant's namespace's) goes at most without an install that reads it,
// though none of its routes changed: a route removed by hand, or a
// namespace made again, gets its routes back within it. Between those, a
// space is installed only when its accepted routes changed or its last
// install failed. 30 s is the period at which every route is judged
// again (fullResync): a quiet attached tenant then costs a host one
// install (a thread's two setns and a dump of its namespace's routes)
// every 30 s, where every pass of any tenant's churn, up to ten a second,
// cost one.
const SpaceResync = 30 * time.Second

// spaceInstall is what the relay keeps of one space's last installs.
type spaceInstall struct {
	// failed are the routes the kernel refused at the last install (the
	// next pass installs the space again), and synced when it last read
	// the table in full (the first install, then every SpaceResync).
	failed map[netip.Prefix]error
	synced time.Time
	// as is the attached tenant of the space as it was at the last
	// install.
	as *pb.Tenant
}

// sameAttachment reports whether two versions of an attached tenant
// have the same attachment and networks: the namespace's own routes,
// and the links the relay's routes go through, stay as they were.
func sameAttachment(a, b *pb.Tenant) bool {
	return proto.Equal(a.GetAttachment(), b.GetAttachment()) && slices.Equal(a.GetNetworks(), b.GetNetworks())
}

// rereader is an Installer that trusts what it installed before, so
// that Set costs what changed (kernelRoutes): Reread converges the table
// after reading it.
type rereader interface {
	Reread(routes map[netip.Prefix]netip.Addr) map[netip.Prefix]error
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

// spaced is a prefix in a space.
type spaced struct {
	space  string
	prefix netip.Prefix
}

// install converges the spaces that need it and builds again the lists
// of the tenants whose routes or installs changed (ch, to which it adds
// the tenants whose routes the kernel refused or took anew), and reports
// the new drops. A space is installed when the accepted routes of its
// sessions changed, when its last install failed, when it is new, when
// its tenant's attachment or networks changed (the attachment converged
// anew may have taken routes with a link), and SpaceResync after it last
// read its table; the others are left alone, so that a tenant's churn
// costs the install of its own space (the namespace of an attached
// tenant, the host's table for the others). The time an install takes is
// charged to its space's tenant; the host's table's to the tenants whose
// changes or refused routes (the retry) made it, shared, and on a resync
// alone to the tenants whose routes it holds, by their count. It reports
// whether the host's table was installed or its routes changed (for
// reannounce).
func (r *Relay) install(w *world, ch judgedChanges, now time.Time) bool {
	want := map[string]bool{"": true}
	for _, name := range w.attached {
		if r.cfg.Attachments != nil || r.cfg.SpaceRoutes != nil {
			want[name] = true
		}
	}
	bySpace, byTenant := map[string][]netip.Addr{}, map[string][]netip.Addr{}
	for _, a := range sortedAddrs(r.judged) {
		pr := r.judged[a]
		bySpace[pr.space] = append(bySpace[pr.space], a)
		byTenant[pr.tenant] = append(byTenant[pr.tenant], a)
	}
	spent := map[string]time.Duration{}
	for _, space := range sortedKeys(r.installs) {
		if want[space] {
			continue
		}
		// No longer attached here, or gone: its routes leave the
		// namespace (if it is still there).
		start := time.Now()
		if in := r.spaces[space]; in != nil {
			_ = in.Close()
			delete(r.spaces, space)
		}
		delete(r.installs, space)
		spent[space] += time.Since(start)
	}
	host := len(ch.spaces[""]) > 0
	for _, space := range sortedKeys(want) {
		st := r.installs[space]
		resync := st == nil || now.Sub(st.synced) >= r.cfg.SpaceResync
		moved := st != nil && space != "" && !sameAttachment(st.as, w.attachedAs[space])
		if !resync && !moved && len(st.failed) == 0 && len(ch.spaces[space]) == 0 {
			continue
		}
		start := time.Now()
		routes, counts := r.spaceRoutesWanted(bySpace[space])
		in := r.cfg.Routes
		if space != "" {
			in = r.spaceRoutes(space)
		}
		var failed map[netip.Prefix]error
		if rr, ok := in.(rereader); ok && resync {
			failed = rr.Reread(routes)
		} else {
			failed = in.Set(routes)
		}
		if st == nil {
			st = &spaceInstall{}
			r.installs[space] = st
		}
		prev := st.failed
		st.failed, st.as = failed, w.attachedAs[space]
		if resync {
			st.synced = now
		}
		// The tenants of the routes the kernel refused this time or the
		// last list them anew; the retry is the latter's.
		var retried map[string]bool
		if len(prev) > 0 || len(failed) > 0 {
			for tenant := range r.ownersOf(bySpace[space], prev, failed) {
				ch.listed(tenant)
			}
			retried = r.ownersOf(bySpace[space], prev)
		}
		d := time.Since(start)
		if space != "" {
			spent[space] += d
			continue
		}
		host = true
		r.failed = failed
		causes := map[string]bool{}
		for tenant := range ch.spaces[""] {
			causes[tenant] = true
		}
		for tenant := range retried {
			causes[tenant] = true
		}
		for tenant, share := range hostShares(d, causes, counts) {
			spent[tenant] += share
		}
	}
	for tenant := range r.lists {
		if _, ok := w.tenants[tenant]; !ok {
			delete(r.lists, tenant)
			delete(r.dropped, tenant)
		}
	}
	for tenant := range ch.tenants {
		if _, ok := w.tenants[tenant]; !ok {
			continue
		}
		start := time.Now()
		r.buildLists(tenant, byTenant[tenant], want)
		spent[tenant] += time.Since(start)
	}
	r.charge(spent)
	return host
}

// spaceRoutesWanted is the routes the sessions (of one space) have
// accepted, and how many each tenant has among them. Several speakers
// of the tenant announce one prefix: the lowest next hop carries it, on
// every host alike.
func (r *Relay) spaceRoutesWanted(sessions []netip.Addr) (map[netip.Prefix]netip.Addr, map[string]int) {
	routes, counts := map[netip.Prefix]netip.Addr{}, map[string]int{}
	for _, a := range sessions {
		pr := r.judged[a]
		for _, j := range pr.routes {
			if j.reason != "" {
				continue
			}
			cur, ok := routes[j.prefix]
			if !ok {
				counts[pr.tenant]++
			}
			if !ok || j.nh.Less(cur) {
				routes[j.prefix] = j.nh
			}
		}
	}
	return routes, counts
}

// ownersOf are the tenants of the sessions with an accepted route to a
// prefix of either set.
func (r *Relay) ownersOf(sessions []netip.Addr, sets ...map[netip.Prefix]error) map[string]bool {
	out := map[string]bool{}
	for _, a := range sessions {
		pr := r.judged[a]
		for _, set := range sets {
			for p := range set {
				if j := pr.routes[p]; j != nil && j.reason == "" {
					out[pr.tenant] = true
				}
			}
		}
	}
	return out
}

// hostShares splits d, the time an install of the host's table took,
// between the tenants that caused it, evenly; an install no tenant
// caused (the resync) between the tenants whose routes it holds, by
// their count of them, and none when it holds none.
func hostShares(d time.Duration, causes map[string]bool, counts map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	if len(causes) > 0 {
		for tenant := range causes {
			out[tenant] = d / time.Duration(len(causes))
		}
		return out
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	for tenant, n := range counts {
		if n > 0 {
			out[tenant] = d * time.Duration(n) / time.Duration(total)
		}
	}
	return out
}

// buildLists builds tenant's lists from its sessions and reports its new
// drops.
func (r *Relay) buildLists(tenant string, sessions []netip.Addr, want map[string]bool) {
	carrier := map[spaced]*judged{}
	for _, a := range sessions {
		pr := r.judged[a]
		if !want[pr.space] {
			continue
		}
		for _, j := range pr.routes {
			if j.reason != "" {
				continue
			}
			k := spaced{pr.space, j.prefix}
			if cur, ok := carrier[k]; !ok || j.nh.Less(cur.nh) {
				carrier[k] = j
			}
		}
	}
	var acc, drop []routeRef
	for _, a := range sessions {
		pr := r.judged[a]
		speaker := r.sessions[a].key
		var failed map[netip.Prefix]error
		if st := r.installs[pr.space]; st != nil {
			failed = st.failed
		}
		for _, j := range pr.routes {
			switch {
			case j.reason != "":
				drop = append(drop, routeRef{peer: a, speaker: speaker, j: j, why: j.reason})
			case carrier[spaced{pr.space, j.prefix}] != j:
				// another speaker of the tenant carries it
			case failed[j.prefix] != nil:
				drop = append(drop, routeRef{peer: a, speaker: speaker, j: j, why: ReasonInstallFailed + ": " + failed[j.prefix].Error()})
			default:
				acc = append(acc, routeRef{peer: a, speaker: speaker, j: j})
			}
		}
	}
	l := &routeLists{}
	l.accepted, l.nAccepted = listed(acc)
	l.dropped, l.nDropped = listed(drop)
	r.lists[tenant] = l
	r.reportDrops(tenant, drop)
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
