package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ValidateTenant checks a tenant as it would be stored: its name, domains
// and networks (which no other tenant may overlap), pools, and that the change
// leaves none of its current load balancers broken.
func ValidateTenant(t *pb.Tenant, c Catalog) error {
	c = orEmpty(c)
	ck := &checker{}
	if t == nil {
		ck.invalidf("", "no tenant given")
		return ck.err(KindTenant)
	}
	checkName(ck, "name", t.GetName())
	if tooMany(ck, "domains", len(t.GetDomains()), MaxTenantDomains) ||
		tooMany(ck, "networks", len(t.GetNetworks()), MaxTenantNetworks) ||
		tooMany(ck, "pools", len(t.GetPools()), MaxTenantPools) ||
		tooMany(ck, "revokedCredentials", len(t.GetRevokedCredentials()), MaxRevokedCredentials) {
		return ck.err(objRef(KindTenant, "", t.GetName()))
	}
	domains := checkTenantDomains(ck, t, c)
	nets := checkTenantNetworks(ck, t)
	checkTenantPools(ck, t, c)
	checkTenantBGP(ck, t, nets)
	checkTenantAttachment(ck, t, nets, c)
	checkNetworkOwners(ck, t, nets, c)
	checkAttachmentPools(ck, t, nets, c)
	if ck.ok() {
		checkTenantOrphans(ck, t, domains, nets, c)
	}
	return ck.err(objRef(KindTenant, "", t.GetName()))
}

// checkTenantDomains returns the well-formed domains.
func checkTenantDomains(ck *checker, t *pb.Tenant, c Catalog) []string {
	var valid []string
	seen := map[string]int{}
	others := sortedTenants(c)
	for i, d := range t.GetDomains() {
		f := fmt.Sprintf("domains[%d]", i)
		if rest, ok := strings.CutPrefix(d, "*."); ok {
			ck.invalidf(f, "%q: wildcards are not allowed; %s covers itself and all its subdomains", d, rest)
			continue
		}
		if why := DNSNameProblem(d); why != "" {
			ck.invalidf(f, "%s", why)
			continue
		}
		if j, dup := seen[d]; dup {
			ck.invalidf(f, "%s is already listed as domains[%d]", d, j)
			continue
		}
		seen[d] = i
		valid = append(valid, d)
		checkDomainOwner(ck, f, d, t.GetName(), others)
	}
	return valid
}

// checkDomainOwner refuses a domain that equals, contains or lies inside
// another tenant's domain; it names the first such tenant.
func checkDomainOwner(ck *checker, f, d, self string, others []*pb.Tenant) {
	for _, o := range others {
		if o.GetName() == self {
			continue
		}
		for _, od := range o.GetDomains() {
			switch {
			case d == od:
				ck.conflictf(f, "domain %s is owned by tenant %s", d, o.GetName())
			case InDomain(d, od):
				ck.conflictf(f, "domain %s is inside %s, owned by tenant %s", d, od, o.GetName())
			case InDomain(od, d):
				ck.conflictf(f, "domain %s contains %s, owned by tenant %s", d, od, o.GetName())
			default:
				continue
			}
			return
		}
	}
}

// checkTenantNetworks returns the well-formed networks.
func checkTenantNetworks(ck *checker, t *pb.Tenant) []netip.Prefix {
	var valid []netip.Prefix
	seen := map[netip.Prefix]int{}
	for i, s := range t.GetNetworks() {
		f := fmt.Sprintf("networks[%d]", i)
		if tooLong(ck, f, s, MaxAddressLen) {
			continue
		}
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			ck.invalidf(f, "%q is not a CIDR (like 10.20.0.0/16 or 2001:db8:20::/64)", s)
			continue
		case p.Addr().Is4In6():
			ck.invalidf(f, "%s is an IPv4-mapped IPv6 prefix; write it in IPv4 form", s)
			continue
		case p != p.Masked():
			ck.invalidf(f, "%s is not in canonical form; use %s", s, p.Masked())
			continue
		}
		if j, dup := seen[p]; dup {
			ck.invalidf(f, "%s is already listed as networks[%d]", s, j)
			continue
		}
		seen[p] = i
		valid = append(valid, p)
	}
	return valid
}

func checkTenantPools(ck *checker, t *pb.Tenant, c Catalog) {
	checkNameList(ck, "pools", "pools", t.GetPools(), func(name string) string {
		p := c.Pool(name)
		if p == nil {
			return fmt.Sprintf("VIP pool %s does not exist; create it first", name)
		}
		if at := p.GetAttachment(); at != "" && at != t.GetName() {
			return fmt.Sprintf("VIP pool %s lives in tenant %s's attachment and serves that tenant only; remove it from pools", name, at)
		}
		return ""
	})
}

// checkTenantOrphans refuses a change that would leave one of the tenant's
// load balancers outside its pools, networks or domains.
func checkTenantOrphans(ck *checker, t *pb.Tenant, domains []string, nets []netip.Prefix, c Catalog) {
	lbs := c.LoadBalancers(t.GetName())
	if len(lbs) == 0 {
		return
	}
	lbs = sortedLBs(lbs)
	pools := parsePools(c)
	netNames := t.GetNetworks()
	for _, lb := range lbs {
		ref := lbRef(lb)
		if p := poolNameOf(lb, pools); p != "" && !slices.Contains(t.GetPools(), p) {
			ck.conflictf("pools", "VIP pool %s is still used by %s; keep it or move that load balancer first", p, ref)
		}
		if field, addr := firstMemberOutside(lb, nets, netNames); field != "" {
			ck.conflictf("networks", "%s has member %s (%s) outside the new networks; keep a network covering it or change that load balancer first", ref, addr, field)
		}
		if field, h := firstHostOutside(lb, domains); field != "" {
			ck.conflictf("domains", "%s routes host %s (%s) outside the new domains; keep a domain covering it or change that load balancer first", ref, h, field)
		}
		if t.GetAttachment() != nil {
			for _, k := range sortedKeys(lb.GetPools()) {
				if lb.GetPools()[k].GetClientSource() {
					ck.conflictf("attachment", "%s dials the members of pool %s from clients' addresses (clientSource), which the LB hosts do not do inside a tenant's own namespace; remove clientSource from that load balancer first (or use PROXY protocol)", ref, k)
					break
				}
			}
		}
	}
}

// firstHostOutside returns the first route or server-name route host of
// lb outside domains.
func firstHostOutside(lb *pb.LoadBalancer, domains []string) (field, host string) {
	for i, r := range lb.GetRoutes() {
		if h := r.GetHost(); h != "" && !HostInDomains(h, domains) {
			return fmt.Sprintf("routes[%d].host", i), h
		}
	}
	for i, l := range lb.GetListeners() {
		for j, r := range l.GetSniRoutes() {
			if h := r.GetHost(); h != "" && !HostInDomains(h, domains) {
				return fmt.Sprintf("listeners[%d].sniRoutes[%d].host", i, j), h
			}
		}
	}
	for i, h := range lb.GetHostnames() {
		if !HostInDomains(h, domains) {
			return fmt.Sprintf("hostnames[%d]", i), h
		}
	}
	return "", ""
}

// firstMemberOutside returns the first member (by sorted pool name) that
// the networks would refuse.
func firstMemberOutside(lb *pb.LoadBalancer, nets []netip.Prefix, names []string) (field, addr string) {
	keys := sortedKeys(lb.GetPools())
	for _, k := range keys {
		for i, m := range lb.GetPools()[k].GetMembers() {
			ap, why := parseMember(m.GetAddress())
			if why != "" {
				continue
			}
			if MemberNetworkProblem(ap.Addr(), nets, names) != "" {
				return fmt.Sprintf("pools.%s.members[%d]", k, i), m.GetAddress()
			}
		}
	}
	return "", ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
