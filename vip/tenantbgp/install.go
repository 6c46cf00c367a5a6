package tenantbgp

import (
	"maps"
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
	// the table in full (the first install, then every SpaceResync). err
	// is why the last read failed (the table could not be read, or the
	// namespace entered): each pass reads it again until one succeeds,
	// and only that one moves synced.
	failed map[netip.Prefix]error
	synced time.Time
	err    error
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
// that Set costs what changed (kernelRoutes), or one whose every install
// reads its table (nsRoutes): Reread converges the table after reading
// it, and returns an error, having changed nothing, when it could not
// read it.
type rereader interface {
	Reread(routes map[netip.Prefix]netip.Addr) (map[netip.Prefix]error, error)
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
// charged to its space's tenant. The host's table's is shared: the
// change (Set) between the tenants whose changed accepted routes or
// earlier refused routes (the retry) made it, by the count of those
// routes, and the resync (Reread), which reads the whole table, between
// the tenants whose routes it holds, by their count. It reports whether
// the host's table was installed or its routes changed (for reannounce).
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
		resync := st == nil || st.err != nil || now.Sub(st.synced) >= r.cfg.SpaceResync
		moved := st != nil && space != "" && !sameAttachment(st.as, w.attachedAs[space])
		if !resync && !moved && len(st.failed) == 0 && len(ch.spaces[space]) == 0 {
			continue
		}
		var prev map[netip.Prefix]error
		if st != nil {
			prev = st.failed
		}
		// The install is caused by the tenants whose accepted routes
		// changed and those whose routes the kernel refused at the last
		// one (the retry), by the count of those routes.
		causes := maps.Clone(ch.spaces[space])
		if causes == nil {
			causes = map[string]int{}
		}
		for tenant, n := range r.ownersOf(bySpace[space], prev) {
			causes[tenant] += n
		}
		start := time.Now()
		routes, counts := r.spaceRoutesWanted(bySpace[space])
		in := r.cfg.Routes
		if space != "" {
			in = r.spaceRoutes(space)
		}
		// The host's table is set first when tenants caused the install
		// and then reread, so that each part is charged to whom it is
		// for; a namespace is its one tenant's either way.
		rr, reread := in.(rereader)
		reread = reread && resync
		var failed map[netip.Prefix]error
		set, setTime := false, time.Duration(0)
		if !reread || (space == "" && len(causes) > 0) {
			failed, set = in.Set(routes), true
			setTime = time.Since(start)
		}
		var readErr error
		if reread {
			var got map[netip.Prefix]error
			if got, readErr = rr.Reread(routes); readErr == nil {
				failed = got
			} else if !set {
				failed = in.Set(routes)
			}
		}
		if st == nil {
			st = &spaceInstall{}
			r.installs[space] = st
		}
		st.failed, st.as = failed, w.attachedAs[space]
		switch {
		case readErr != nil:
			if st.err == nil || st.err.Error() != readErr.Error() {
				r.log.Warn("cannot read a table of tenant routes; it is read again at every pass until it is", "space", namespaceOf(space), "err", readErr)
			}
			st.err = readErr
		case resync:
			st.err, st.synced = nil, now
		}
		// The tenants of the routes the kernel refused this time or the
		// last list them anew.
		if len(prev) > 0 || len(failed) > 0 {
			for tenant := range r.ownersOf(bySpace[space], prev, failed) {
				ch.listed(tenant)
			}
		}
		d := time.Since(start)
		if space != "" {
			spent[space] += d
			continue
		}
		host = true
		r.failed = failed
		change, reading := d, time.Duration(0)
		if reread {
			change, reading = setTime, d-setTime
		}
		for tenant, share := range hostShares(change, causes, counts) {
			spent[tenant] += share
		}
		for tenant, share := range hostShares(reading, nil, counts) {
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
// prefix of either set, with how many of those routes each has.
func (r *Relay) ownersOf(sessions []netip.Addr, sets ...map[netip.Prefix]error) map[string]int {
	out := map[string]int{}
	for _, a := range sessions {
		pr := r.judged[a]
		for _, set := range sets {
			for p := range set {
				if j := pr.routes[p]; j != nil && j.reason == "" {
					out[pr.tenant]++
				}
			}
		}
	}
	return out
}

// hostShares splits d, time spent on the host's table, between the
// tenants that caused it by their count of changed (or retried) routes;
// what no tenant caused (the resync's reading of the whole table)
// between the tenants whose routes it holds, by their count of them, and
// to none when it holds none.
func hostShares(d time.Duration, causes map[string]int, counts map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	by := causes
	if sumCounts(causes) == 0 {
		by = counts
	}
	n := sumCounts(by)
	if n == 0 || d == 0 {
		return out
	}
	for tenant, k := range by {
		if k > 0 {
			out[tenant] = d * time.Duration(k) / time.Duration(n)
		}
	}
	return out
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, k := range m {
		n += max(k, 0)
	}
	return n
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
