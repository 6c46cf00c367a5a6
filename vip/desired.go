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
}

// member is an LB host that takes part in failure detection.
type member struct {
	ID        string
	Heartbeat netip.AddrPort
}

// desired is what the committed state asks of the VIP layer.
type desired struct {
	VIPs    []vipSpec // sorted by address
	Members []member  // sorted by id; hosts without a heartbeat address are left out
	// Ranges are the address ranges of the arp and bgp pools: host
	// addresses inside them that this host does not hold are removed from
	// its interfaces.
	Ranges []api.Range
	// Draining holds the hosts an operator drained (`cluster drain`).
	Draining map[string]bool
}

// desiredState extracts the VIPs and the hosts from the whole committed
// state. It is pure. A load balancer without an address, or whose address
// lies in no known pool, has no VIP yet.
func desiredState(objs []*pb.Object) desired {
	type poolInfo struct {
		pool   *pb.VIPPool
		ranges []api.Range
		comms  []uint32
	}
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
			if m := p.GetMode(); m == ModeARP || m == ModeBGP {
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
	poolOf := func(lb *pb.LoadBalancer, a netip.Addr) (poolInfo, bool) {
		if i, ok := byName[lb.GetVip().GetPool()]; ok && inRanges(pools[i].ranges, a) {
			return pools[i], true
		}
		for _, p := range pools {
			if inRanges(p.ranges, a) {
				return p, true
			}
		}
		return poolInfo{}, false
	}
	byAddr := map[netip.Addr]int{}
	for _, lb := range lbs {
		a, err := netip.ParseAddr(lb.GetStatus().GetAddress())
		if err != nil || a.Zone() != "" {
			continue
		}
		a = a.Unmap()
		p, ok := poolOf(lb, a)
		if !ok {
			continue
		}
		switch p.pool.GetMode() {
		case ModeARP, ModeBGP, ModeStatic:
		default:
			continue
		}
		name := lb.GetTenant() + "/" + lb.GetName()
		if i, ok := byAddr[a]; ok {
			d.VIPs[i].LBs = append(d.VIPs[i].LBs, name)
			continue
		}
		byAddr[a] = len(d.VIPs)
		d.VIPs = append(d.VIPs, vipSpec{
			Addr: a, Mode: p.pool.GetMode(), Pool: p.pool.GetName(),
			Communities: p.comms, LBs: []string{name},
		})
	}
	slices.SortFunc(d.VIPs, func(x, y vipSpec) int { return x.Addr.Compare(y.Addr) })
	for i := range d.VIPs {
		slices.Sort(d.VIPs[i].LBs)
	}
	slices.SortFunc(d.Members, func(x, y member) int { return cmp.Compare(x.ID, y.ID) })
	return d
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
