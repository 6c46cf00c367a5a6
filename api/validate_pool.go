package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ValidatePool checks a VIP pool as it would be stored: its ranges (which
// overlap neither each other nor another pool), mode, tenants and BGP
// communities, and that the change leaves every load balancer holding an
// address from it valid.
func ValidatePool(p *pb.VIPPool, c Catalog) error {
	c = orEmpty(c)
	ck := &checker{}
	if p == nil {
		ck.invalidf("", "no VIP pool given")
		return ck.err(KindVIPPool)
	}
	checkName(ck, "name", p.GetName())
	if tooMany(ck, "cidrs", len(p.GetCidrs()), MaxPoolCIDRs) ||
		tooMany(ck, "tenants", len(p.GetTenants()), MaxPoolTenants) ||
		tooMany(ck, "communities", len(p.GetCommunities()), MaxPoolCommunities) {
		return ck.err(objRef(KindVIPPool, "", p.GetName()))
	}
	ranges := checkPoolRanges(ck, p, c)
	switch p.GetMode() {
	case "arp", "bgp", "static":
	case "":
		ck.invalidf("mode", "required: arp, bgp or static")
	default:
		ck.invalidf("mode", "%q is not one of arp, bgp, static", p.GetMode())
	}
	if p.GetWithdrawWhenDown() && p.GetMode() != "bgp" {
		ck.invalidf("withdrawWhenDown", "applies to bgp pools only (this pool is %s): elsewhere a VIP with no healthy member stays held, as no other site can take its traffic; remove the field or use mode: bgp", orUnset(p.GetMode()))
	}
	checkPoolInterface(ck, p)
	checkPoolAttachment(ck, p, ranges, c)
	checkNameList(ck, "tenants", "tenants", p.GetTenants(), func(name string) string {
		if c.Tenant(name) == nil {
			return fmt.Sprintf("tenant %s does not exist", name)
		}
		return ""
	})
	for i, cm := range p.GetCommunities() {
		if !validCommunity(cm) {
			ck.invalidf(fmt.Sprintf("communities[%d]", i), "%q must be ASN:VALUE with two numbers from 0 to 65535, like 65000:100", cm)
		}
	}
	if ck.ok() {
		checkPoolUsers(ck, p, ranges, c)
	}
	return ck.err(objRef(KindVIPPool, "", p.GetName()))
}

// checkPoolRanges parses the entries and refuses overlaps inside the pool
// and with other pools. It returns the well-formed entries.
func checkPoolRanges(ck *checker, p *pb.VIPPool, c Catalog) []poolRange {
	if len(p.GetCidrs()) == 0 {
		ck.invalidf("cidrs", "at least one CIDR or range is required, %s", rangeExample)
		return nil
	}
	type entry struct {
		poolRange
		index int
	}
	others := parsePools(c)
	var ok []entry
	for i, s := range p.GetCidrs() {
		f := fmt.Sprintf("cidrs[%d]", i)
		if tooLong(ck, f, s, 2*MaxAddressLen) {
			continue
		}
		pr, err := parsePoolRange(s)
		if err != nil {
			ck.invalidf(f, "%s", err.Error())
			continue
		}
		overlap := false
		for _, e := range ok {
			if e.Overlaps(pr.Range) {
				ck.invalidf(f, "%s overlaps cidrs[%d] (%s)", pr.text, e.index, e.text)
				overlap = true
				break
			}
		}
		if overlap {
			continue
		}
		ok = append(ok, entry{pr, i})
	other:
		for _, o := range others {
			if o.pool.GetName() == p.GetName() {
				continue
			}
			why := ""
			if separateAttachments(p, o.pool) {
				if why = announcedAlike(p, o.pool); why == "" {
					continue
				}
			}
			for _, or := range o.ranges {
				if pr.Overlaps(or.Range) {
					ck.conflictf(f, "%s overlaps %s of VIP pool %s%s", pr.text, or.text, o.pool.GetName(), why)
					break other
				}
			}
		}
	}
	out := make([]poolRange, len(ok))
	for i, e := range ok {
		out[i] = e.poolRange
	}
	return out
}

func validCommunity(s string) bool {
	asn, val, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	for _, part := range []string{asn, val} {
		if part == "" || part[0] == '+' || part[0] == '-' {
			return false
		}
		if _, err := strconv.ParseUint(part, 10, 16); err != nil {
			return false
		}
	}
	return true
}

// checkPoolUsers refuses a change that would leave a load balancer holding
// an address outside the pool, in a pool its tenant may no longer use, or
// sharing an address the pool no longer lets it share.
func checkPoolUsers(ck *checker, p *pb.VIPPool, ranges []poolRange, c Catalog) {
	var oldRanges []poolRange
	if old := c.Pool(p.GetName()); old != nil {
		oldRanges = parseRanges(old.GetCidrs())
	}
	type user struct {
		lb   *pb.LoadBalancer
		addr netip.Addr
	}
	var users []user
	for _, lb := range c.LoadBalancers("") {
		for _, a := range StatusAddrs(lb) {
			vp := lb.GetVip().GetPool()
			if (vp == p.GetName() || vp == "" && rangesContain(oldRanges, a)) && ownPool(p, lb.GetTenant()) {
				users = append(users, user{lb, a})
			}
		}
	}
	if len(users) == 0 {
		return
	}
	slices.SortFunc(users, func(a, b user) int { return cmpLB(a.lb, b.lb) })
	holders := map[netip.Addr]*pb.LoadBalancer{}
	for i, u := range users {
		ref := lbRef(u.lb)
		if !usableContain(ranges, u.addr) {
			ck.conflictf("cidrs", "%s holds %s, which would fall outside the pool; keep it in cidrs or move that load balancer first", ref, u.addr)
		}
		if len(p.GetTenants()) > 0 && !slices.Contains(p.GetTenants(), u.lb.GetTenant()) && (i == 0 || users[i-1].lb != u.lb) {
			ck.conflictf("tenants", "%s of tenant %s uses this pool; add %s to tenants or move that load balancer first", ref, u.lb.GetTenant(), u.lb.GetTenant())
		}
		if h, shared := holders[u.addr]; shared && !p.GetAllowShared() {
			ck.conflictf("allowShared", "%s and %s share %s; keep allowShared or move one of them first", lbRef(h), ref, u.addr)
		} else if !shared {
			holders[u.addr] = u.lb
		}
	}
}

func orUnset(mode string) string {
	if mode == "" {
		return "unset"
	}
	return mode
}

// MaxInterfaceNameLen is the longest name Linux gives an interface
// (IFNAMSIZ less the terminating NUL).
const MaxInterfaceNameLen = 15

// checkPoolInterface checks the interface an arp pool names: a name
// Linux could give an interface. Whether a host has it is that host's to
// report.
func checkPoolInterface(ck *checker, p *pb.VIPPool) {
	name := p.GetInterface()
	if name == "" {
		return
	}
	if p.GetMode() != "arp" {
		ck.invalidf("interface", "applies to arp pools only (this pool is %s): bgp pools put their addresses on each host's bgp.interface and static pools on none; remove the field or use mode: arp", orUnset(p.GetMode()))
		return
	}
	if InterfaceNameProblem(name) != "" {
		ck.invalidf("interface", "%s", InterfaceNameProblem(name))
	}
}

// InterfaceNameProblem says why name cannot be a Linux interface's name
// ("" when it can): 1 to 15 bytes, not "." or "..", without "/", ":" or
// white space.
func InterfaceNameProblem(name string) string {
	switch {
	case len(name) > MaxInterfaceNameLen:
		return fmt.Sprintf("is %d bytes long; an interface name has at most %d", len(name), MaxInterfaceNameLen)
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not an interface name", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r == ':' || r <= ' ' || r >= 0x7f }):
		return fmt.Sprintf("%q is not an interface name: no \"/\", \":\", white space or other than printable ASCII", name)
	}
	return ""
}
