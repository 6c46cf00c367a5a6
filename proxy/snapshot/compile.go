package snapshot

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Compile turns the full desired state (every LoadBalancer, Tenant and
// VIPPool; other kinds are ignored) into a snapshot. Only load balancers
// with a status.address are served. What is broken in one load balancer is
// reported in Problems under "tenant/name" and skipped: a member that does
// not parse, a listener whose address and port another load balancer
// already serves, a route to a missing pool.
//
// prev is the snapshot in service (or nil). Of two load balancers claiming
// one listen key, the one prev serves there keeps it; otherwise the older
// one (meta.created), then the first by tenant and name. Unchanged Listener
// and Pool values are taken from prev, and when nothing changed Compile
// returns prev itself.
func Compile(objs []*pb.Object, revision uint64, d Defaults, prev *Snapshot) *Snapshot {
	c := newCompiler(objs, d.WithDefaults(), prev)
	for _, lb := range c.lbs {
		c.loadBalancer(lb)
	}
	s := &Snapshot{Revision: revision, Listeners: c.resolveClaims(), Problems: c.problems}
	if s.sameAs(prev) {
		return prev
	}
	return s
}

type tenantInfo struct {
	domains []string
	nets    []netip.Prefix
	// conns and connsPerListener are the tenant's connection quotas (0:
	// the host's defaults).
	conns, connsPerListener int
}

type compiler struct {
	d         Defaults
	prev      *Snapshot
	prevPools map[[2]string]*Pool
	tenants   map[string]*tenantInfo
	vipRanges []api.Range
	lbs       []*pb.LoadBalancer
	problems  map[string][]Problem
	claims    map[Key][]claim
	created   map[string]int64
}

// claim is a listener that wants a listen key.
type claim struct {
	l     *Listener
	field string
}

func newCompiler(objs []*pb.Object, d Defaults, prev *Snapshot) *compiler {
	c := &compiler{
		d:        d,
		prev:     prev,
		tenants:  map[string]*tenantInfo{},
		problems: map[string][]Problem{},
		claims:   map[Key][]claim{},
		created:  map[string]int64{},
	}
	for _, o := range objs {
		switch v := o.GetKind().(type) {
		case *pb.Object_Tenant:
			c.tenants[v.Tenant.GetName()] = newTenantInfo(v.Tenant)
		case *pb.Object_VipPool:
			for _, s := range v.VipPool.GetCidrs() {
				if r, err := api.ParsePoolRanges([]string{s}); err == nil {
					c.vipRanges = append(c.vipRanges, r...)
				}
			}
		case *pb.Object_LoadBalancer:
			c.lbs = append(c.lbs, v.LoadBalancer)
		}
	}
	slices.SortFunc(c.lbs, func(a, b *pb.LoadBalancer) int {
		return cmp.Or(cmp.Compare(a.GetTenant(), b.GetTenant()), cmp.Compare(a.GetName(), b.GetName()))
	})
	if prev != nil {
		c.prevPools = map[[2]string]*Pool{}
		for _, p := range prev.Pools() {
			c.prevPools[[2]string{p.LB, p.Name}] = p
		}
	}
	return c
}

func newTenantInfo(t *pb.Tenant) *tenantInfo {
	ti := &tenantInfo{domains: t.GetDomains(), conns: int(t.GetQuotas().GetConnections()),
		connsPerListener: int(t.GetQuotas().GetConnectionsPerListener())}
	for _, s := range t.GetNetworks() {
		if p, err := netip.ParsePrefix(s); err == nil && p == p.Masked() {
			ti.nets = append(ti.nets, p)
		}
	}
	return ti
}

// lbCompile collects one load balancer's problems.
type lbCompile struct {
	c  *compiler
	id string
}

func (b *lbCompile) problem(field, format string, args ...any) {
	b.c.problems[b.id] = append(b.c.problems[b.id], Problem{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (c *compiler) loadBalancer(lb *pb.LoadBalancer) {
	id := lb.GetTenant() + "/" + lb.GetName()
	if _, dup := c.problems[id]; dup {
		return
	}
	c.problems[id] = []Problem{}
	b := &lbCompile{c: c, id: id}
	if lb.GetStatus().GetAddress() == "" {
		return
	}
	vip, ok := b.address(lb.GetStatus().GetAddress())
	if !ok {
		return
	}
	t := c.tenants[lb.GetTenant()]
	if t == nil {
		b.problem("tenant", "tenant %s does not exist; nothing of this load balancer is served", lb.GetTenant())
		return
	}
	c.created[id] = createdNanos(lb)
	pools := map[string]*Pool{}
	keys := make([]string, 0, len(lb.GetPools()))
	for k := range lb.GetPools() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pools[k] = b.pool(k, lb.GetPools()[k], t)
	}
	var routes *RouteTable
	for _, l := range lb.GetListeners() {
		if Protocol(l.GetProtocol()).L7() {
			routes = b.routes(lb.GetRoutes(), pools, t)
			break
		}
	}
	seen := map[Key]int{}
	for i, l := range lb.GetListeners() {
		field := "listeners[" + strconv.Itoa(i) + "]"
		cl := b.listener(field, i, l, lb.GetTenant(), vip, pools, routes)
		if cl == nil {
			continue
		}
		if al := lb.GetAccessLog(); al.GetEnabled() && (cl.Protocol == ProtoHTTP || cl.Protocol == ProtoHTTPS) {
			cl.AccessLog = cmp.Or(al.GetSample(), 1)
		}
		if j, dup := seen[cl.Key]; dup {
			b.problem(field+".port", "%s duplicates listeners[%d]; use another port", cl.Key, j)
			continue
		}
		seen[cl.Key] = i
		c.claims[cl.Key] = append(c.claims[cl.Key], claim{l: cl, field: field})
	}
}

func createdNanos(lb *pb.LoadBalancer) int64 {
	ts := lb.GetMeta().GetCreated()
	if ts == nil || ts.CheckValid() != nil {
		return math.MaxInt64
	}
	return ts.AsTime().UnixNano()
}

// address parses status.address and checks that it lies in a VIP pool: the
// proxy binds nothing else.
func (b *lbCompile) address(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		b.problem("status.address", "%q is not an IP address; nothing of this load balancer is served", s)
		return a, false
	case a.Zone() != "" || a.Is4In6():
		b.problem("status.address", "%s must be a plain IPv4 or IPv6 address; nothing of this load balancer is served", s)
		return a, false
	}
	for _, r := range b.c.vipRanges {
		if r.Contains(a) {
			return a, true
		}
	}
	b.problem("status.address", "%s is not inside any VIP pool; nothing of this load balancer is served", a)
	return a, false
}

// resolveClaims gives each listen key to one claimant and reports the
// others, in key order so that problems come out the same every time.
func (c *compiler) resolveClaims() map[Key]*Listener {
	out := make(map[Key]*Listener, len(c.claims))
	var contested []Key
	for k, cs := range c.claims {
		if len(cs) > 1 {
			contested = append(contested, k)
			continue
		}
		out[k] = c.reuse(cs[0].l)
	}
	slices.SortFunc(contested, func(a, b Key) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Network, b.Network))
	})
	for _, k := range contested {
		cs := c.claims[k]
		win := c.winner(k, cs)
		for i, cl := range cs {
			if i != win {
				b := &lbCompile{c: c, id: cl.l.LB}
				b.problem(cl.field, "%s is already served by LoadBalancer %s; use another port or address", k, cs[win].l.LB)
			}
		}
		out[k] = c.reuse(cs[win].l)
	}
	return out
}

// reuse returns the previous snapshot's listener at l's key when it equals l.
func (c *compiler) reuse(l *Listener) *Listener {
	if c.prev != nil {
		if p := c.prev.Listeners[l.Key]; p != nil && p.equal(l) {
			return p
		}
	}
	return l
}

func (c *compiler) winner(k Key, cs []claim) int {
	if c.prev != nil {
		if p := c.prev.Listeners[k]; p != nil {
			for i, cl := range cs {
				if cl.l.LB == p.LB {
					return i
				}
			}
		}
	}
	win := 0
	for i, cl := range cs[1:] {
		w := cs[win].l.LB
		if cmp.Or(cmp.Compare(c.created[cl.l.LB], c.created[w]), cmp.Compare(cl.l.LB, w)) < 0 {
			win = i + 1
		}
	}
	return win
}
