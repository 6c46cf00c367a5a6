package api

import (
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// DefaultQuotas returns the bounds of a tenant whose quotas leave a field
// at zero. Zero never means "no limit": an operator raises a bound by
// setting it in the tenant's quotas. Connections are not listed: their
// defaults are derived on each LB host from its descriptor limit.
func DefaultQuotas() *pb.Quotas {
	return &pb.Quotas{
		LoadBalancers:  100,
		Addresses:      100,
		Certificates:   100,
		ListenersPerLb: 32,
		RoutesPerLb:    1000,
		PoolsPerLb:     64,
		MembersPerPool: 1000,
		Listeners:      500,
		Routes:         10000,
		Members:        10000,
		HealthChecks:   2000,
		StoredBytes:    DefaultStoredBytes,
		// Bytes a second the tenant's agents write, through all LB hosts.
		WriteBytesPerSecond: DefaultWriteBytesPerSecond,
		// Each regular expression a request meets costs it a program run;
		// route regexes seen in practice are a handful per load balancer.
		RegexMatchesPerLb:  64,
		RegexMatches:       1000,
		RegexCpuMillicores: DefaultRegexCPUMillicores,
		RateLimitKeys:      DefaultRateLimitKeys,
		WafCpuMillicores:   DefaultWAFCPUMillicores,
	}
}

// Hard bounds on what an object may hold, whoever writes it. Quotas bound
// counts a tenant uses; these bound sizes no one needs to exceed.
const (
	// MaxPathLen bounds route paths and health-check paths.
	MaxPathLen = 1024
	// MaxAddressLen bounds a member or VIP address as written.
	MaxAddressLen = 64
	// MaxHeaderNameLen bounds a header name (hashOn: header:NAME).
	MaxHeaderNameLen = 128
	// MaxTenantDomains, MaxTenantNetworks and MaxTenantPools bound a
	// tenant's lists.
	MaxTenantDomains  = 256
	MaxTenantNetworks = 256
	MaxTenantPools    = 64
	// MaxPoolCIDRs, MaxPoolTenants and MaxPoolCommunities bound a VIP
	// pool's lists.
	MaxPoolCIDRs       = 256
	MaxPoolTenants     = 1024
	MaxPoolCommunities = 32
	// MaxListenerCertificates bounds tls.certificates of a listener.
	MaxListenerCertificates = 16
	// MaxTrustedProxies bounds listeners[].trustedProxies.
	MaxTrustedProxies = 64
	// MaxSharingKeyLen bounds vip.sharingKey.
	MaxSharingKeyLen = 63
	// MaxRevokedCredentials bounds a tenant's revocation list.
	MaxRevokedCredentials = 10000
	// MaxObjectBytes bounds one load balancer's encoded size, so that any
	// object fits in one admin API message (gRPC's limit is 4 MB) whatever
	// quotas allow.
	MaxObjectBytes = 2 << 20
)

// EffectiveQuotas returns t's quotas with every unset field at its
// default. A nil tenant gets the defaults.
func EffectiveQuotas(t *pb.Tenant) *pb.Quotas {
	q := DefaultQuotas()
	set := t.GetQuotas()
	for _, f := range []struct {
		v   uint32
		dst *uint32
	}{
		{set.GetLoadBalancers(), &q.LoadBalancers},
		{set.GetAddresses(), &q.Addresses},
		{set.GetCertificates(), &q.Certificates},
		{set.GetListenersPerLb(), &q.ListenersPerLb},
		{set.GetRoutesPerLb(), &q.RoutesPerLb},
		{set.GetPoolsPerLb(), &q.PoolsPerLb},
		{set.GetMembersPerPool(), &q.MembersPerPool},
		{set.GetListeners(), &q.Listeners},
		{set.GetRoutes(), &q.Routes},
		{set.GetMembers(), &q.Members},
		{set.GetHealthChecks(), &q.HealthChecks},
		{set.GetConnections(), &q.Connections},
		{set.GetConnectionsPerListener(), &q.ConnectionsPerListener},
		{set.GetRegexMatchesPerLb(), &q.RegexMatchesPerLb},
		{set.GetRegexMatches(), &q.RegexMatches},
		{set.GetRegexCpuMillicores(), &q.RegexCpuMillicores},
		{set.GetRateLimitKeys(), &q.RateLimitKeys},
		{set.GetWafCpuMillicores(), &q.WafCpuMillicores},
		{set.GetCpuMillicores(), &q.CpuMillicores},
	} {
		if f.v != 0 {
			*f.dst = f.v
		}
	}
	if b := set.GetStoredBytes(); b != 0 {
		q.StoredBytes = b
	}
	if b := set.GetWriteBytesPerSecond(); b != 0 {
		q.WriteBytesPerSecond = b
	}
	return q
}

// PriorCatalog is implemented by a Catalog that is the view of a write in
// progress (the stored state with the write's objects in it). Prior is
// the state before the write; quotas count what a write adds against it,
// so an object in the write is never counted as already existing.
type PriorCatalog interface {
	Prior() Catalog
}

// priorOf returns the state before the write c is a view of; a Catalog
// that is not such a view is taken as that state itself.
func priorOf(c Catalog) Catalog {
	if p, ok := c.(PriorCatalog); ok {
		if pc := p.Prior(); pc != nil {
			return pc
		}
	}
	return c
}

// lbUsage counts what one load balancer uses of its tenant's quotas.
type lbUsage struct {
	listeners, routes, members, healthChecks, regexMatches int
}

func usageOf(lb *pb.LoadBalancer) lbUsage {
	u := lbUsage{listeners: len(lb.GetListeners()), routes: routeCount(lb), regexMatches: regexCount(lb)}
	for _, bp := range lb.GetPools() {
		n := len(bp.GetMembers())
		u.members += n
		if bp.GetHealthCheck() != nil {
			u.healthChecks += n
		}
	}
	return u
}

// routeCount counts a load balancer's routes as the route quotas do: a
// route with matches once per match (each is a route of its own in the
// data plane), one without once, and each server-name route of its
// listeners once.
func routeCount(lb *pb.LoadBalancer) int {
	n := 0
	for _, r := range lb.GetRoutes() {
		n += max(1, len(r.GetMatches()))
	}
	for _, l := range lb.GetListeners() {
		n += len(l.GetSniRoutes())
	}
	return n
}

func (u *lbUsage) add(o lbUsage) {
	u.listeners += o.listeners
	u.routes += o.routes
	u.members += o.members
	u.healthChecks += o.healthChecks
	u.regexMatches += o.regexMatches
}

func (u *lbUsage) sub(o lbUsage) {
	u.listeners -= o.listeners
	u.routes -= o.routes
	u.members -= o.members
	u.healthChecks -= o.healthChecks
	u.regexMatches -= o.regexMatches
}

// tenantUsage sums the usage of the tenant's load balancers in c, with lb
// (when not nil) counted as given instead of as stored.
func tenantUsage(c Catalog, tenant string, lb *pb.LoadBalancer) lbUsage {
	if idx, ok := c.(UsageIndex); ok {
		tu := idx.TenantUsage(tenant)
		u := lbUsage{listeners: tu.Listeners, routes: tu.Routes, members: tu.Members, healthChecks: tu.HealthChecks, regexMatches: tu.RegexMatches}
		if lb != nil {
			if old := c.LoadBalancer(tenant, lb.GetName()); old != nil {
				u.sub(usageOf(old))
			}
			u.add(usageOf(lb))
		}
		return u
	}
	var u lbUsage
	for _, o := range c.LoadBalancers(tenant) {
		if lb != nil && sameLB(o, lb) {
			continue
		}
		u.add(usageOf(o))
	}
	if lb != nil {
		u.add(usageOf(lb))
	}
	return u
}

const raiseHint = "the operator raises it in the tenant's quotas"

// checkLBBounds refuses a load balancer whose lists are over the per-LB
// quotas. A list that does not grow past what the stored load balancer
// already has is allowed, so lowering a quota never blocks other changes.
func checkLBBounds(ck *checker, lb *pb.LoadBalancer, q *pb.Quotas, old *pb.LoadBalancer) {
	over := func(field string, n, oldN int, limit uint32, quota, what string) {
		if n > int(limit) && n > oldN {
			ck.conflictf(field, "has %d %s; at most %d (quotas.%s; %s)", n, what, limit, quota, raiseHint)
		}
	}
	over("listeners", len(lb.GetListeners()), len(old.GetListeners()), q.GetListenersPerLb(), "listenersPerLb", "listeners")
	over("routes", routeCount(lb), routeCount(old), q.GetRoutesPerLb(), "routesPerLb", "routes (a route counts once per match)")
	over("pools", len(lb.GetPools()), len(old.GetPools()), q.GetPoolsPerLb(), "poolsPerLb", "pools")
	over("routes", regexCount(lb), regexCount(old), q.GetRegexMatchesPerLb(), "regexMatchesPerLb", "regular expressions (regex path, header, query and gRPC matches)")
	for _, k := range sortedKeys(lb.GetPools()) {
		n := len(lb.GetPools()[k].GetMembers())
		over("pools."+k+".members", n, len(old.GetPools()[k].GetMembers()), q.GetMembersPerPool(), "membersPerPool", "members")
	}
}

// checkTenantTotals refuses a write that takes the tenant's load
// balancers over a per-tenant total. Totals are counted in c (the state
// with the write) and compared with the state before it: only growth past
// a quota is refused.
func checkTenantTotals(ck *checker, lb *pb.LoadBalancer, q *pb.Quotas, c, prior Catalog, old *pb.LoadBalancer) {
	u, ou := usageOf(lb), usageOf(old)
	if u.listeners <= ou.listeners && u.routes <= ou.routes && u.members <= ou.members && u.healthChecks <= ou.healthChecks && u.regexMatches <= ou.regexMatches {
		return
	}
	after := tenantUsage(c, lb.GetTenant(), lb)
	before := tenantUsage(prior, lb.GetTenant(), nil)
	for _, t := range []struct {
		field          string
		after, before  int
		limit          uint32
		quota, counted string
	}{
		{"listeners", after.listeners, before.listeners, q.GetListeners(), "listeners", "listeners"},
		{"routes", after.routes, before.routes, q.GetRoutes(), "routes", "routes (a route counts once per match)"},
		{"pools", after.members, before.members, q.GetMembers(), "members", "members"},
		{"pools", after.healthChecks, before.healthChecks, q.GetHealthChecks(), "healthChecks", "health-checked members"},
		{"routes", after.regexMatches, before.regexMatches, q.GetRegexMatches(), "regexMatches", "regular expressions"},
	} {
		if t.after > int(t.limit) && t.after > t.before {
			ck.conflictf(t.field, "the tenant's load balancers would have %d %s in all; at most %d (quotas.%s; %s)", t.after, t.counted, t.limit, t.quota, raiseHint)
		}
	}
}

// checkLBQuota refuses a new load balancer beyond the tenant's quota. It
// counts the tenant's load balancers in c with lb among them, so several
// created in one write are counted together.
func checkLBQuota(ck *checker, lb *pb.LoadBalancer, q *pb.Quotas, c Catalog, old *pb.LoadBalancer) {
	if old != nil {
		return
	}
	n := 1
	if idx, ok := c.(UsageIndex); ok {
		n += idx.TenantUsage(lb.GetTenant()).LoadBalancers
		if c.LoadBalancer(lb.GetTenant(), lb.GetName()) != nil {
			n--
		}
	} else {
		for _, o := range c.LoadBalancers(lb.GetTenant()) {
			if !sameLB(o, lb) {
				n++
			}
		}
	}
	if n > int(q.GetLoadBalancers()) {
		ck.conflictf("tenant", "tenant %s has reached its quota of %d load balancers (quotas.loadBalancers); delete one or ask the operator to raise it", lb.GetTenant(), q.GetLoadBalancers())
	}
}

// checkQuotas checks lb against every count quota of its tenant.
func checkQuotas(ck *checker, lb *pb.LoadBalancer, tenant *pb.Tenant, c Catalog) {
	q := EffectiveQuotas(tenant)
	prior := priorOf(c)
	old := prior.LoadBalancer(lb.GetTenant(), lb.GetName())
	checkLBBounds(ck, lb, q, old)
	if tenant == nil {
		return
	}
	checkLBQuota(ck, lb, q, c, old)
	checkTenantTotals(ck, lb, q, c, prior, old)
	checkStoredBytes(ck, "", lb.GetTenant(), q, c, prior)
}

// tooLong says that field's value is over max bytes, without echoing it.
func tooLong(ck *checker, field string, s string, max int) bool {
	if len(s) <= max {
		return false
	}
	ck.invalidf(field, "is %d bytes long; at most %d", len(s), max)
	return true
}

// tooMany says that a list is over its hard bound.
func tooMany(ck *checker, field string, n, max int) bool {
	if n <= max {
		return false
	}
	ck.invalidf(field, "has %d entries; at most %d", n, max)
	return true
}
