package api

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// MaxNetworkOverlapsShown bounds the overlaps NetworkOverlaps lists; the
// rest are counted in one line.
const MaxNetworkOverlapsShown = 20

// checkNetworkOwners refuses a network of t that overlaps a network of
// another tenant unless both tenants have an attachment: without one a
// tenant is dialled from the hosts' one routing table, so a tenant whose
// networks overlap another's could point members at the other's nodes.
// It names the first such network of the other tenant. An overlap stored
// before such writes were refused (the same network of t and of the other
// tenant, both in the state before the write, not both attached then) is
// kept, so that an upgraded cluster can still change those tenants;
// NetworkOverlaps reports it. Detaching one of two overlapping attached
// tenants is refused like a new overlap.
func checkNetworkOwners(ck *checker, t *pb.Tenant, nets []netip.Prefix, c Catalog) {
	if len(nets) == 0 {
		return
	}
	prior := priorOf(c)
	self := t.GetName()
	was := parseNetworks(prior.Tenant(self).GetNetworks())
	others := sortedTenants(c)
	for i, p := range t.GetNetworks() {
		pp, err := netip.ParsePrefix(p)
		if err != nil || !slices.Contains(nets, pp) {
			continue
		}
		f := fmt.Sprintf("networks[%d]", i)
	tenants:
		for _, o := range others {
			if o.GetName() == self || t.GetAttachment() != nil && o.GetAttachment() != nil {
				continue
			}
			for _, q := range parseNetworks(o.GetNetworks()) {
				if !pp.Overlaps(q) {
					continue
				}
				po := prior.Tenant(o.GetName())
				if slices.Contains(was, pp) && slices.Contains(parseNetworks(po.GetNetworks()), q) &&
					(prior.Tenant(self).GetAttachment() == nil || po.GetAttachment() == nil) {
					continue
				}
				ck.conflictf(f, "network %s overlaps %s of tenant %s; tenants share addresses only when both are attached through a namespace of their own (attachment), so attach both or narrow one of them", pp, q, o.GetName())
				break tenants
			}
		}
	}
}

// parseNetworks returns the networks that parse, masked; stored ones are
// well formed, but a value an older release let through is skipped.
func parseNetworks(ss []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// NetworkOverlaps lists the pairs of tenants' networks in c that overlap
// while not both tenants are attached ("tenant a: network 10.0.0.0/8 overlaps 10.20.0.0/16 of tenant b"),
// which writes refuse but a state written by an older release may hold. It
// lists at most MaxNetworkOverlapsShown and then counts the rest; it costs
// a sort of every tenant's networks and the overlaps found.
func NetworkOverlaps(c Catalog) []string {
	type owned struct {
		p      netip.Prefix
		tenant string
	}
	var all []owned
	attached := map[string]bool{}
	for _, t := range c.Tenants() {
		for _, p := range parseNetworks(t.GetNetworks()) {
			all = append(all, owned{p, t.GetName()})
		}
		attached[t.GetName()] = t.GetAttachment() != nil
	}
	// CIDRs are either nested or disjoint: sorted by address and then by
	// length, each one's enclosing networks are on the stack.
	slices.SortFunc(all, func(a, b owned) int {
		return cmp.Or(a.p.Addr().Compare(b.p.Addr()), cmp.Compare(a.p.Bits(), b.p.Bits()), cmp.Compare(a.tenant, b.tenant))
	})
	var out []string
	more := 0
	var stack []owned
	for _, x := range all {
		for len(stack) > 0 && !stack[len(stack)-1].p.Overlaps(x.p) {
			stack = stack[:len(stack)-1]
		}
		for _, s := range stack {
			if s.tenant == x.tenant || attached[s.tenant] && attached[x.tenant] {
				continue
			}
			if len(out) == MaxNetworkOverlapsShown {
				more++
				continue
			}
			out = append(out, fmt.Sprintf("tenant %s: network %s overlaps %s of tenant %s; narrow one of them (writes of new overlaps are refused)", s.tenant, s.p, x.p, x.tenant))
		}
		stack = append(stack, x)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("%d more overlaps of tenants' networks", more))
	}
	return out
}
