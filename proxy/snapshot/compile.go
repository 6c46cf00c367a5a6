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
// one (meta.created), then the first by tenant and name. When nothing
// changed Compile returns prev itself.
//
// Compile is incremental: a load balancer whose object is the one prev was
// compiled from (the same pointer: objects are never modified once handed
// to Compile; a change is a new object), whose tenant object is the same
// and with the same VIP pools and defaults is not compiled again; its
// listeners, pools, routes and problems are taken from prev as they are.
// Stats says how many were compiled.
func Compile(objs []*pb.Object, revision uint64, d Defaults, prev *Snapshot) *Snapshot {
	s, _ := compile(objs, revision, d, prev)
	return s
}

// compile is Compile, also returning its Stats when it returns prev.
func compile(objs []*pb.Object, revision uint64, d Defaults, prev *Snapshot) (*Snapshot, Stats) {
	c := newCompiler(objs, d.WithDefaults(), prev)
	for _, lb := range c.lbs {
		c.loadBalancer(lb)
	}
	s := &Snapshot{Revision: revision, Listeners: c.resolveClaims(), Problems: c.problems,
		Stats: c.stats, entries: c.entries, env: c.env}
	if s.sameAs(prev) {
		return prev, c.stats
	}
	return s, c.stats
}

// Stats counts the work of one Compile.
type Stats struct {
	// Compiled load balancers were compiled from their objects; Reused
	// ones were taken from the previous snapshot unchanged.
	Compiled, Reused int
	// NewPools counts the pools built that the previous snapshot did not
	// hold an equal one of.
	NewPools int
}

// entry is one load balancer's compiled form, kept in the snapshot so that
// the next Compile can take it as it is.
type entry struct {
	src    *pb.LoadBalancer
	tenant *pb.Tenant // the tenant object it was compiled against
	// claims are the listeners that want a listen key.
	claims   []claim
	problems []Problem
	created  int64
	pools    map[string]*Pool
}

// env is what every load balancer's compile depends on besides its own
// object and its tenant.
type env struct {
	d     Defaults
	pools []*pb.VIPPool
}

func (e *env) equal(o *env) bool { return o != nil && e.d == o.d && slices.Equal(e.pools, o.pools) }

type tenantInfo struct {
	src     *pb.Tenant
	domains []string
	nets    []netip.Prefix
	// conns and connsPerListener are the tenant's connection quotas (0:
	// the host's defaults).
	conns, connsPerListener int
}

type compiler struct {
	d    Defaults
	prev *Snapshot
	// reusable: prev's entries may be taken (same VIP pools and defaults).
	reusable  bool
	env       *env
	tenants   map[string]*tenantInfo
	vipRanges []api.Range
	lbs       []*pb.LoadBalancer
	problems  map[string][]Problem
	claims    map[Key][]claim
	created   map[string]int64
	entries   map[string]*entry
	stats     Stats
}

// claim is a listener that wants a listen key.
type claim struct {
	l     *Listener
	field string
}

func newCompiler(objs []*pb.Object, d Defaults, prev *Snapshot) *compiler {
	n := 0
	if prev != nil {
		n = len(prev.entries)
	}
	c := &compiler{
		d:        d,
		prev:     prev,
		env:      &env{d: d},
		tenants:  map[string]*tenantInfo{},
		problems: make(map[string][]Problem, n),
		claims:   make(map[Key][]claim, len(objs)),
		created:  make(map[string]int64, n),
		entries:  make(map[string]*entry, n),
	}
	for _, o := range objs {
		switch v := o.GetKind().(type) {
		case *pb.Object_Tenant:
			c.tenants[v.Tenant.GetName()] = newTenantInfo(v.Tenant)
		case *pb.Object_VipPool:
			c.env.pools = append(c.env.pools, v.VipPool)
			for _, s := range v.VipPool.GetCidrs() {
				if r, err := api.ParsePoolRanges([]string{s}); err == nil {
					c.vipRanges = append(c.vipRanges, r...)
				}
			}
		case *pb.Object_LoadBalancer:
			c.lbs = append(c.lbs, v.LoadBalancer)
		}
	}
	c.reusable = prev != nil && c.env.equal(prev.env)
	return c
}

func newTenantInfo(t *pb.Tenant) *tenantInfo {
	ti := &tenantInfo{src: t, domains: t.GetDomains(), conns: int(t.GetQuotas().GetConnections()),
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
	c        *compiler
	id       string
	problems []Problem
}

func (b *lbCompile) problem(field, format string, args ...any) {
	b.problems = append(b.problems, Problem{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (c *compiler) loadBalancer(lb *pb.LoadBalancer) {
	id := lb.GetTenant() + "/" + lb.GetName()
	if _, dup := c.problems[id]; dup {
		return
	}
	t := c.tenants[lb.GetTenant()]
	var tsrc *pb.Tenant
	if t != nil {
		tsrc = t.src
	}
	if c.reusable {
		if e := c.prev.entries[id]; e != nil && e.src == lb && e.tenant == tsrc {
			c.take(id, e)
			c.stats.Reused++
			return
		}
	}
	c.stats.Compiled++
	e := &entry{src: lb, tenant: tsrc, created: createdNanos(lb)}
	b := &lbCompile{c: c, id: id}
	b.compile(lb, t, e)
	e.problems = b.problems
	if e.problems == nil {
		e.problems = []Problem{}
	}
	c.take(id, e)
}

// take adds a load balancer's compiled form to the snapshot being built.
func (c *compiler) take(id string, e *entry) {
	c.entries[id] = e
	// Clipped: problems found while resolving claims are appended to a
	// copy, never to the entry's.
	c.problems[id] = slices.Clip(e.problems)
	c.created[id] = e.created
	for _, cl := range e.claims {
		c.claims[cl.l.Key] = append(c.claims[cl.l.Key], cl)
	}
}

func (b *lbCompile) compile(lb *pb.LoadBalancer, t *tenantInfo, e *entry) {
	if lb.GetStatus().GetAddress() == "" {
		return
	}
	vip, ok := b.address(lb.GetStatus().GetAddress())
	if !ok {
		return
	}
	if t == nil {
		b.problem("tenant", "tenant %s does not exist; nothing of this load balancer is served", lb.GetTenant())
		return
	}
	var prevPools map[string]*Pool
	if b.c.prev != nil {
		if pe := b.c.prev.entries[b.id]; pe != nil {
			prevPools = pe.pools
		}
	}
	e.pools = make(map[string]*Pool, len(lb.GetPools()))
	keys := make([]string, 0, len(lb.GetPools()))
	for k := range lb.GetPools() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := b.pool(k, lb.GetPools()[k], t)
		if old := prevPools[k]; old.Equal(p) {
			p = old
		} else {
			b.c.stats.NewPools++
		}
		e.pools[k] = p
	}
	var routes *RouteTable
	for _, l := range lb.GetListeners() {
		if Protocol(l.GetProtocol()).L7() {
			routes = b.routes(lb.GetRoutes(), e.pools, t)
			break
		}
	}
	seen := map[Key]int{}
	for i, l := range lb.GetListeners() {
		field := "listeners[" + strconv.Itoa(i) + "]"
		cl := b.listener(field, i, l, lb.GetTenant(), vip, e.pools, routes)
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
		e.claims = append(e.claims, claim{l: cl, field: field})
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
				c.problems[cl.l.LB] = append(c.problems[cl.l.LB], Problem{Field: cl.field,
					Reason: fmt.Sprintf("%s is already served by LoadBalancer %s; use another port or address", k, cs[win].l.LB)})
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
