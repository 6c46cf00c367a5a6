package api

import (
	"fmt"
	"net/netip"
	"slices"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// checkPoolAttachment checks a pool whose addresses live in a tenant's
// attachment (VIPPool.attachment): an arp pool, without an interface, of
// a tenant that has an attachment, whose addresses all lie inside that
// tenant's networks, and that serves that tenant only.
func checkPoolAttachment(ck *checker, p *pb.VIPPool, ranges []poolRange, c Catalog) {
	name := p.GetAttachment()
	if name == "" {
		return
	}
	if p.GetInterface() != "" {
		ck.invalidf("attachment", "a pool's addresses live on an interface of the host or in a tenant's attachment, not both; remove interface or attachment")
		return
	}
	if p.GetMode() != "arp" {
		ck.invalidf("attachment", "applies to arp pools only (this pool is %s): announcing a VIP over BGP from inside a tenant's namespace is not supported, and a static pool has no announcement to make there; use mode: arp", orUnset(p.GetMode()))
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
// tenant's networks.
func checkAttachmentPools(ck *checker, t *pb.Tenant, nets []netip.Prefix, c Catalog) {
	for _, name := range poolsInAttachment(c, t.GetName()) {
		if t.GetAttachment() == nil {
			ck.conflictf("attachment", "VIP pool %s lives in the tenant's attachment; delete that pool first", name)
			continue
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

// ownPool reports whether tenant may take addresses from p as far as
// attachments go: p lives in no attachment, or in the tenant's own.
func ownPool(p *pb.VIPPool, tenant string) bool {
	return p.GetAttachment() == "" || p.GetAttachment() == tenant
}
