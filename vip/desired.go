package vip

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Announcement modes of VIP pools.
const (
	ModeARP    = "arp"
	ModeBGP    = "bgp"
	ModeStatic = "static"
)

// vipSpec is one virtual IP in the committed state.
type vipSpec struct {
	Addr netip.Addr
	Mode string
	Pool string
	// Communities are the pool's BGP communities (ASN<<16 | value).
	Communities []uint32
	// LBs are the load balancers using the address ("tenant/name"),
	// sorted.
	LBs []string
	// WithdrawWhenDown: the pool's withdrawWhenDown (bgp pools only).
	WithdrawWhenDown bool
	// Spaces are the tenants whose attachments carry the address, sorted,
	// for a VIP of pools in tenants' attachments (VIPPool.attachment): two
	// attached tenants may each have a private VIP of the same address,
	// held by one host in each tenant's namespace. Empty for a VIP of the
	// host's own network.
	Spaces []string
}

// withSpaces sets vs.Spaces from its load balancers' tenants when its
// pool lives in a tenant's attachment (each such pool serves its tenant
// only, and pools of the host's network overlap none of them).
func (d *desired) withSpaces(vs vipSpec) vipSpec {
	if d.attachmentOf(vs.Pool) == "" {
		vs.Spaces = nil
		return vs
	}
	var spaces []string
	for _, lb := range vs.LBs {
		t, _, _ := strings.Cut(lb, "/")
		if !slices.Contains(spaces, t) {
			spaces = append(spaces, t)
		}
	}
	slices.Sort(spaces)
	vs.Spaces = spaces
	return vs
}

// member is an LB host that takes part in failure detection.
type member struct {
	ID        string
	Heartbeat netip.AddrPort
}

// desired is what the committed state asks of the VIP layer.
type desired struct {
	VIPs    vipList  // sorted by address
	Members []member // sorted by id; hosts without a heartbeat address are left out
	// Ranges are the address ranges of the arp and bgp pools: host
	// addresses inside them that this host does not hold are removed from
	// its interfaces.
	Ranges []api.Range
	// Draining holds the hosts an operator drained (`cluster drain`).
	Draining map[string]bool
	// pools are the VIP pools, by name in byName, for withLoadBalancers.
	pools  []poolInfo
	byName map[string]int
	// epoch counts the whole states (desiredState) before this one: a
	// desired derived by withLoadBalancers keeps its origin's.
	epoch uint64
}

// poolInfo is a VIP pool with its parsed ranges and communities.
type poolInfo struct {
	pool   *pb.VIPPool
	ranges []api.Range
	comms  []uint32
}

// desiredState extracts the VIPs and the hosts from the whole committed
// state. It is pure. A load balancer without an address, or whose address
// lies in no known pool, has no VIP yet.
func desiredState(objs []*pb.Object) desired {
	var pools []poolInfo
	byName := map[string]int{}
	var lbs []*pb.LoadBalancer
	var d desired
	for _, o := range objs {
		switch {
		case o.GetVipPool() != nil:
			p := o.GetVipPool()
			rs, err := api.ParsePoolRanges(p.GetCidrs())
			if err != nil {
				continue
			}
			byName[p.GetName()] = len(pools)
			pools = append(pools, poolInfo{pool: p, ranges: rs, comms: parseCommunities(p.GetCommunities())})
			// (The addresses of a pool in a tenant's attachment live in the
			// tenant's network, not the host's: a host address there is no
			// stray VIP.)
			if m := p.GetMode(); (m == ModeARP || m == ModeBGP) && p.GetAttachment() == "" {
				d.Ranges = append(d.Ranges, rs...)
			}
		case o.GetLoadBalancer() != nil:
			lbs = append(lbs, o.GetLoadBalancer())
		case o.GetNode() != nil:
			n := o.GetNode()
			if n.GetDraining() {
				if d.Draining == nil {
					d.Draining = map[string]bool{}
				}
				d.Draining[n.GetId()] = true
			}
			ap, err := netip.ParseAddrPort(n.GetHeartbeatAddr())
			if err != nil || n.GetId() == "" {
				continue
			}
			d.Members = append(d.Members, member{ID: n.GetId(), Heartbeat: ap})
		}
	}
	d.pools, d.byName = pools, byName
	byAddr := map[netip.Addr]int{}
	var vips []vipSpec
	for _, lb := range lbs {
		for _, v := range d.vipsOf(lb) {
			a, p := v.addr, v.pool
			name := lbName(lb)
			if i, ok := byAddr[a]; ok {
				vips[i].LBs = append(vips[i].LBs, name)
				continue
			}
			byAddr[a] = len(vips)
			vips = append(vips, vipSpec{
				Addr: a, Mode: p.pool.GetMode(), Pool: p.pool.GetName(),
				Communities: p.comms, LBs: []string{name}, WithdrawWhenDown: p.pool.GetWithdrawWhenDown(),
			})
		}
	}
	slices.SortFunc(vips, func(x, y vipSpec) int { return x.Addr.Compare(y.Addr) })
	for i := range vips {
		slices.Sort(vips[i].LBs)
		vips[i] = d.withSpaces(vips[i])
	}
	d.VIPs = newVIPList(vips)
	slices.SortFunc(d.Members, func(x, y member) int { return cmp.Compare(x.ID, y.ID) })
	return d
}

// lbName is how the VIP layer names a load balancer: "tenant/name".
func lbName(lb *pb.LoadBalancer) string { return lb.GetTenant() + "/" + lb.GetName() }

// lbVIP is one VIP of a load balancer and its pool.
type lbVIP struct {
	addr netip.Addr
	pool poolInfo
}

// vipsOf returns the VIPs of lb: one per address it holds (two for a
// dual-stack load balancer, status.addresses), as vipOf finds each.
func (d *desired) vipsOf(lb *pb.LoadBalancer) []lbVIP {
	var out []lbVIP
	for _, s := range api.StatusAddresses(lb) {
		if a, p, ok := d.vipOf(lb, s); ok {
			out = append(out, lbVIP{a, p})
		}
	}
	return out
}

// vipOf returns the VIP of lb at address s and its pool: the address, in
// the pool lb asks for or else the first that holds it, of a mode the VIP
// layer serves. An address that does not parse, or lies in no known
// pool, is none.
func (d *desired) vipOf(lb *pb.LoadBalancer, s string) (netip.Addr, poolInfo, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, poolInfo{}, false
	}
	a = a.Unmap()
	p, ok := poolInfo{}, false
	// A pool in another tenant's attachment is never the load balancer's
	// (pools in attachments may overlap each other).
	mine := func(q poolInfo) bool { t := q.pool.GetAttachment(); return t == "" || t == lb.GetTenant() }
	if i, found := d.byName[lb.GetVip().GetPool()]; found && inRanges(d.pools[i].ranges, a) && mine(d.pools[i]) {
		p, ok = d.pools[i], true
	} else {
		for _, q := range d.pools {
			if inRanges(q.ranges, a) && mine(q) {
				p, ok = q, true
				break
			}
		}
	}
	if !ok {
		return netip.Addr{}, poolInfo{}, false
	}
	switch p.pool.GetMode() {
	case ModeARP, ModeBGP, ModeStatic:
		return a, p, true
	}
	return netip.Addr{}, poolInfo{}, false
}

// lbChange is a load balancer before and after a write (nil: created,
// deleted).
type lbChange struct{ prev, next *pb.LoadBalancer }

// withLoadBalancers returns d with changes of load balancers applied,
// and the addresses whose VIP they add, remove or change. d is not
// changed: the result shares what the changes leave alone (the VIPs'
// slices of load balancers, the hosts, the pools, the chunks of the
// list of VIPs), so it costs what changed plus the chunks it changes
// and the list of chunks.
func (d *desired) withLoadBalancers(changes []lbChange) (*desired, []netip.Addr) {
	out := *d
	e := d.VIPs.edit()
	var touched []netip.Addr
	owned := map[netip.Addr]bool{} // VIPs whose LBs slice out owns
	for _, c := range changes {
		for _, v := range d.vipsOf(c.prev) {
			a := v.addr
			vs, found := e.l.get(a)
			if !found {
				continue
			}
			name := lbName(c.prev)
			if j, has := slices.BinarySearch(vs.LBs, name); has {
				if !owned[a] {
					vs.LBs, owned[a] = slices.Clone(vs.LBs), true
				}
				vs.LBs = slices.Delete(vs.LBs, j, j+1)
				if len(vs.LBs) == 0 {
					e.remove(a)
				} else {
					e.put(d.withSpaces(vs))
				}
				touched = append(touched, a)
			}
		}
		for _, v := range d.vipsOf(c.next) {
			a, p := v.addr, v.pool
			touched = append(touched, a)
			name := lbName(c.next)
			vs, found := e.l.get(a)
			if !found {
				e.put(d.withSpaces(vipSpec{Addr: a, Mode: p.pool.GetMode(), Pool: p.pool.GetName(), Communities: p.comms, LBs: []string{name},
					WithdrawWhenDown: p.pool.GetWithdrawWhenDown()}))
				owned[a] = true
				continue
			}
			if j, has := slices.BinarySearch(vs.LBs, name); !has {
				if !owned[a] {
					vs.LBs, owned[a] = slices.Clone(vs.LBs), true
				}
				vs.LBs = slices.Insert(vs.LBs, j, name)
				e.put(d.withSpaces(vs))
			}
		}
	}
	out.VIPs = *e.l
	slices.SortFunc(touched, netip.Addr.Compare)
	return &out, slices.Compact(touched)
}

// vip returns the VIP at a.
func (d *desired) vip(a netip.Addr) (vipSpec, bool) {
	return d.VIPs.get(a)
}

func inRanges(rs []api.Range, a netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// parseCommunities turns "65000:100" into 65000<<16|100; malformed entries
// (refused by validation) are skipped.
func parseCommunities(cs []string) []uint32 {
	var out []uint32
	for _, c := range cs {
		hi, lo, ok := strings.Cut(c, ":")
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		out = append(out, uint32(h)<<16|uint32(l))
	}
	return out
}

// pendMode adds the VIPs of mode to pending.
func (d *desired) pendMode(pending map[netip.Addr]bool, mode string) {
	for vs := range d.VIPs.All() {
		if vs.Mode == mode {
			pending[vs.Addr] = true
		}
	}
}
