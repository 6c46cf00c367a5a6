package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// checkPoolAttachment checks a pool whose addresses live in a tenant's
// attachment (VIPPool.attachment): an arp or bgp pool, without an
// interface, of a tenant that has an attachment, whose addresses all lie
// inside that tenant's networks, and that serves that tenant only. A bgp
// pool's VIPs are announced to the tenant's own speakers over its BGP
// sessions, with the hosts' addresses in the attachment as next hops: the
// tenant needs bgp, and a speaker and host addresses of each family the
// pool has.
func checkPoolAttachment(ck *checker, p *pb.VIPPool, ranges []poolRange, c Catalog) {
	name := p.GetAttachment()
	if name == "" {
		return
	}
	if p.GetInterface() != "" {
		ck.invalidf("attachment", "a pool's addresses live on an interface of the host or in a tenant's attachment, not both; remove interface or attachment")
		return
	}
	if m := p.GetMode(); m != "arp" && m != "bgp" {
		ck.invalidf("attachment", "applies to arp and bgp pools only (this pool is %s): a static pool's addresses are routed to the hosts by the network, and nothing routes a tenant's network to them; use mode: arp, or mode: bgp to announce them to the tenant's speakers", orUnset(m))
		return
	}
	if ts := p.GetTenants(); len(ts) > 0 && (len(ts) != 1 || ts[0] != name) {
		ck.invalidf("tenants", "a pool in tenant %s's attachment serves that tenant only; set tenants to [%s] or leave it empty", name, name)
	}
	t := c.Tenant(name)
	switch {
	case t == nil:
		ck.conflictf("attachment", "tenant %s does not exist; create it with an attachment first", name)
		return
	case t.GetAttachment() == nil:
		ck.conflictf("attachment", "tenant %s has no attachment (its network is not joined to the LB hosts through a namespace of its own); give it one (tenant.attachment) first", name)
		return
	}
	for _, o := range sortedTenants(c) {
		if o.GetName() != name && slices.Contains(o.GetPools(), p.GetName()) {
			ck.conflictf("attachment", "tenant %s lists the pool in its pools, and a pool in tenant %s's attachment serves that tenant only; remove it from tenant %s's pools first", o.GetName(), name, o.GetName())
			break
		}
	}
	if p.GetMode() == "bgp" {
		checkBGPPoolAttachment(ck, t, ranges)
	}
	nets := parseNetworks(t.GetNetworks())
	for i, r := range ranges {
		f := fmt.Sprintf("cidrs[%d]", i)
		if !rangeInNetworks(r.Range, nets) {
			ck.invalidf(f, "%s is not inside tenant %s's networks (%s); a VIP in a tenant's attachment must be an address of its network", r.text, name, listOrNone(t.GetNetworks(), "none"))
			continue
		}
		if a, ok := attachmentAddrIn(t.GetAttachment(), r.Range); ok {
			ck.invalidf(f, "%s holds %s, an LB host's address or the gateway of tenant %s's attachment; leave the hosts' addresses out of the pool", r.text, a, name)
		}
	}
}

// attachmentAddrIn returns an address of a's hosts, or its gateway, that
// lies in r.
func attachmentAddrIn(a *pb.TenantAttachment, r Range) (netip.Addr, bool) {
	addrs := []string{a.GetGateway()}
	for _, h := range a.GetHosts() {
		addrs = append(addrs, h)
	}
	slices.Sort(addrs)
	for _, s := range addrs {
		ad, err := netip.ParseAddr(s)
		if p, perr := netip.ParsePrefix(s); perr == nil {
			ad, err = p.Addr(), nil
		}
		if err == nil && r.Contains(ad.Unmap()) {
			return ad, true
		}
	}
	return netip.Addr{}, false
}

// rangeInNetworks reports whether one of nets holds all of r.
func rangeInNetworks(r Range, nets []netip.Prefix) bool {
	return slices.ContainsFunc(nets, func(n netip.Prefix) bool { return n.Contains(r.From) && n.Contains(r.To) })
}

// poolsInAttachment returns the names of the pools that live in tenant's
// attachment, sorted.
func poolsInAttachment(c Catalog, tenant string) []string {
	var out []string
	for _, p := range parsePools(c) {
		if p.pool.GetAttachment() == tenant {
			out = append(out, p.pool.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// checkAttachmentPools refuses a change of tenant t that would leave a
// pool in its attachment without one, or with addresses outside the
// tenant's networks, or a bgp pool there without speakers to announce
// it to.
func checkAttachmentPools(ck *checker, t *pb.Tenant, nets []netip.Prefix, c Catalog) {
	for _, name := range poolsInAttachment(c, t.GetName()) {
		if t.GetAttachment() == nil {
			ck.conflictf("attachment", "VIP pool %s lives in the tenant's attachment; delete that pool first", name)
			continue
		}
		if c.Pool(name).GetMode() == "bgp" {
			ck2 := &checker{}
			checkBGPPoolAttachment(ck2, t, parseRanges(c.Pool(name).GetCidrs()))
			if !ck2.ok() {
				ck.conflictf("bgp", "VIP pool %s (a bgp pool in the tenant's attachment) is announced to the tenant's speakers, and this change would not let it be (%s); change or delete the pool first", name, ck2.errs[0].Reason)
			}
		}
		for _, r := range parseRanges(c.Pool(name).GetCidrs()) {
			if !rangeInNetworks(r.Range, nets) {
				ck.conflictf("networks", "VIP pool %s (in the tenant's attachment) has %s, which would fall outside the tenant's networks; keep a network that holds it or change the pool first", name, r.text)
				break
			}
		}
	}
}

// separateAttachments reports whether p and o live in different tenants'
// attachments: their addresses may overlap, each tenant's network being a
// routing domain of its own on every host.
func separateAttachments(p, o *pb.VIPPool) bool {
	return p.GetAttachment() != "" && o.GetAttachment() != "" && p.GetAttachment() != o.GetAttachment()
}

// announcedAlike says why pools p and o, in different tenants'
// attachments, may not share addresses: a host holds and announces an
// address for every attachment that has it at once, one election and one
// announcement (a bgp pool's communities and withdrawWhenDown), so the
// pools must agree on how. Empty: they may.
func announcedAlike(p, o *pb.VIPPool) string {
	in := fmt.Sprintf(" in tenant %s's attachment", o.GetAttachment())
	const how = "; a host holds an address for every attachment that has it at once, so pools in different attachments share addresses only when announced alike"
	switch {
	case p.GetMode() != o.GetMode():
		return fmt.Sprintf("%s, which is %s (this pool is %s)%s: use the same mode, or other addresses", in, orUnset(o.GetMode()), orUnset(p.GetMode()), how)
	case p.GetMode() != "bgp":
		return ""
	case !slices.Equal(sortedCopy(p.GetCommunities()), sortedCopy(o.GetCommunities())):
		return fmt.Sprintf("%s, with communities [%s] (this pool has [%s])%s: use the same communities, or other addresses", in, strings.Join(o.GetCommunities(), ", "), strings.Join(p.GetCommunities(), ", "), how)
	case p.GetWithdrawWhenDown() != o.GetWithdrawWhenDown():
		return fmt.Sprintf("%s, whose withdrawWhenDown is %t%s: use the same, or other addresses", in, o.GetWithdrawWhenDown(), how)
	}
	return ""
}

func sortedCopy(s []string) []string {
	return slices.Sorted(slices.Values(s))
}

// ownPool reports whether tenant may take addresses from p as far as
// attachments go: p lives in no attachment, or in the tenant's own.
func ownPool(p *pb.VIPPool, tenant string) bool {
	return p.GetAttachment() == "" || p.GetAttachment() == tenant
}

// checkBGPPoolAttachment checks a bgp pool in tenant t's attachment: its
// VIPs go to t's speakers over t's sessions (bgp.peers), with each host's
// address in the attachment as next hop, so t needs bgp, and each range
// needs a speaker and host addresses of its family, and must lie outside
// the attachment's segment (each announcing host holds the VIP there).
func checkBGPPoolAttachment(ck *checker, t *pb.Tenant, ranges []poolRange) {
	name := t.GetName()
	if len(t.GetBgp().GetPeers()) == 0 {
		ck.conflictf("mode", "a bgp pool in tenant %s's attachment is announced to the tenant's own speakers over its BGP sessions, and tenant %s has no bgp peers; give it bgp (tenant.bgp.peers) first, or use mode: arp", name, name)
		return
	}
	var four, six bool
	for _, s := range t.GetBgp().GetPeers() {
		if a, err := netip.ParseAddr(s); err == nil {
			four, six = four || a.Unmap().Is4(), six || !a.Unmap().Is4()
		}
	}
	var hosts4, hosts6 bool
	var segments []netip.Prefix
	for _, h := range t.GetAttachment().GetHosts() {
		if p, err := netip.ParsePrefix(h); err == nil {
			hosts4, hosts6 = hosts4 || p.Addr().Is4(), hosts6 || !p.Addr().Is4()
			if m := p.Masked(); !slices.Contains(segments, m) {
				segments = append(segments, m)
			}
		}
	}
	slices.SortFunc(segments, netip.Prefix.Compare)
	for i, r := range ranges {
		f := fmt.Sprintf("cidrs[%d]", i)
		is4 := r.From.Is4()
		fam := map[bool]string{true: "IPv4", false: "IPv6"}[is4]
		switch {
		case is4 && !four || !is4 && !six:
			ck.conflictf(f, "%s is %s and none of tenant %s's speakers (bgp.peers) is: a session of that family carries the route; add such a speaker, or leave the range out", r.text, fam, name)
		case is4 && !hosts4 || !is4 && !hosts6:
			ck.conflictf(f, "%s is %s and the hosts' addresses in tenant %s's attachment are not, so none can be its next hop; use a range of the attachment's family", r.text, fam, name)
		}
		// Every announcing host holds the VIP on its device in the
		// attachment, where the kernel answers ARP for it: inside the
		// segment, each would answer for the same address.
		for _, seg := range segments {
			if r.Overlaps(PrefixRange(seg)) {
				ck.conflictf(f, "%s overlaps %s, the segment of tenant %s's attachment: a bgp pool's VIP is held by every announcing host, and on the segment each would answer ARP for it; use a range of the tenant's networks outside the segment, routed to the hosts by the announcement", r.text, seg, name)
				break
			}
		}
	}
}
