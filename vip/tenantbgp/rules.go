package tenantbgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

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
	// ReasonAttachmentRoute: an attached tenant's route to the very
	// prefix its attachment already routes in the namespace (its
	// segment, or a network reached through its gateway): installed, it
	// would replace that route, and its withdrawal would leave none.
	ReasonAttachmentRoute = "is a route of the tenant's attachment"
)

// tenantRules is what one tenant's announcements are judged by.
type tenantRules struct {
	name   string
	nets   []netip.Prefix
	bgp    *pb.TenantBGP
	maxLen [2]int // IPv4, IPv6
	// space is where the tenant's sessions are made and its routes
	// installed: "" for the host's own routing table, the tenant's name
	// when it has an attachment (its namespace). own is this host's
	// address in the attachment (invalid when the attachment lists no
	// address for this host: its sessions are not made here).
	space string
	own   netip.Addr
	// attRoutes are the prefixes an attached tenant's attachment routes
	// in its namespace (vip/attach convergeRoutes): its segment, and the
	// networks outside it through its gateway.
	attRoutes []netip.Prefix
}

// peerKey is one speaker: its address in a space (peerKey.space as
// tenantRules.space). Two attached tenants may have speakers of one
// address: they are distinct sessions.
type peerKey struct {
	space string
	addr  netip.Addr
}

func (k peerKey) String() string {
	if k.space == "" {
		return k.addr.String()
	}
	return k.addr.String() + " in " + api.AttachmentNamespace(k.space)
}

func cmpKeys(a, b peerKey) int {
	if c := strings.Compare(a.space, b.space); c != 0 {
		return c
	}
	return a.addr.Compare(b.addr)
}

// world is the part of the committed state that judges announcements:
// the tenants with BGP, every tenant's networks and the VIP pools.
type world struct {
	tenants map[string]*tenantRules
	// peers maps each speaker, in its space, to its tenant; a peer
	// listed by two tenants of one space belongs to the first by name
	// (conflicts lists it). A tenant attached without an address for
	// this host has none here (unlisted names it).
	peers     map[peerKey]string
	conflicts []conflict
	unlisted  map[string]bool
	// nets are every tenant's networks, by tenant, spaces every
	// tenant's space, and order their names sorted.
	nets   map[string][]netip.Prefix
	spaces map[string]string
	order  []string
	pools  []namedRange
	// attached are the attached tenants with an address for this host,
	// with or without BGP: the relay keeps their namespaces' tables.
	// attachedAs holds each one's tenant object (its attachment and
	// networks, which the namespace's own routes follow).
	attached   []string
	attachedAs map[string]*pb.Tenant
}

// conflict is a peer that tenant lists and owner has.
type conflict struct {
	tenant, owner string
	peer          peerKey
}

// namedRange is a VIP pool's range, in its space (the tenant whose
// attachment holds it, "" for the host's).
type namedRange struct {
	pool, space string
	r           api.Range
}

// compile builds the world of host nodeID from the committed objects
// (tenants and VIP pools; the rest is skipped). It is pure.
func compile(objs []*pb.Object, nodeID string) *world {
	w := &world{tenants: map[string]*tenantRules{}, peers: map[peerKey]string{}, nets: map[string][]netip.Prefix{},
		spaces: map[string]string{}, unlisted: map[string]bool{}, attachedAs: map[string]*pb.Tenant{}}
	var names []string
	for _, o := range objs {
		if p := o.GetVipPool(); p != nil {
			rs, err := api.ParsePoolRanges(p.GetCidrs())
			if err != nil {
				continue // validation refuses such pools before they are stored
			}
			for _, r := range rs {
				w.pools = append(w.pools, namedRange{pool: p.GetName(), space: p.GetAttachment(), r: r})
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
		var space string
		var own netip.Addr
		var attRoutes []netip.Prefix
		if a := t.GetAttachment(); a != nil {
			space = t.GetName()
			if p, err := netip.ParsePrefix(a.GetHosts()[nodeID]); err == nil {
				own = p.Addr()
				w.attached = append(w.attached, t.GetName())
				w.attachedAs[t.GetName()] = t
				attRoutes = attachmentRoutes(p.Masked(), a.GetGateway(), nets)
			}
		}
		w.spaces[t.GetName()] = space
		if b := t.GetBgp(); b != nil {
			w.tenants[t.GetName()] = &tenantRules{name: t.GetName(), nets: nets, bgp: b, space: space, own: own, attRoutes: attRoutes,
				maxLen: [2]int{api.TenantBGPMaxLength(b, false), api.TenantBGPMaxLength(b, true)}}
			names = append(names, t.GetName())
		}
	}
	w.order = sortedKeys(w.nets)
	slices.Sort(names)
	slices.Sort(w.attached)
	for _, n := range names {
		t := w.tenants[n]
		if t.space != "" && !t.own.IsValid() {
			w.unlisted[n] = true
			continue
		}
		for _, s := range t.bgp.GetPeers() {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			k := peerKey{space: t.space, addr: a.Unmap()}
			if owner, taken := w.peers[k]; taken {
				w.conflicts = append(w.conflicts, conflict{tenant: n, owner: owner, peer: k})
				continue
			}
			w.peers[k] = n
		}
	}
	return w
}

// hostAddrs are the addresses of this host in t's space: host (the
// host's own) for a tenant of the host's table, its address in the
// attachment for an attached one.
func (t *tenantRules) hostAddrs(host []netip.Addr) []netip.Addr {
	if t.space == "" {
		return host
	}
	return []netip.Addr{t.own}
}

// judge says why tenant t may not have prefix p with next hop nh on a
// host whose own addresses are host, or "" when it may. An attached
// tenant's routes go to its namespace's table, not the host's: they are
// judged against the VIP pools of its attachment and the host's address
// there, and other tenants' networks do not concern them (no other
// tenant dials from that table). A tenant of the host's table is judged
// against the pools, the addresses and the other tenants of the host's.
func (w *world) judge(t *tenantRules, p netip.Prefix, nh netip.Addr, host []netip.Addr) string {
	host = t.hostAddrs(host)
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
	if slices.Contains(t.attRoutes, p) {
		return ReasonAttachmentRoute
	}
	pr := api.PrefixRange(p)
	for _, nr := range w.pools {
		if nr.space == t.space && nr.r.Overlaps(pr) {
			return ReasonVIP + " " + nr.pool
		}
	}
	for _, a := range host {
		if p.Contains(a) {
			return ReasonHostAddress
		}
	}
	for _, other := range w.order {
		if other == t.name || w.spaces[other] != t.space {
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

// attachmentRoutes are the prefixes an attachment whose segment is seg
// routes in its namespace: seg itself, and each of nets of seg's family
// outside seg through gateway, when it has one (as vip/attach's
// convergeRoutes installs them).
func attachmentRoutes(seg netip.Prefix, gateway string, nets []netip.Prefix) []netip.Prefix {
	out := []netip.Prefix{seg}
	gw, err := netip.ParseAddr(gateway)
	if err != nil {
		return out
	}
	for _, n := range nets {
		if n.Addr().Is4() != gw.Is4() || n.Bits() >= seg.Bits() && seg.Contains(n.Addr()) {
			continue
		}
		out = append(out, n.Masked())
	}
	return out
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
