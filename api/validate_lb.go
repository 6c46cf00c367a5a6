package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ValidateLoadBalancer checks a load balancer as it would be stored: the
// tenant and VIP request, listeners, routes and backend pools, the tenant's
// quotas, and status.address (when set) against its pool and the other
// load balancers.
func ValidateLoadBalancer(lb *pb.LoadBalancer, c Catalog) error {
	c = orEmpty(c)
	ck := &checker{}
	if lb == nil {
		ck.invalidf("", "no load balancer given")
		return ck.err(KindLoadBalancer)
	}
	checkName(ck, "name", lb.GetName())
	if n := proto.Size(lb); n > MaxObjectBytes {
		ck.invalidf("", "is %d bytes encoded; at most %d; split it into several load balancers", n, MaxObjectBytes)
		return ck.err(lbRef(lb))
	}
	if tooLong(ck, "vip.address", lb.GetVip().GetAddress(), MaxAddressLen) {
		return ck.err(lbRef(lb))
	}
	tooLong(ck, "vip.sharingKey", lb.GetVip().GetSharingKey(), MaxSharingKeyLen)
	tenant := lookupTenant(ck, lb.GetTenant(), c)
	ck.rx = &regexMemo{skip: regexOverQuota(lb, tenant, c)}
	vip := resolveVIP(ck, lb, tenant, c)
	checkListeners(ck, lb, tenant, c)
	checkRoutes(ck, lb, tenant)
	checkHostnames(ck, lb, tenant)
	checkBackendPools(ck, lb, tenant, c)
	checkQuotas(ck, lb, tenant, c)
	checkStatusAddress(ck, lb, tenant, vip, c)
	if s := lb.GetAccessLog().GetSample(); !(s >= 0 && s <= 1) {
		ck.invalidf("accessLog.sample", "is %v; use a share of requests between 0 and 1 (0 or unset logs every request)", s)
	}
	return ck.err(lbRef(lb))
}

func lookupTenant(ck *checker, name string, c Catalog) *pb.Tenant {
	if !checkName(ck, "tenant", name) {
		return nil
	}
	t := c.Tenant(name)
	if t == nil {
		ck.invalidf("tenant", "tenant %s does not exist", name)
	}
	return t
}

// vipTarget is a load balancer's VIP request resolved against the pools.
type vipTarget struct {
	pool   *pb.VIPPool
	ranges []poolRange
	// want is vip.address, when given and well-formed.
	want netip.Addr
	// family is vip.family: "", "ipv4" or "ipv6".
	family string
	// families is vip.families (its well-formed entries): one address of
	// each; nil asks for one address of family.
	families []string
	// prefer is vip.familyPolicy prefer.
	prefer bool
}

func familyName(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}

// familyOK reports whether a belongs to family ("" admits both).
func familyOK(family string, a netip.Addr) bool {
	return family == "" || (family == "ipv4") == a.Is4()
}

func (v *vipTarget) hasFamily(is4 bool) bool {
	for _, r := range v.ranges {
		if r.From.Is4() == is4 {
			return true
		}
	}
	return false
}

func (v *vipTarget) describe() string {
	return fmt.Sprintf("pool %s (%s)", v.pool.GetName(), strings.Join(v.pool.GetCidrs(), ", "))
}

// placeProblem says why a may not be a VIP in the target pool, or "".
func (v *vipTarget) placeProblem(a netip.Addr) string {
	if !rangesContain(v.ranges, a) {
		return fmt.Sprintf("%s is outside %s", a, v.describe())
	}
	for _, r := range v.ranges {
		if why := r.reserved(a); why != "" {
			return fmt.Sprintf("%s is %s in pool %s and is never handed out; choose another address", a, why, v.pool.GetName())
		}
	}
	return ""
}

// resolveVIP checks the VIP request and finds its pool; the result's pool
// is nil when there is none to check against.
func resolveVIP(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant, c Catalog) *vipTarget {
	v := &vipTarget{family: lb.GetVip().GetFamily()}
	switch v.family {
	case "", "ipv4", "ipv6":
	default:
		ck.invalidf("vip.family", "%q is not one of ipv4, ipv6 (or empty for the pool's default)", v.family)
		v.family = ""
	}
	checkFamilies(ck, lb.GetVip(), v)
	if s := lb.GetVip().GetAddress(); s != "" {
		a, err := parseVIPAddr(s)
		switch {
		case err != nil:
			ck.invalidf("vip.address", "%s", err.Error())
		case !familyOK(v.family, a):
			ck.invalidf("vip.family", "%s does not match vip.address %s", v.family, a)
		case len(v.families) > 0 && !slices.ContainsFunc(v.families, func(f string) bool { return familyOK(f, a) }):
			ck.invalidf("vip.address", "%s is an %s address and vip.families lists no %s; add it or request an address of a listed family", a, familyName(a.Is4()), familyKey(a.Is4()))
		default:
			v.want = a
		}
	}
	poolField := "vip.pool"
	if name := lb.GetVip().GetPool(); name != "" {
		if !checkName(ck, poolField, name) {
			return v
		}
		if v.pool = c.Pool(name); v.pool == nil {
			ck.invalidf(poolField, "VIP pool %s does not exist", name)
			return v
		}
		v.ranges = parseRanges(v.pool.GetCidrs())
	} else if v.want.IsValid() {
		poolField = "vip.address"
		for _, p := range parsePools(c) {
			if rangesContain(p.ranges, v.want) && ownPool(p.pool, lb.GetTenant()) {
				v.pool, v.ranges = p.pool, p.ranges
				break
			}
		}
		if v.pool == nil {
			ck.invalidf(poolField, "%s is not inside any VIP pool", v.want)
			return v
		}
	} else {
		if lb.GetVip().GetAddress() == "" {
			ck.invalidf("vip.pool", "required: name a VIP pool the tenant may use, or set vip.address")
		}
		return v
	}
	if tenant != nil {
		name := v.pool.GetName()
		if at := v.pool.GetAttachment(); at != "" && at != tenant.GetName() {
			ck.invalidf(poolField, "VIP pool %s lives in tenant %s's attachment and serves that tenant only; use one of the tenant's own pools (%s)", name, at, listOrNone(tenant.GetPools(), "none"))
		} else if !slices.Contains(tenant.GetPools(), name) {
			ck.invalidf(poolField, "tenant %s may not use VIP pool %s (the tenant's pools: %s)", tenant.GetName(), name, listOrNone(tenant.GetPools(), "none"))
		} else if ts := v.pool.GetTenants(); len(ts) > 0 && !slices.Contains(ts, tenant.GetName()) {
			ck.invalidf(poolField, "VIP pool %s is reserved for other tenants; use one of the tenant's pools (%s)", name, listOrNone(tenant.GetPools(), "none"))
		}
	}
	if v.family != "" && !v.hasFamily(v.family == "ipv4") {
		ck.invalidf("vip.family", "VIP pool %s has no %s addresses", v.pool.GetName(), familyName(v.family == "ipv4"))
	}
	var missing []string
	for _, f := range v.families {
		if !v.hasFamily(f == "ipv4") {
			missing = append(missing, familyName(f == "ipv4"))
		}
	}
	switch {
	case len(missing) == 0:
	case len(missing) == len(v.families):
		ck.invalidf("vip.families", "VIP pool %s has no %s addresses; use a pool with addresses of a listed family, or ask the operator to add a CIDR of that family to %s", v.pool.GetName(), strings.Join(missing, " or "), v.pool.GetName())
	case !v.prefer:
		ck.invalidf("vip.families", "VIP pool %s has no %s addresses, and familyPolicy require needs one VIP of each listed family; ask the operator to add an %s CIDR to the pool, or set familyPolicy: prefer to be served on the other family alone", v.pool.GetName(), missing[0], missing[0])
	}
	if v.want.IsValid() {
		if why := v.placeProblem(v.want); why != "" {
			ck.invalidf("vip.address", "%s", why)
		}
	}
	return v
}

// checkFamilies checks vip.families and vip.familyPolicy into v.
func checkFamilies(ck *checker, req *pb.VIPRequest, v *vipTarget) {
	fams := req.GetFamilies()
	if len(fams) > 0 && v.family != "" {
		ck.invalidf("vip.family", "set vip.families or vip.family, not both (vip.families: [%s] gives one VIP of each)", familyKey(v.family == "ipv4"))
	}
	if len(fams) > 2 {
		ck.invalidf("vip.families", "lists %d families; at most 2, one of each of ipv4 and ipv6", len(fams))
		fams = nil
	}
	for i, f := range fams {
		switch {
		case f != "ipv4" && f != "ipv6":
			ck.invalidf(fmt.Sprintf("vip.families[%d]", i), "%.20q is not one of ipv4, ipv6", f)
		case slices.Contains(v.families, f):
			ck.invalidf(fmt.Sprintf("vip.families[%d]", i), "%s is listed twice; list each family once", f)
		default:
			v.families = append(v.families, f)
		}
	}
	switch p := req.GetFamilyPolicy(); p {
	case "":
	case "require", "prefer":
		if len(fams) == 0 {
			ck.invalidf("vip.familyPolicy", "applies to vip.families, which is unset; list the families (vip.families: [ipv4, ipv6]) or remove it")
		}
		v.prefer = p == "prefer"
	default:
		ck.invalidf("vip.familyPolicy", "%.20q is not one of require, prefer (or empty for require)", p)
	}
}

// familyKey spells a family as vip.family and vip.families do.
func familyKey(is4 bool) string {
	if is4 {
		return "ipv4"
	}
	return "ipv6"
}

// addressQuotaProblem says why lb holding a would take the tenant over its
// address quota, or returns "". An address the load balancer already held
// is always allowed, so lowering a quota never blocks updates. taken are
// lb's addresses of its other families, chosen already: those the tenant
// does not hold otherwise count too.
func addressQuotaProblem(lb *pb.LoadBalancer, tenant *pb.Tenant, a netip.Addr, taken []netip.Addr, c Catalog) string {
	q := EffectiveQuotas(tenant).GetAddresses()
	if old := priorOf(c).LoadBalancer(lb.GetTenant(), lb.GetName()); old != nil && holdsAny(old, a) {
		return ""
	}
	pending := 0
	for _, t := range taken {
		if t != a && !holdsAddress(lb, t, c) {
			pending++
		}
	}
	if holdsAddress(lb, a, c) || tenantAddressCount(lb, c)+pending+1 <= int(q) {
		return ""
	}
	return fmt.Sprintf("tenant %s has reached its quota of %d addresses (quotas.addresses); share one with vip.sharingKey or ask the operator to raise it", tenant.GetName(), q)
}

// checkStatusAddress checks the allocated addresses (status.address, and
// status.addresses with vip.families) against the request, the pool, the
// other load balancers and the tenant's quota.
func checkStatusAddress(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant, v *vipTarget, c Catalog) {
	s := lb.GetStatus().GetAddress()
	all := lb.GetStatus().GetAddresses()
	switch {
	case len(all) > 0 && len(v.families) == 0:
		ck.invalidf("status.addresses", "is set only for a load balancer with vip.families")
		return
	case len(all) > 0 && all[0] != s:
		ck.invalidf("status.addresses", "must start with status.address %.64q", s)
		return
	case len(all) > len(v.families) && len(v.families) > 0:
		ck.invalidf("status.addresses", "holds %d addresses; at most one per family of vip.families", len(all))
		return
	case s == "":
		return
	}
	if len(all) == 0 {
		all = []string{s}
	}
	var taken []netip.Addr
	for i, s := range all {
		f := "status.address"
		if len(lb.GetStatus().GetAddresses()) > 0 {
			f = fmt.Sprintf("status.addresses[%d]", i)
		}
		a, err := parseVIPAddr(s)
		if err != nil {
			ck.invalidf(f, "%s", err.Error())
			return
		}
		if slices.ContainsFunc(taken, func(t netip.Addr) bool { return t.Is4() == a.Is4() }) {
			ck.invalidf(f, "%s is a second %s address; one per family", a, familyName(a.Is4()))
			return
		}
		if v.want.IsValid() && a.Is4() == v.want.Is4() && a != v.want {
			ck.invalidf(f, "%s differs from vip.address %s", a, v.want)
			return
		}
		if !familyOK(v.family, a) {
			ck.invalidf(f, "%s is not an %s address as vip.family asks", a, familyName(v.family == "ipv4"))
			return
		}
		if len(v.families) > 0 && !slices.Contains(v.families, familyKey(a.Is4())) {
			ck.invalidf(f, "%s is an %s address and vip.families lists no %s", a, familyName(a.Is4()), familyKey(a.Is4()))
			return
		}
		if v.pool == nil {
			return
		}
		if why := v.placeProblem(a); why != "" {
			ck.invalidf(f, "%s", why)
			return
		}
		if why := addressBlocker(lb, a, v.pool, c); why != "" {
			ck.conflictf(f, "%s", why)
		}
		if tenant != nil {
			if why := addressQuotaProblem(lb, tenant, a, taken, c); why != "" {
				ck.conflictf(f, "%s", why)
			}
		}
		taken = append(taken, a)
	}
	if len(v.families) > len(taken) && !v.prefer && ck.ok() {
		ck.invalidf("status.addresses", "holds %d addresses for the %d families of vip.families, and familyPolicy require needs one of each", len(taken), len(v.families))
	}
}

// LoadBalancerProblems returns what is wrong with a valid load balancer
// without making it invalid, for status.problems: backend pools nothing
// sends traffic to, and http(s) listeners without routes.
func LoadBalancerProblems(lb *pb.LoadBalancer) []*pb.Problem {
	var out []*pb.Problem
	if p := FamilyProblem(lb); p != nil {
		out = append(out, p)
	}
	used := map[string]bool{}
	hasRoutes := len(lb.GetRoutes()) > 0
	for _, l := range lb.GetListeners() {
		used[l.GetPool()] = true
		for _, r := range l.GetSniRoutes() {
			used[r.GetPool()] = true
		}
	}
	for _, r := range lb.GetRoutes() {
		used[r.GetPool()] = true
		for _, b := range r.GetBackends() {
			used[b.GetPool()] = true
		}
		for _, f := range r.GetFilters() {
			if m := f.GetRequestMirror(); m != nil {
				used[m.GetPool()] = true
			}
		}
	}
	for i, l := range lb.GetListeners() {
		p := l.GetProtocol()
		if (p == "http" || p == "https") && !hasRoutes && !l.GetRedirectToHttps() {
			out = append(out, &pb.Problem{
				Field:  fmt.Sprintf("listeners[%d]", i),
				Reason: "no routes: every request gets 404; add a route",
			})
		}
	}
	for i, r := range lb.GetRoutes() {
		if bs := r.GetBackends(); len(bs) > 0 && allZeroWeights(bs) {
			out = append(out, &pb.Problem{
				Field:  fmt.Sprintf("routes[%d].backends", i),
				Reason: "every backend weighs 0: every request of the route gets 500",
			})
		}
	}
	for _, k := range sortedKeys(lb.GetPools()) {
		if !used[k] {
			out = append(out, &pb.Problem{
				Field:  "pools." + k,
				Reason: "unused: no listener or route sends traffic to this pool",
			})
		}
	}
	return out
}

func allZeroWeights(bs []*pb.RouteBackend) bool {
	for _, b := range bs {
		if b.Weight == nil || b.GetWeight() > 0 {
			return false
		}
	}
	return true
}

// FamilyProblem says which families of vip.families a load balancer
// under familyPolicy prefer was given no address of, or returns nil.
func FamilyProblem(lb *pb.LoadBalancer) *pb.Problem {
	fams := lb.GetVip().GetFamilies()
	got := StatusAddrs(lb)
	if len(fams) == 0 || len(got) == 0 {
		return nil
	}
	var missing []string
	for _, f := range fams {
		if !slices.ContainsFunc(got, func(a netip.Addr) bool { return familyOK(f, a) }) {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &pb.Problem{
		Field: "vip.families",
		Reason: fmt.Sprintf("no %s VIP: pool %s had no free %s address when the load balancer was written (familyPolicy prefer), so it is served on %s alone; once the operator has added %s addresses to the pool, apply the load balancer again (the agent does so with the Service's next change)",
			strings.Join(missing, ", "), lb.GetVip().GetPool(), strings.Join(missing, ", "), familyName(got[0].Is4()), strings.Join(missing, ", ")),
	}
}

// MaxHostnames bounds a load balancer's hostnames: the DNS names its VIP
// is answered for besides its route hosts.
const MaxHostnames = 32

// checkHostnames checks hostnames: each an exact or wildcard name inside
// the tenant's domains, none twice, at most MaxHostnames.
func checkHostnames(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant) {
	hs := lb.GetHostnames()
	if len(hs) > MaxHostnames {
		ck.invalidf("hostnames", "has %d names; at most %d per load balancer: split them over several load balancers", len(hs), MaxHostnames)
		return
	}
	seen := map[string]int{}
	for i, h := range hs {
		f := fmt.Sprintf("hostnames[%d]", i)
		if h == "" {
			ck.invalidf(f, "is empty; give a DNS name like shop.acme.example")
			continue
		}
		if !checkRouteHostIn(ck, f, h, tenant) {
			continue
		}
		if j, dup := seen[h]; dup {
			ck.invalidf(f, "%s repeats hostnames[%d]", h, j)
		}
		seen[h] = i
	}
}
