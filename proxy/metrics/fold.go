package metrics

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api/promtext"
)

// A scrape has a row of member_up and member_ejections_total for every
// member in service: 1,000,000 on a host of 100,000 load balancers. So a
// member is one poolMember of 40 bytes without pointers (the collector
// does not scan them), its load balancer and pool are indexes, and its
// label value is written from the address when the line is, not kept as a
// string.

// addrKey is a netip.AddrPort as plain values: hi and lo are the
// address's 128 bits (an IPv4 address mapped into IPv6, as netip keeps
// it), z its kind and zone.
type addrKey struct {
	hi, lo uint64
	z      uint32
	port   uint16
}

// Kinds of address in addrKey.z; from zZoned on, z is an IPv6 address
// with the zone folder.zones[z-zZoned].
const (
	zInvalid uint32 = iota
	z4
	z6
	zZoned
)

// poolMember is one member in service: an addrKey, flattened so that the
// record takes 40 bytes, and what folds it.
type poolMember struct {
	hi, lo    uint64
	ejections int64
	lb, pool  int32 // folder.lbs, folder.pools
	z         uint32
	port      uint16
	healthy   bool
	other     bool // its series is member="_other"
}

func (m *poolMember) key() addrKey { return addrKey{m.hi, m.lo, m.z, m.port} }

// lbAddr is an address a load balancer's counters name.
type lbAddr struct {
	k  addrKey
	lb int32
}

// lbEntry is a load balancer and the label values of its series.
type lbEntry struct {
	name string
	// label is the value of lb: name, or TENANT/_other when folded.
	label string
	was   int32 // the index it was interned at
	// kept: among the first MaxLBsPerTenant of its tenant, with its own
	// listeners' series.
	kept bool
	// own: its members' series keep their pool and address (kept, or
	// named TENANT/_other itself).
	own bool
}

// folder maps load balancers and members to their label values under the
// caps. It interns the load balancers, pools and zones of one scrape; fold
// then sorts them in label order and renumbers the members.
type folder struct {
	index map[string]int32 // name → lbs
	lbs   []lbEntry
	// cutoffs are the last member kept of the load balancers with more
	// than MaxMembersPerLB.
	cutoffs map[int32]addrKey

	pools     []string
	poolIndex map[string]int32
	other     int32 // pools[other] is Other

	zones     []string
	zoneIndex map[string]uint32

	// The last load balancer and pool interned: members come load
	// balancer by load balancer.
	lastLB, lastPool lastName
}

// lastName is the last name an index was looked up for.
type lastName struct {
	name string
	i    int32 // -1: none yet
}

// intern returns name's index in index, adding it with add (which returns
// its index) when new.
func (l *lastName) intern(index map[string]int32, name string, add func() int32) int32 {
	if l.i >= 0 && name == l.name {
		return l.i
	}
	i, ok := index[name]
	if !ok {
		i = add()
		index[name] = i
	}
	*l = lastName{name, i}
	return i
}

// newFolder returns a folder with room for about lbs load balancers.
func newFolder(lbs int) *folder {
	f := &folder{index: make(map[string]int32, lbs), lbs: make([]lbEntry, 0, lbs), cutoffs: map[int32]addrKey{},
		poolIndex: map[string]int32{}, lastLB: lastName{i: -1}, lastPool: lastName{i: -1}}
	f.other = f.poolOf(Other)
	return f
}

// lbOf interns a load balancer.
func (f *folder) lbOf(name string) int32 {
	return f.lastLB.intern(f.index, name, func() int32 {
		i := int32(len(f.lbs))
		f.lbs = append(f.lbs, lbEntry{name: name, was: i})
		return i
	})
}

// poolOf interns a pool.
func (f *folder) poolOf(name string) int32 {
	return f.lastPool.intern(f.poolIndex, name, func() int32 {
		f.pools = append(f.pools, name)
		return int32(len(f.pools) - 1)
	})
}

// poolMember returns m as a poolMember.
func (f *folder) poolMember(m Member) poolMember {
	k := f.key(m.Addr)
	return poolMember{hi: k.hi, lo: k.lo, z: k.z, port: k.port, ejections: m.Ejections,
		lb: f.lbOf(m.LB), pool: f.poolOf(m.Pool), healthy: m.Healthy}
}

// key returns a's addrKey, interning its zone.
func (f *folder) key(a netip.AddrPort) addrKey {
	ip := a.Addr()
	k := addrKey{port: a.Port()}
	switch {
	case !ip.IsValid():
		return k
	case ip.Is4():
		k.z = z4
	case ip.Zone() == "":
		k.z = z6
	default:
		z, ok := f.zoneIndex[ip.Zone()]
		if !ok {
			if f.zoneIndex == nil {
				f.zoneIndex = map[string]uint32{}
			}
			z = zZoned + uint32(len(f.zones))
			f.zoneIndex[ip.Zone()] = z
			f.zones = append(f.zones, ip.Zone())
		}
		k.z = z
	}
	b := ip.As16()
	k.hi, k.lo = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	return k
}

// addrPort returns the address of k.
func (f *folder) addrPort(k addrKey) netip.AddrPort {
	var ip netip.Addr
	switch {
	case k.z == zInvalid:
	case k.z == z4:
		ip = netip.AddrFrom4([4]byte{byte(k.lo >> 24), byte(k.lo >> 16), byte(k.lo >> 8), byte(k.lo)})
	default:
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], k.hi)
		binary.BigEndian.PutUint64(b[8:], k.lo)
		ip = netip.AddrFrom16(b)
		if k.z >= zZoned {
			ip = ip.WithZone(f.zones[k.z-zZoned])
		}
	}
	return netip.AddrPortFrom(ip, k.port)
}

func (f *folder) zone(z uint32) string {
	if z < zZoned {
		return ""
	}
	return f.zones[z-zZoned]
}

// compare orders keys as netip.AddrPort.Compare orders their addresses.
func (f *folder) compare(a, b addrKey) int {
	if c := cmp.Compare(min(a.z, z6), min(b.z, z6)); c != 0 {
		return c
	}
	if a.hi != b.hi {
		return cmp.Compare(a.hi, b.hi)
	}
	if a.lo != b.lo {
		return cmp.Compare(a.lo, b.lo)
	}
	if a.z != b.z {
		if c := strings.Compare(f.zone(a.z), f.zone(b.z)); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.port, b.port)
}

// fold keeps the first maxLBs load balancers of each tenant and the first
// maxMembers members of each, by name and address, among every load
// balancer and address interned; members are the members in service and
// addrs the addresses that counters name. It sorts lbs and pools in label
// order and renumbers members and addrs to match, then sorts members in
// the order of their series and marks those folded into member="_other".
func (f *folder) fold(maxLBs, maxMembers int, members []poolMember, addrs []lbAddr) {
	lbs := f.lbs
	slices.SortFunc(lbs, func(a, b lbEntry) int { return strings.Compare(a.name, b.name) })
	perTenant, others := map[string]int{}, map[string]string{}
	for i := range lbs {
		e := &lbs[i]
		t := tenantOf(e.name)
		if perTenant[t] < maxLBs {
			perTenant[t]++
			e.kept, e.label = true, e.name
		} else {
			if others[t] == "" {
				others[t] = t + "/" + Other
			}
			e.label = others[t]
		}
		e.own = e.label == e.name
	}
	slices.SortFunc(lbs, func(a, b lbEntry) int {
		if c := strings.Compare(tenantOf(a.label), tenantOf(b.label)); c != 0 {
			return c
		}
		if a.label != b.label {
			return strings.Compare(a.label, b.label)
		}
		return strings.Compare(a.name, b.name)
	})
	lbAt := make([]int32, len(lbs))
	for i := range lbs {
		lbAt[lbs[i].was] = int32(i)
		f.index[lbs[i].name] = int32(i)
	}
	sorted := slices.Clone(f.pools)
	slices.Sort(sorted)
	poolAt := make([]int32, len(f.pools))
	for i, p := range sorted {
		poolAt[f.poolIndex[p]] = int32(i)
		f.poolIndex[p] = int32(i)
	}
	f.pools, f.other = sorted, f.poolIndex[Other]
	for i := range members {
		members[i].lb, members[i].pool = lbAt[members[i].lb], poolAt[members[i].pool]
	}
	for i := range addrs {
		addrs[i].lb = lbAt[addrs[i].lb]
	}

	// Each load balancer's members by address, to find the last kept.
	slices.SortFunc(members, func(a, b poolMember) int {
		if a.lb != b.lb {
			return cmp.Compare(a.lb, b.lb)
		}
		return f.compare(a.key(), b.key())
	})
	slices.SortFunc(addrs, func(a, b lbAddr) int {
		if a.lb != b.lb {
			return cmp.Compare(a.lb, b.lb)
		}
		return f.compare(a.k, b.k)
	})
	for i, j := 0, 0; i < len(members) || j < len(addrs); {
		lb := len(lbs)
		if i < len(members) {
			lb = int(members[i].lb)
		}
		if j < len(addrs) {
			lb = min(lb, int(addrs[j].lb))
		}
		from, to := i, j
		for i < len(members) && int(members[i].lb) == lb {
			i++
		}
		for j < len(addrs) && int(addrs[j].lb) == lb {
			j++
		}
		ms := members[from:i]
		if !lbs[lb].own {
			for k := range ms {
				ms[k].pool, ms[k].other = f.other, true
			}
			continue
		}
		if last, capped := f.nth(ms, addrs[to:j], maxMembers); capped {
			f.cutoffs[int32(lb)] = last
			for k := range ms {
				ms[k].other = f.compare(ms[k].key(), last) > 0
			}
		}
	}

	// The members of load balancers of one label (one, or all those a
	// tenant folds) by pool and member label.
	var s groupScratch
	for i := 0; i < len(members); {
		j := i + 1
		for j < len(members) && (members[j].lb == members[i].lb || lbs[members[j].lb].label == lbs[members[i].lb].label) {
			j++
		}
		f.sortGroup(members[i:j], &s)
		i = j
	}
}

// nth returns the n-th smallest distinct address of members and addrs,
// each sorted, and whether a larger one follows.
func (f *folder) nth(members []poolMember, addrs []lbAddr, n int) (addrKey, bool) {
	var last addrKey
	seen := 0
	for len(members) > 0 || len(addrs) > 0 {
		var k addrKey
		if len(addrs) == 0 || len(members) > 0 && f.compare(members[0].key(), addrs[0].k) <= 0 {
			k, members = members[0].key(), members[1:]
		} else {
			k, addrs = addrs[0].k, addrs[1:]
		}
		if seen > 0 && k == last {
			continue
		}
		if seen == n {
			return last, true
		}
		last, seen = k, seen+1
	}
	return last, false
}

// groupScratch is sortGroup's memory, kept from group to group.
type groupScratch struct {
	labels []byte
	refs   []labelRef
	tmp    []poolMember
}

// labelRef is a member of a group and its label values.
type labelRef struct {
	pool, i  int32
	from, to uint32 // its member label in groupScratch.labels
}

// sortGroup sorts the members of one label of lb by pool and member
// label.
func (f *folder) sortGroup(g []poolMember, s *groupScratch) {
	if !slices.ContainsFunc(g, func(m poolMember) bool { return !m.other || m.pool != f.other }) {
		return // all in pool="_other",member="_other"
	}
	s.labels, s.refs = s.labels[:0], s.refs[:0]
	for i := range g {
		from := len(s.labels)
		s.labels = f.appendMember(s.labels, &g[i])
		s.refs = append(s.refs, labelRef{pool: g[i].pool, i: int32(i), from: uint32(from), to: uint32(len(s.labels))})
	}
	byLabel := func(a, b labelRef) int {
		if a.pool != b.pool {
			return cmp.Compare(a.pool, b.pool)
		}
		return bytes.Compare(s.labels[a.from:a.to], s.labels[b.from:b.to])
	}
	if slices.IsSortedFunc(s.refs, byLabel) {
		return
	}
	slices.SortFunc(s.refs, byLabel)
	s.tmp = append(s.tmp[:0], g...)
	for i, r := range s.refs {
		g[i] = s.tmp[r.i]
	}
}

// appendMember appends the value of member of m, unescaped.
func (f *folder) appendMember(b []byte, m *poolMember) []byte {
	if m.other {
		return append(b, Other...)
	}
	a := f.addrPort(m.key())
	if !a.Addr().IsValid() {
		return append(b, a.String()...)
	}
	return a.AppendTo(b)
}

// lb returns the label values tenant, lb, listener.
func (f *folder) lb(lb, listener string) [3]string {
	t := tenantOf(lb)
	i, ok := f.index[lb]
	switch {
	case !ok:
		return [3]string{t, t + "/" + Other, Other}
	case f.lbs[i].kept:
		return [3]string{t, lb, listener}
	}
	return [3]string{t, f.lbs[i].label, Other}
}

// member returns the label values tenant, lb, pool, member of an address
// that counters name (and that fold saw) in a pool, folded as member_up
// folds: a load balancer folded into TENANT/_other has pool and member
// "_other", a member beyond the cap keeps its pool.
func (f *folder) member(lb, pool string, addr netip.AddrPort) [4]string {
	l := f.lb(lb, "")
	i, ok := f.index[lb]
	if !ok || !f.lbs[i].own {
		return [4]string{l[0], l[1], Other, Other}
	}
	if last, capped := f.cutoffs[i]; capped && f.compare(f.key(addr), last) > 0 {
		return [4]string{l[0], l[1], pool, Other}
	}
	return [4]string{l[0], l[1], pool, addr.String()}
}

// poolTable is one scrape's series of member_up and
// member_ejections_total: the members in service, folded and sorted by
// fold, those of one series next to each other.
type poolTable struct {
	f       *folder
	members []poolMember
}

// poolRow is one series of member_up and member_ejections_total.
type poolRow struct {
	tenant, lb, pool string
	// other: member="_other", else member is addr.
	other         bool
	addr          netip.AddrPort
	up, ejections int64
}

// each calls row for each series in order.
func (p *poolTable) each(row func(r poolRow)) {
	ms, lbs := p.members, p.f.lbs
	for i := 0; i < len(ms); {
		m := &ms[i]
		label := lbs[m.lb].label
		r := poolRow{tenant: tenantOf(label), lb: label, pool: p.f.pools[m.pool], other: m.other}
		if !m.other {
			r.addr = p.f.addrPort(m.key())
		}
		for ; i < len(ms) && p.sameRow(m, &ms[i]); i++ {
			if ms[i].healthy {
				r.up++
			}
			r.ejections += ms[i].ejections
		}
		row(r)
	}
}

// sameRow says whether a and b, a before b, are in one series.
func (p *poolTable) sameRow(a, b *poolMember) bool {
	if a.pool != b.pool || a.other != b.other {
		return false
	}
	if a.lb != b.lb && p.f.lbs[a.lb].label != p.f.lbs[b.lb].label {
		return false
	}
	// Every invalid address has the same label value.
	return a.other || a.key() == b.key() || a.z == zInvalid && b.z == zInvalid
}

// member returns the value of member.
func (r *poolRow) member() string {
	if r.other {
		return Other
	}
	return r.addr.String()
}

// appendMember appends the value of member, escaped.
func (r *poolRow) appendMember(b []byte) []byte {
	if r.other {
		return append(b, Other...)
	}
	if ip := r.addr.Addr(); !ip.IsValid() || ip.Zone() != "" {
		return promtext.AppendEscaped(b, r.addr.String(), true)
	}
	return r.addr.AppendTo(b)
}

// upValue is the value of member_up: 1 when the member may receive
// traffic; for the folded members, how many may.
func (r *poolRow) upValue() float64 {
	if r.other {
		return float64(r.up)
	}
	return float64(min(r.up, 1))
}
