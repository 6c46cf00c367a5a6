package snapshot

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/pmap"
)

// Compile turns the full desired state (every LoadBalancer, Tenant and
// VIPPool; other kinds are ignored) into a snapshot. Only load balancers
// with a status.address are served (a dual-stack one on each address of
// status.addresses). What is broken in one load balancer is
// reported in Problems under "tenant/name" and skipped: a member that does
// not parse, a listener whose address and port another load balancer
// already serves, a route to a missing pool.
//
// prev is the snapshot in service (or nil). Of two load balancers claiming
// one listen key, the one prev serves there keeps it; otherwise the older
// one (meta.created), then the first by tenant and name.
//
// Compile is incremental: a load balancer whose object is the one prev was
// compiled from (the same pointer: objects are never modified once handed
// to Compile; a change is a new object), under a tenant that compiles the
// same and the same VIP pools and defaults, is not compiled again; its
// listeners, pools, routes and problems are prev's, by identity. When
// nothing changed Compile returns prev itself. Stats says how many load
// balancers were compiled.
func Compile(objs []*pb.Object, revision uint64, d Defaults, prev *Snapshot) *Snapshot {
	s, _ := compile(objs, revision, d, prev)
	return s
}

// compile is Compile, also returning its Stats when it returns prev.
func compile(objs []*pb.Object, revision uint64, d Defaults, prev *Snapshot) (*Snapshot, Stats) {
	tenants := map[string]*pb.Tenant{}
	var pools []*pb.VIPPool
	var nodes []*pb.Node
	var lbs []*pb.LoadBalancer
	for _, o := range objs {
		switch v := o.GetKind().(type) {
		case *pb.Object_Tenant:
			tenants[v.Tenant.GetName()] = v.Tenant
		case *pb.Object_VipPool:
			pools = append(pools, v.VipPool)
		case *pb.Object_Node:
			nodes = append(nodes, v.Node)
		case *pb.Object_LoadBalancer:
			lbs = append(lbs, v.LoadBalancer)
		}
	}
	slices.SortFunc(pools, func(a, b *pb.VIPPool) int { return cmp.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(nodes, func(a, b *pb.Node) int { return cmp.Compare(a.GetId(), b.GetId()) })
	c := newCompiler(d.WithDefaults(), prev, tenants, pools, nodes)
	matched := 0
	for _, lb := range lbs {
		id := lbID(lb)
		if c.done[id] {
			continue
		}
		if c.reusable {
			if e, ok := prev.entries.Get(id); ok {
				matched++
				if e.src == lb && e.tenant == c.tenants[lb.GetTenant()] {
					continue
				}
			}
		}
		c.put(id, lb)
	}
	if c.reusable && matched < prev.entries.Len() {
		// Some load balancers are gone: find them.
		ids := make(map[string]bool, len(lbs))
		for _, lb := range lbs {
			ids[lbID(lb)] = true
		}
		for id := range prev.entries.All() {
			if !ids[id] {
				c.remove(id)
			}
		}
	}
	return c.finish(revision)
}

// Change is what changed in the desired state from one revision to the
// next: the objects written and the references deleted. Kinds other than
// LoadBalancer, Tenant and VIPPool are ignored.
type Change struct {
	Put     []*pb.Object
	Deleted []*pb.ObjectRef
}

// CompileChange returns prev with ch applied, as Compile would return it
// for the whole state after ch, compiling only the load balancers ch
// touches: those written or deleted, and those of a tenant written or
// deleted when the tenant no longer compiles the same. A change of the VIP
// pools or of d compiles every load balancer. prev must not be nil.
func CompileChange(prev *Snapshot, ch Change, revision uint64, d Defaults) *Snapshot {
	s, _ := compileChange(prev, ch, revision, d)
	return s
}

func compileChange(prev *Snapshot, ch Change, revision uint64, d Defaults) (*Snapshot, Stats) {
	tenants := make(map[string]*pb.Tenant, len(prev.tenants))
	for name, t := range prev.tenants {
		tenants[name] = t.src
	}
	pools := slices.Clone(prev.env.pools)
	nodes := slices.Clone(prev.env.nodes)
	lbs := map[string]*pb.LoadBalancer{}
	var gone []string
	for _, o := range ch.Put {
		switch v := o.GetKind().(type) {
		case *pb.Object_Tenant:
			tenants[v.Tenant.GetName()] = v.Tenant
		case *pb.Object_VipPool:
			pools = slices.DeleteFunc(pools, func(p *pb.VIPPool) bool { return p.GetName() == v.VipPool.GetName() })
			pools = append(pools, v.VipPool)
		case *pb.Object_Node:
			nodes = slices.DeleteFunc(nodes, func(n *pb.Node) bool { return n.GetId() == v.Node.GetId() })
			nodes = append(nodes, v.Node)
		case *pb.Object_LoadBalancer:
			lbs[lbID(v.LoadBalancer)] = v.LoadBalancer
		}
	}
	for _, r := range ch.Deleted {
		switch r.GetKind() {
		case api.KindTenant:
			delete(tenants, r.GetName())
		case api.KindVIPPool:
			pools = slices.DeleteFunc(pools, func(p *pb.VIPPool) bool { return p.GetName() == r.GetName() })
		case api.KindNode:
			nodes = slices.DeleteFunc(nodes, func(n *pb.Node) bool { return n.GetId() == r.GetName() })
		case api.KindLoadBalancer:
			id := r.GetTenant() + "/" + r.GetName()
			delete(lbs, id)
			gone = append(gone, id)
		}
	}
	slices.SortFunc(pools, func(a, b *pb.VIPPool) int { return cmp.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(nodes, func(a, b *pb.Node) int { return cmp.Compare(a.GetId(), b.GetId()) })
	c := newCompiler(d.WithDefaults(), prev, tenants, pools, nodes)
	if !c.reusable {
		// Everything compiles again, from the objects prev was compiled from.
		for id, e := range prev.entries.All() {
			c.stats.Scanned++
			if _, ok := lbs[id]; !ok && !slices.Contains(gone, id) {
				lbs[id] = e.src
			}
		}
	} else if c.changedTenantHasLBs() {
		// A tenant that compiles differently: its load balancers again.
		for id, e := range prev.entries.All() {
			c.stats.Scanned++
			if _, ok := lbs[id]; !ok && c.changedTenants[e.src.GetTenant()] {
				lbs[id] = e.src
			}
		}
	}
	for _, id := range gone {
		c.remove(id)
	}
	for _, id := range slices.Sorted(maps.Keys(lbs)) {
		c.put(id, lbs[id])
	}
	return c.finish(revision)
}

func lbID(lb *pb.LoadBalancer) string { return lb.GetTenant() + "/" + lb.GetName() }

// Stats counts the work of one Compile.
type Stats struct {
	// Compiled load balancers were compiled from their objects; the others
	// were taken from the previous snapshot as they were.
	Compiled int
	// NewPools counts the pools built that the previous snapshot did not
	// hold an equal one of.
	NewPools int
	// Keys counts the listen keys whose claims were resolved again.
	Keys int
	// Scanned counts the compiled load balancers CompileChange looked at
	// to find those a tenant or VIP pool change touches.
	Scanned int
}

// entry is one load balancer's compiled form, kept in the snapshot so that
// the next Compile can take it as it is.
type entry struct {
	src    *pb.LoadBalancer
	tenant *tenantInfo // what it was compiled against
	// claims are the listeners that want a listen key, in listener order.
	claims []claim
	// problems are the load balancer's own, without lost claims.
	problems []Problem
	// held are the findings of its claiming listeners, and of its routes
	// that such a listener carries, that hold only while the listener or
	// route is served: resolve rewords them when another load balancer
	// wins every key of the listener, or of every listener that carries
	// the route.
	held    []heldFindings
	created int64
	pools   poolSet
}

// poolSet is a load balancer's compiled pools, sorted by name: the few
// pools of a load balancer cost a slice rather than a map (a host keeps
// one set per load balancer).
type poolSet []namedPool

type namedPool struct {
	name string
	pool *Pool
}

// get returns the pool named name, or nil.
func (s poolSet) get(name string) *Pool {
	i, ok := slices.BinarySearchFunc(s, name, func(p namedPool, name string) int { return strings.Compare(p.name, name) })
	if !ok {
		return nil
	}
	return s[i].pool
}

// env is what every load balancer's compile depends on besides its own
// object and its tenant.
type env struct {
	d     Defaults
	pools []*pb.VIPPool // by name
	// nodes are the LB hosts (by id), and hosts their own services, which
	// no member or health check reaches (defence in depth: validation
	// refuses them, but an object stored before may still name one).
	nodes []*pb.Node
	hosts *api.HostPorts
}

// equal reports whether load balancers compile the same under e and o:
// the same defaults, VIP pools of the same ranges and hosts of the same
// services.
func (e *env) equal(o *env) bool {
	return o != nil && e.d == o.d && slices.EqualFunc(e.pools, o.pools, func(a, b *pb.VIPPool) bool {
		return a == b || slices.Equal(a.GetCidrs(), b.GetCidrs()) && a.GetAttachment() == b.GetAttachment()
	}) && slices.EqualFunc(e.nodes, o.nodes, sameHostPorts)
}

// sameHostPorts reports whether two hosts publish the same services.
func sameHostPorts(a, b *pb.Node) bool {
	return a == b || a.GetId() == b.GetId() && a.GetApiAddr() == b.GetApiAddr() && a.GetRaftAddr() == b.GetRaftAddr() &&
		a.GetHeartbeatAddr() == b.GetHeartbeatAddr() && slices.Equal(a.GetAddresses(), b.GetAddresses()) &&
		slices.EqualFunc(a.GetServices(), b.GetServices(), func(x, y *pb.NodeService) bool {
			return x.GetName() == y.GetName() && x.GetAddr() == y.GetAddr()
		})
}

type tenantInfo struct {
	src     *pb.Tenant
	domains []string
	nets    []netip.Prefix
	// conns and connsPerListener are the tenant's connection quotas (0:
	// the host's defaults).
	conns, connsPerListener int
	// regexCPU is quotas.regexCpuMillicores (0: the default).
	regexCPU int
	// rateKeys is quotas.rateLimitKeys (0: the default).
	rateKeys int
	// wafCPU is quotas.wafCpuMillicores (0: the default).
	wafCPU int
	// cpu is quotas.cpuMillicores (0: the host's default).
	cpu int
}

// equal reports whether two tenants compile their load balancers the same.
func (t *tenantInfo) equal(o *tenantInfo) bool {
	return t.conns == o.conns && t.connsPerListener == o.connsPerListener && t.regexCPU == o.regexCPU && t.rateKeys == o.rateKeys && t.wafCPU == o.wafCPU && t.cpu == o.cpu &&
		slices.Equal(t.domains, o.domains) && slices.Equal(t.nets, o.nets)
}

type compiler struct {
	d    Defaults
	prev *Snapshot
	// reusable: prev's entries may be taken (same VIP pools and defaults).
	reusable bool
	env      *env
	// tenants are prev's tenantInfo values for the tenants that compile
	// the same; changedTenants names the others.
	tenants        map[string]*tenantInfo
	changedTenants map[string]bool
	vipRanges      []api.Range
	// attached are the ranges of the pools in tenants' attachments.
	attached []attachedRange

	// tenantLBs counts each tenant's load balancers.
	tenantLBs map[string]int
	entries   *pmap.Editor[string, *entry]
	claims    *pmap.Editor[Key, []claim]
	listeners *pmap.Editor[Key, *Listener]
	problems  *pmap.Editor[string, []Problem]
	// done holds the load balancers compiled or removed; keys and lbs
	// what must be resolved again.
	done  map[string]bool
	keys  map[Key]bool
	lbs   map[string]bool
	stats Stats
}

// heldFindings are the findings of a listener or a route that hold only
// while it is served. A listener's (field: the listener's, as its claims
// name it; carriers nil) hold while one of its keys is served; a route's
// (field: the route's) while one of the http or https listeners that
// carry it (carriers, as their claims name them) is.
type heldFindings struct {
	field    string
	carriers []string
	held     []provisional
}

// servedBy reports whether a route's held findings hold: one of its
// carriers is served.
func (h heldFindings) servedBy(served map[string]bool) bool {
	return slices.ContainsFunc(h.carriers, func(f string) bool { return served[f] })
}

// claim is a listener that wants a listen key.
type claim struct {
	l     *Listener
	field string
}

func newCompiler(d Defaults, prev *Snapshot, tenants map[string]*pb.Tenant, pools []*pb.VIPPool, nodes []*pb.Node) *compiler {
	c := &compiler{
		d:              d,
		prev:           prev,
		env:            &env{d: d, pools: pools, nodes: nodes, hosts: api.NewHostPorts(nodes)},
		tenants:        make(map[string]*tenantInfo, len(tenants)),
		changedTenants: map[string]bool{},
		done:           map[string]bool{},
		keys:           map[Key]bool{},
		lbs:            map[string]bool{},
	}
	for _, p := range pools {
		for _, s := range p.GetCidrs() {
			if r, err := api.ParsePoolRanges([]string{s}); err == nil {
				c.vipRanges = append(c.vipRanges, r...)
			}
		}
	}
	c.attached = attachedRanges(pools)
	if prev == nil {
		prev = emptySnapshot()
		c.prev = nil
	}
	c.reusable = c.prev != nil && c.env.equal(prev.env)
	for name, t := range tenants {
		ti := newTenantInfo(t)
		if old := prev.tenants[name]; old != nil && (old.src == t || old.equal(ti)) {
			ti = old
		} else {
			c.changedTenants[name] = true
		}
		c.tenants[name] = ti
	}
	for name := range prev.tenants {
		if tenants[name] == nil {
			c.changedTenants[name] = true
		}
	}
	if c.reusable {
		c.entries, c.claims = prev.entries.Edit(), prev.claims.Edit()
		c.listeners, c.problems = prev.Listeners.Edit(), prev.Problems.Edit()
		c.tenantLBs = maps.Clone(prev.tenantLBs)
	} else {
		c.tenantLBs = map[string]int{}
		// Every load balancer compiles again; only the winners of
		// contested keys and unchanged values are taken from prev.
		e := emptySnapshot()
		c.entries, c.claims = e.entries.Edit(), e.claims.Edit()
		c.listeners, c.problems = e.Listeners.Edit(), e.Problems.Edit()
	}
	return c
}

func emptySnapshot() *Snapshot {
	return &Snapshot{
		Listeners: pmap.New[Key, *Listener](HashKey),
		Problems:  pmap.New[string, []Problem](pmap.String),
		entries:   pmap.New[string, *entry](pmap.String),
		claims:    pmap.New[Key, []claim](HashKey),
		tenants:   map[string]*tenantInfo{},
		tenantLBs: map[string]int{},
		env:       &env{},
	}
}

// finish resolves the keys and problems the changes touched and returns
// the new snapshot, or prev when nothing changed.
func (c *compiler) finish(revision uint64) (*Snapshot, Stats) {
	if c.reusable && len(c.done) == 0 && len(c.changedTenants) == 0 {
		return c.prev, c.stats
	}
	c.resolve()
	s := &Snapshot{
		Revision:  revision,
		Listeners: c.listeners.Done(),
		Problems:  c.problems.Done(),
		Stats:     c.stats,
		entries:   c.entries.Done(),
		claims:    c.claims.Done(),
		tenants:   c.tenants,
		tenantLBs: c.tenantLBs,
		env:       c.env,
	}
	return s, c.stats
}

// changedTenantHasLBs reports whether a tenant that compiles differently
// has load balancers.
func (c *compiler) changedTenantHasLBs() bool {
	for name := range c.changedTenants {
		if c.tenantLBs[name] > 0 {
			return true
		}
	}
	return false
}

// put compiles a load balancer (again) in place of its previous form.
func (c *compiler) put(id string, lb *pb.LoadBalancer) {
	if _, ok := c.entries.Get(id); !ok {
		c.tenantLBs[lb.GetTenant()]++
	}
	c.unclaim(id)
	c.done[id] = true
	c.lbs[id] = true
	c.stats.Compiled++
	t := c.tenants[lb.GetTenant()]
	e := &entry{src: lb, tenant: t, created: createdNanos(lb)}
	b := &lbCompile{c: c, id: id}
	b.compile(lb, t, e)
	e.problems = b.problems
	if e.problems == nil {
		e.problems = []Problem{}
	}
	c.entries.Set(id, e)
	for _, cl := range e.claims {
		cs, _ := c.claims.Get(cl.l.Key)
		c.claims.Set(cl.l.Key, append(slices.Clip(cs), cl))
		c.keys[cl.l.Key] = true
	}
}

// remove drops a load balancer that is gone.
func (c *compiler) remove(id string) {
	if e, ok := c.entries.Get(id); ok {
		if t := e.src.GetTenant(); c.tenantLBs[t] > 1 {
			c.tenantLBs[t]--
		} else {
			delete(c.tenantLBs, t)
		}
	}
	c.unclaim(id)
	c.done[id] = true
	c.entries.Delete(id)
	c.problems.Delete(id)
}

// unclaim withdraws the claims of a load balancer's previous form.
func (c *compiler) unclaim(id string) {
	old, ok := c.entries.Get(id)
	if !ok {
		return
	}
	for _, cl := range old.claims {
		k := cl.l.Key
		cs, _ := c.claims.Get(k)
		cs = slices.DeleteFunc(slices.Clone(cs), func(o claim) bool { return o.l.LB == id })
		if len(cs) == 0 {
			c.claims.Delete(k)
		} else {
			c.claims.Set(k, cs)
		}
		c.keys[k] = true
	}
}

// lbCompile collects one load balancer's problems.
type lbCompile struct {
	c        *compiler
	id       string
	problems []Problem
}

func (b *lbCompile) problem(field, format string, args ...any) {
	// A problem quotes the object's values: at most an excerpt of each.
	b.problems = append(b.problems, Problem{Field: api.Clip(field, api.MaxFieldPath), Reason: api.Reasonf(format, args...)})
}

func (b *lbCompile) compile(lb *pb.LoadBalancer, t *tenantInfo, e *entry) {
	addrs := api.StatusAddresses(lb)
	vips := make([]netip.Addr, 0, len(addrs))
	for i, s := range addrs {
		field := "status.address"
		if len(lb.GetStatus().GetAddresses()) > 0 {
			field = "status.addresses[" + strconv.Itoa(i) + "]"
		}
		if a, ok := b.address(field, s, len(addrs) == 1); ok {
			vips = append(vips, a)
		}
	}
	if len(vips) == 0 {
		return
	}
	if t == nil {
		b.problem("tenant", "tenant %s does not exist; nothing of this load balancer is served", lb.GetTenant())
		return
	}
	var prevPools poolSet
	if b.c.prev != nil {
		if pe, ok := b.c.prev.entries.Get(b.id); ok {
			prevPools = pe.pools
		}
	}
	e.pools = make(poolSet, 0, len(lb.GetPools()))
	keys := make([]string, 0, len(lb.GetPools()))
	for k := range lb.GetPools() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := b.pool(lb, k, api.FirstUDPListener(lb, k), t)
		if old := prevPools.get(k); old.Equal(p) {
			p = old
		} else {
			b.c.stats.NewPools++
		}
		e.pools = append(e.pools, namedPool{k, p})
	}
	var routes *RouteTable
	var compiled []Route
	var routesHeld []heldFindings
	for _, l := range lb.GetListeners() {
		if Protocol(l.GetProtocol()).L7() {
			compiled, routesHeld = b.routes(lb, e.pools, t)
			routes = NewRouteTable(compiled)
			break
		}
	}
	scoped := routes != nil && slices.ContainsFunc(lb.GetRoutes(), func(r *pb.Route) bool { return len(r.GetPorts()) > 0 })
	var byPort map[uint32]*RouteTable
	seen := map[Key]int{}
	for i, l := range lb.GetListeners() {
		field := "listeners[" + strconv.Itoa(i) + "]"
		lr := routes
		if scoped {
			if lr = byPort[l.GetPort()]; lr == nil {
				lr = portRoutes(compiled, lb.GetRoutes(), l.GetPort())
				if byPort == nil {
					byPort = map[uint32]*RouteTable{}
				}
				byPort[l.GetPort()] = lr
			}
		}
		first, held := b.listener(field, i, l, lb, vips[0], e.pools, lr)
		if first == nil {
			continue
		}
		claimed := len(e.claims)
		if al := lb.GetAccessLog(); al.GetEnabled() && (first.Protocol == ProtoHTTP || first.Protocol == ProtoHTTPS) {
			first.AccessLog = cmp.Or(al.GetSample(), 1)
		}
		// A dual-stack load balancer serves each listener on every VIP:
		// one listener per address, alike but for the key.
		for k, vip := range vips {
			cl := first
			if k > 0 {
				c := *first
				c.Key.Addr = netip.AddrPortFrom(vip, first.Key.Addr.Port())
				c.Key.Space = b.c.spaceOf(lb.GetTenant(), vip)
				c.Name = c.Key.String()
				cl = &c
			}
			if j, dup := seen[cl.Key]; dup {
				b.problem(field+".port", "%s duplicates listeners[%d]; use another port", cl.Key, j)
				continue
			}
			seen[cl.Key] = i
			e.claims = append(e.claims, claim{l: cl, field: field})
		}
		switch {
		case len(held) == 0:
		case len(e.claims) == claimed:
			// Every key duplicates an earlier listener's.
			b.withdraw(held, "listener", field+".port")
		default:
			e.held = append(e.held, heldFindings{field: field, held: held})
		}
	}
	if len(routesHeld) == 0 {
		return
	}
	// A route is served only while a listener that carries it is: its
	// findings that say what is done instead are reworded when none of
	// them claims a key.
	claimed := make(map[string]bool, len(e.claims))
	for _, cl := range e.claims {
		claimed[cl.field] = true
	}
	for _, h := range routesHeld {
		if h.servedBy(claimed) {
			e.held = append(e.held, h)
			continue
		}
		b.withdraw(h.held, "route", carriersCause(h))
	}
}

// carriersCause names, for the findings of a route that no listener
// serves, the listeners that would carry it (at most three, then how
// many more), or its ports when none would.
func carriersCause(h heldFindings) string {
	const named = 3
	switch n := len(h.carriers); {
	case n == 0:
		return h.field + ".ports"
	case n <= named:
		return strings.Join(h.carriers, ", ")
	default:
		return strings.Join(h.carriers[:named], ", ") + " and " + strconv.Itoa(n-named) + " more"
	}
}

func newTenantInfo(t *pb.Tenant) *tenantInfo {
	ti := &tenantInfo{src: t, domains: t.GetDomains(), conns: int(t.GetQuotas().GetConnections()),
		connsPerListener: int(t.GetQuotas().GetConnectionsPerListener()), regexCPU: int(t.GetQuotas().GetRegexCpuMillicores()),
		rateKeys: int(t.GetQuotas().GetRateLimitKeys()), wafCPU: int(t.GetQuotas().GetWafCpuMillicores()),
		cpu: int(t.GetQuotas().GetCpuMillicores())}
	for _, s := range t.GetNetworks() {
		if p, err := netip.ParsePrefix(s); err == nil && p == p.Masked() {
			ti.nets = append(ti.nets, p)
		}
	}
	return ti
}

func createdNanos(lb *pb.LoadBalancer) int64 {
	ts := lb.GetMeta().GetCreated()
	if ts == nil || ts.CheckValid() != nil {
		return math.MaxInt64
	}
	return ts.AsTime().UnixNano()
}

// address parses one of the load balancer's addresses (field names it;
// only: it is the only one) and checks that it lies in a VIP pool: the
// proxy binds nothing else.
func (b *lbCompile) address(field, s string, only bool) (netip.Addr, bool) {
	then := "nothing of this load balancer is served"
	if !only {
		then = "the load balancer is not served on it"
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		b.problem(field, "%q is not an IP address; %s", s, then)
		return a, false
	case a.Zone() != "" || a.Is4In6():
		b.problem(field, "%s must be a plain IPv4 or IPv6 address; %s", s, then)
		return a, false
	}
	for _, r := range b.c.vipRanges {
		if r.Contains(a) {
			return a, true
		}
	}
	b.problem(field, "%s is not inside any VIP pool; %s", a, then)
	return a, false
}

// resolve gives each listen key the changes touched to one claimant, and
// sets again the problems of every load balancer that claims one of them.
func (c *compiler) resolve() {
	c.stats.Keys = len(c.keys)
	for k := range c.keys {
		cs, _ := c.claims.Get(k)
		for _, cl := range cs {
			c.lbs[cl.l.LB] = true
		}
		if len(cs) == 0 {
			c.listeners.Delete(k)
			continue
		}
		l := cs[c.winner(k, cs)].l
		if c.prev != nil {
			if p, ok := c.prev.Listeners.Get(k); ok && p != l && p.equal(l) {
				l = p
			}
		}
		c.listeners.Set(k, l)
	}
	for id := range c.lbs {
		e, ok := c.entries.Get(id)
		if !ok {
			continue
		}
		ps := slices.Clip(e.problems)
		lost := false
		for _, cl := range e.claims {
			k := cl.l.Key
			if w, _ := c.listeners.Get(k); w != nil && w.LB != id {
				ps = append(ps, Problem{Field: cl.field,
					Reason: fmt.Sprintf("%s is already served by LoadBalancer %s; use another port or address", k, w.LB)})
				lost = true
			}
		}
		if lost && len(e.held) > 0 {
			ps = c.withdrawLost(id, e, ps)
		}
		if old, ok := c.problems.Get(id); !ok || !slices.Equal(old, ps) {
			c.problems.Set(id, ps)
		}
	}
}

// withdrawLost rewords, in a copy of ps (the problems of the load
// balancer id, whose entry is e), the held findings of each of its
// listeners that serves no key (another load balancer serves each), and
// of each of its routes that no listener carrying it serves.
func (c *compiler) withdrawLost(id string, e *entry, ps []Problem) []Problem {
	served := map[string]bool{}
	for _, cl := range e.claims {
		if w, _ := c.listeners.Get(cl.l.Key); w == nil || w.LB == id {
			served[cl.field] = true
		}
	}
	copied := false
	for _, h := range e.held {
		what, cause := "listener", h.field
		if h.carriers != nil {
			if h.servedBy(served) {
				continue
			}
			what, cause = "route", carriersCause(h)
		} else if served[h.field] {
			continue
		}
		if !copied {
			ps, copied = slices.Clone(ps), true
		}
		for _, p := range h.held {
			ps[p.at].Reason = skippedFor(p.reason, what, cause)
		}
	}
	return ps
}

// winner picks the claimant that serves a contested key: the one prev
// serves it with, else the oldest, then the first by tenant and name.
func (c *compiler) winner(k Key, cs []claim) int {
	if len(cs) == 1 {
		return 0
	}
	if c.prev != nil {
		if p, ok := c.prev.Listeners.Get(k); ok {
			for i, cl := range cs {
				if cl.l.LB == p.LB {
					return i
				}
			}
		}
	}
	created := func(id string) int64 {
		e, _ := c.entries.Get(id)
		return e.created
	}
	win := 0
	for i, cl := range cs[1:] {
		w := cs[win].l.LB
		if cmp.Or(cmp.Compare(created(cl.l.LB), created(w)), cmp.Compare(cl.l.LB, w)) < 0 {
			win = i + 1
		}
	}
	return win
}

// portRoutes is the table of the compiled routes that a listener of port
// serves: those without ports and those listing port.
func portRoutes(all []Route, rs []*pb.Route, port uint32) *RouteTable {
	var out []Route
	for _, r := range all {
		if ps := rs[r.Index].GetPorts(); len(ps) == 0 || slices.Contains(ps, port) {
			out = append(out, r)
		}
	}
	return NewRouteTable(out)
}
