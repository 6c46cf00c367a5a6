package tenantbgp

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Why a prefix a tenant speaker announced is dropped.
const (
	ReasonDefault       = "default route"
	ReasonOutside       = "outside the tenant's networks"
	ReasonTooSpecific   = "more specific than the tenant's maxPrefixLength"
	ReasonVIP           = "overlaps VIP pool"
	ReasonHostAddress   = "covers an address of this LB host"
	ReasonOtherTenant   = "overlaps the networks of tenant"
	ReasonNextHop       = "next hop outside the tenant's networks"
	ReasonNextHopHost   = "next hop is an address of this LB host"
	ReasonNoNextHop     = "no next hop"
	ReasonUnknownPeer   = "peer belongs to no tenant"
	ReasonInstallFailed = "the kernel refused the route"
)

// tenantRules is what one tenant's announcements are judged by.
type tenantRules struct {
	name   string
	nets   []netip.Prefix
	bgp    *pb.TenantBGP
	maxLen [2]int // IPv4, IPv6
}

// world is the part of the committed state that judges announcements:
// the tenants with BGP, every tenant's networks and the VIP pools.
type world struct {
	tenants map[string]*tenantRules
	// peers maps each speaker address to its tenant; a peer listed by
	// two tenants belongs to the first by name (conflicts lists it).
	peers     map[netip.Addr]string
	conflicts []conflict
	// nets are every tenant's networks, by tenant, and order their
	// names sorted.
	nets  map[string][]netip.Prefix
	order []string
	pools []namedRange
}

// conflict is a peer that tenant lists and owner has.
type conflict struct {
	tenant, owner string
	peer          netip.Addr
}

type namedRange struct {
	pool string
	r    api.Range
}

// compile builds the world from the committed objects (tenants and VIP
// pools; the rest is skipped). It is pure.
func compile(objs []*pb.Object) *world {
	w := &world{tenants: map[string]*tenantRules{}, peers: map[netip.Addr]string{}, nets: map[string][]netip.Prefix{}}
	var names []string
	for _, o := range objs {
		if p := o.GetVipPool(); p != nil {
			rs, err := api.ParsePoolRanges(p.GetCidrs())
			if err != nil {
				continue // validation refuses such pools before they are stored
			}
			for _, r := range rs {
				w.pools = append(w.pools, namedRange{pool: p.GetName(), r: r})
			}
			continue
		}
		t := o.GetTenant()
		if t == nil {
			continue
		}
		var nets []netip.Prefix
		for _, s := range t.GetNetworks() {
			if p, err := netip.ParsePrefix(s); err == nil {
				nets = append(nets, p.Masked())
			}
		}
		w.nets[t.GetName()] = nets
		if b := t.GetBgp(); b != nil {
			w.tenants[t.GetName()] = &tenantRules{name: t.GetName(), nets: nets, bgp: b,
				maxLen: [2]int{api.TenantBGPMaxLength(b, false), api.TenantBGPMaxLength(b, true)}}
			names = append(names, t.GetName())
		}
	}
	w.order = sortedKeys(w.nets)
	slices.Sort(names)
	for _, n := range names {
		for _, s := range w.tenants[n].bgp.GetPeers() {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if owner, taken := w.peers[a]; taken {
				w.conflicts = append(w.conflicts, conflict{tenant: n, owner: owner, peer: a})
				continue
			}
			w.peers[a] = n
		}
	}
	return w
}

// judge says why tenant t may not have prefix p with next hop nh on a
// host whose own addresses are host, or "" when it may.
func (w *world) judge(t *tenantRules, p netip.Prefix, nh netip.Addr, host []netip.Addr) string {
	p = p.Masked()
	fam := 0
	if p.Addr().Is6() {
		fam = 1
	}
	switch {
	case p.Bits() == 0:
		return ReasonDefault
	case !within(t.nets, p):
		return ReasonOutside
	case p.Bits() > t.maxLen[fam]:
		return fmt.Sprintf("%s (/%d)", ReasonTooSpecific, t.maxLen[fam])
	}
	pr := api.PrefixRange(p)
	for _, nr := range w.pools {
		if nr.r.Overlaps(pr) {
			return ReasonVIP + " " + nr.pool
		}
	}
	for _, a := range host {
		if p.Contains(a) {
			return ReasonHostAddress
		}
	}
	for _, other := range w.order {
		if other == t.name {
			continue
		}
		for _, n := range w.nets[other] {
			if n.Overlaps(p) {
				return ReasonOtherTenant + " " + other
			}
		}
	}
	switch {
	case !nh.IsValid() || nh.IsUnspecified():
		return ReasonNoNextHop
	case slices.Contains(host, nh):
		return ReasonNextHopHost
	case !within(t.nets, netip.PrefixFrom(nh, nh.BitLen())):
		return ReasonNextHop
	}
	return ""
}

// within reports whether p lies inside one of nets.
func within(nets []netip.Prefix, p netip.Prefix) bool {
	for _, n := range nets {
		if n.Addr().Is4() == p.Addr().Is4() && n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
