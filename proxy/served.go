package proxy

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"

	"github.com/teapot-lb/teapot-lb/proxy/balance"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/internal/pmap"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// served is a compiled snapshot joined with the live pools: what every
// new connection reads through Proxy.current. It is never modified once
// published.
type served struct {
	snap      *snapshot.Snapshot
	listeners *pmap.Map[snapshot.Key, *ListenerSnapshot]
	pools     *pmap.Map[*snapshot.Pool, *Pool]
	// byLB holds each load balancer's live pools ("tenant/name"), byTarget
	// the live pools each member's health target is in.
	byLB     *pmap.Map[string, []*Pool]
	byTarget *pmap.Map[*health.Target, []*Pool]
}

func emptyServed() *served {
	return &served{
		listeners: pmap.New[snapshot.Key, *ListenerSnapshot](snapshot.HashKey),
		pools:     pmap.New[*snapshot.Pool, *Pool](pmap.Pointer[snapshot.Pool]),
		byLB:      pmap.New[string, []*Pool](pmap.String),
		byTarget:  pmap.New[*health.Target, []*Pool](pmap.Pointer[health.Target]),
	}
}

// listener returns the listener in service at k, or nil.
func (s *served) listener(k snapshot.Key) *ListenerSnapshot {
	l, _ := s.listeners.Get(k)
	return l
}

// ListenerSnapshot is one listener's compiled configuration with the live
// pools it sends traffic to. It is immutable; a config change publishes a
// new one (or keeps this one when the listener did not change).
type ListenerSnapshot struct {
	*snapshot.Listener
	// pools are the live pools of the compiled pools the listener uses,
	// in the order of Listener.Pools; byPool indexes them when there are
	// more than fewPools (a host keeps one ListenerSnapshot per
	// listener, and most use one pool).
	pools  []*Pool
	byPool map[*snapshot.Pool]*Pool
	// http is the routes of an http or https listener in the L7
	// engine's terms, built with the snapshot; nil for other protocols.
	http *httpTable
	// router binds http to the HTTP handler, made on first use.
	router atomic.Pointer[httpRouter]
	// regex is the tenant's regex CPU budget on this host; nil for
	// listeners not published by the proxy (no budget applies).
	regex *regexBudget
	// cpu is the tenant's host CPU budget (quotas.cpuMillicores): its
	// work is counted and waits there while it is in debt (nil: none
	// applies).
	cpu *cpubudget.Tenant
	// budget is the tenant's member budget (nil in a listener snapshot
	// the proxy did not build: member connections go uncharged).
	budget *l7.MemberBudget
	// tenant is the tenant's budgets (nil where budget is).
	tenant *tenantBudget
	// streams bounds the tenant's HTTP/2 streams in flight (nil in a
	// listener snapshot the proxy did not build: no bound applies).
	streams *listenerStreams
	// altSvc is the Alt-Svc value of an https listener with http3 (""
	// otherwise), advertised while h3up says its UDP port is served.
	altSvc string
	h3up   *atomic.Bool
	// rates are the listener's rate limits in service (ratelimits.go).
	rates listenerRates
	// waf builds the Inspect of a route with a WAF (nil in a listener
	// snapshot the proxy did not build: a WAF route answers 503).
	waf func(*ListenerSnapshot, *snapshot.Route) func(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string)
	// rules are the engines of the WAF rules of its routes it holds
	// (wafrules.go).
	rules listenerRules
}

// Pool returns the live pool of a compiled pool the listener uses (its L4
// pool or a route's pool), or nil.
func (l *ListenerSnapshot) Pool(p *snapshot.Pool) *Pool {
	if l.byPool != nil {
		return l.byPool[p]
	}
	for _, lp := range l.pools {
		if lp.Spec == p {
			return lp
		}
	}
	return nil
}

// Backend returns the live pool of a tcp, udp or tls-passthrough listener.
func (l *ListenerSnapshot) Backend() *Pool { return l.Pool(l.Listener.Pool) }

// fewPools is the most pools a listener looks through without a map.
const fewPools = 8

// Pool is a compiled pool with its balancer over live members. Members'
// health and in-flight counts live in health Targets, shared across
// config changes.
type Pool struct {
	Spec    *snapshot.Pool
	members []*balance.Member
	bal     balance.Balancer
	http    atomic.Pointer[httpBackend] // built with the first http listener snapshot that uses it
	// refs counts the listeners in service that use the pool (under
	// Proxy.mu).
	refs int
	// panicNext spreads picks among ejected members (pickEjected).
	panicNext atomic.Uint32
}

// Pick returns a usable member, or nil when none is. key is the client IP
// (or, for pools hashing on a header, the header's value). When passive
// ejection alone left no usable member, it returns an ejected one
// (pickEjected).
func (p *Pool) Pick(key []byte) *balance.Member {
	if m := p.bal.Pick(key); m != nil {
		return m
	}
	return p.pickEjected(nil)
}

// PickAddr is Pick with the client address as the key, without
// allocating it.
func (p *Pool) PickAddr(a netip.Addr) *balance.Member {
	if m := balance.PickAddr(p.bal, a); m != nil {
		return m
	}
	return p.pickEjected(nil)
}

// pickEjected returns a member not in tried that only passive ejection
// keeps from traffic, taking them in turn, or nil. Ejection steers traffic
// away from a member while others serve; when every member that passes
// its checks is ejected (a NodePort that the nodes program a moment after
// the Service appears, a burst of resets while pods roll), refusing every
// connection until the ejections end would turn a short failure into
// seconds of outage, so the connection tries them, and the first connect
// that succeeds ends that member's ejection.
func (p *Pool) pickEjected(tried []*balance.Member) *balance.Member {
	n := len(p.members)
	if n == 0 {
		return nil
	}
	start := int(p.panicNext.Add(1) % uint32(n))
	for j := range n {
		m := p.members[(start+j)%n]
		if m.Weight > 0 && Target(m).OnlyEjected() && !slices.Contains(tried, m) {
			return m
		}
	}
	return nil
}

// Members returns the pool's members; the caller must not modify them.
func (p *Pool) Members() []*balance.Member { return p.members }

// Target returns the live state of one of the pool's members: Begin/End
// count its load, ConnectFailed/ConnectSucceeded feed outlier ejection.
func Target(m *balance.Member) *health.Target { return m.State.(*health.Target) }

// pickUntried picks a member not in tried. When the balancer repeats one
// (a hash pool, or one member left), it takes the next usable untried
// member after it in pool order.
func (p *Pool) pickUntried(key []byte, tried []*balance.Member) *balance.Member {
	m := p.bal.Pick(key)
	if m == nil {
		return p.pickEjected(tried)
	}
	if !slices.Contains(tried, m) {
		return m
	}
	i := slices.Index(p.members, m)
	for j := 1; j < len(p.members); j++ {
		c := p.members[(i+j)%len(p.members)]
		if c.Usable() && !slices.Contains(tried, c) {
			return c
		}
	}
	return p.pickEjected(tried)
}

var algorithms = map[snapshot.Algorithm]balance.Algorithm{
	snapshot.RoundRobin:   balance.RoundRobin,
	snapshot.LeastRequest: balance.LeastRequest,
	snapshot.Hash:         balance.Hash,
}

func newPool(sp *snapshot.Pool, reg *health.Registry) *Pool {
	p := &Pool{Spec: sp, members: make([]*balance.Member, len(sp.Members))}
	// One allocation for the pool's members: they live and go together.
	block := make([]balance.Member, len(sp.Members))
	for i, m := range sp.Members {
		block[i] = balance.Member{Addr: m.Addr, Weight: m.Weight, State: reg.AcquireForPool(sp, m.Addr)}
		p.members[i] = &block[i]
	}
	p.bal = balance.New(algorithms[sp.Algorithm], p.members)
	return p
}

// tenantOf returns the tenant of a load balancer named "tenant/name".
func tenantOf(lb string) string {
	t, _, _ := strings.Cut(lb, "/")
	return t
}

// release gives the pool's health targets back.
func (p *Pool) release(reg *health.Registry) {
	for _, m := range p.members {
		reg.Release(Target(m))
	}
}

// build joins s with live pools: it starts from old, the served state in
// service, and sets again only the listeners at keys (those that differ
// between old's snapshot and s), reusing old's live pools for the compiled
// pools s kept. It returns the pools no listener uses any more.
func (p *Proxy) build(s *snapshot.Snapshot, old *served, keys []snapshot.Key) (*served, []*Pool) {
	ls, pools, byLB, byTarget := old.listeners.Edit(), old.pools.Edit(), old.byLB.Edit(), old.byTarget.Edit()
	live := func(sp *snapshot.Pool) *Pool {
		if lp, ok := pools.Get(sp); ok {
			lp.refs++
			return lp
		}
		lp := newPool(sp, p.health)
		lp.refs = 1
		pools.Set(sp, lp)
		of, _ := byLB.Get(sp.LB)
		byLB.Set(sp.LB, append(slices.Clip(of), lp))
		for _, m := range lp.members {
			in, _ := byTarget.Get(Target(m))
			byTarget.Set(Target(m), append(slices.Clip(in), lp))
		}
		return lp
	}
	var dropped []*Pool
	// The engines of WAF rules the listeners replaced held are given back
	// first, so that a tenant at its bound can change its lists.
	for _, k := range keys {
		if ol, had := ls.Get(k); had && ol.Listener != s.Listener(k) {
			ol.rules.release()
		}
	}
	for _, k := range keys {
		l := s.Listener(k)
		ol, had := ls.Get(k)
		if had && l != nil && ol.Listener == l {
			continue
		}
		if l != nil {
			sps := l.Pools()
			nl := &ListenerSnapshot{Listener: l, pools: make([]*Pool, len(sps)), cpu: p.cfg.CPU.Tenant(l.Tenant)}
			nl.cpu.SetMillicores(l.Limits.CPUMillicores)
			if l.Protocol.L7() {
				tb := p.tenantBudget(l.Tenant)
				nl.budget, nl.tenant = tb.member, tb
				nl.streams = &listenerStreams{t: tb, lb: l.LB, name: l.Name}
				if _, ok := p.cfg.HTTP.(QUICHandler); ok && l.HTTP3 && l.Protocol == snapshot.ProtoHTTPS {
					nl.altSvc, nl.h3up = altSvc(l.Key.Addr.Port()), p.h3Flag(l.Key)
				}
			}
			if len(sps) > fewPools {
				nl.byPool = make(map[*snapshot.Pool]*Pool, len(sps))
			}
			for i, sp := range sps {
				nl.pools[i] = live(sp)
				if nl.byPool != nil {
					nl.byPool[sp] = nl.pools[i]
				}
			}
			nl.rates = p.acquireRates(l)
			nl.waf = p.wafInspect
			if l.Protocol.L7() {
				nl.rules = p.acquireRules(l)
				if l.Routes.Regex() {
					nl.regex = p.regexBudget(tenantOf(l.LB), l.Limits.RegexCPUMillicores)
				}
				nl.http = newHTTPTable(nl)
			}
			ls.Set(k, nl)
		} else {
			ls.Delete(k)
		}
		if had {
			ol.rates.release()
			for _, lp := range ol.pools {
				if lp.refs--; lp.refs == 0 {
					dropped = append(dropped, lp)
				}
			}
		}
	}
	var retired []*Pool
	for _, lp := range dropped {
		if lp.refs != 0 || slices.Contains(retired, lp) {
			continue
		}
		retired = append(retired, lp)
		pools.Delete(lp.Spec)
		of, _ := byLB.Get(lp.Spec.LB)
		if of = slices.DeleteFunc(slices.Clone(of), func(o *Pool) bool { return o == lp }); len(of) == 0 {
			byLB.Delete(lp.Spec.LB)
		} else {
			byLB.Set(lp.Spec.LB, of)
		}
		for _, m := range lp.members {
			in, _ := byTarget.Get(Target(m))
			if in = slices.DeleteFunc(slices.Clone(in), func(o *Pool) bool { return o == lp }); len(in) == 0 {
				byTarget.Delete(Target(m))
			} else {
				byTarget.Set(Target(m), in)
			}
		}
	}
	return &served{snap: s, listeners: ls.Done(), pools: pools.Done(), byLB: byLB.Done(), byTarget: byTarget.Done()}, retired
}

// Unhealthy returns, per load balancer ("tenant/name"), why it cannot take
// traffic on this host although its listeners are open: no pool it sends
// to has a member that a connection may go to (all down by their checks
// or drained). Members ejected after connect failures still count: a
// connection tries them when nothing else is left (pickEjected), and every
// host sees the same members fail, so moving the VIP away would only leave
// it with no holder. Pools without members do not count (unservable).
// Health changes without a config change, so callers poll it.
func (p *Proxy) Unhealthy() map[string]string {
	cur := p.current.Load()
	if cur == nil {
		return nil
	}
	usable := map[string]bool{}
	for spec, pool := range cur.pools.All() {
		if len(pool.members) > 0 {
			usable[spec.LB] = usable[spec.LB] || pool.servable()
		}
	}
	out := map[string]string{}
	for lb, ok := range usable {
		if !ok {
			out[lb] = observe.NoHealthyMember
		}
	}
	return out
}

// unservable reports whether a load balancer's pools have members and
// none of them may take a connection. Pools without members do not count:
// every host serves them alike, refusing each connection at once (a
// Gateway listener no route has attached to, a Service without
// endpoints), so such a load balancer is ready and its VIP held.
func unservable(pools []*Pool) bool {
	some := false
	for _, p := range pools {
		if len(p.members) == 0 {
			continue
		}
		if p.servable() {
			return false
		}
		some = true
	}
	return some
}

// servable reports whether a connection may go to a member of the pool
// and be served: one usable, or one only ejected after connect failures
// (Unhealthy says why those count), that its clients do not find Failing
// (passive health, judgePassive).
func (pool *Pool) servable() bool {
	return slices.ContainsFunc(pool.members, func(m *balance.Member) bool {
		return (m.Usable() || (m.Weight > 0 && Target(m).OnlyEjected())) && !Target(m).PassiveFailing()
	})
}

// MemberHealth is one member's health as this host sees it, as the
// observed state (Observed) carries it.
type MemberHealth = observe.Member

// Members returns the health of a load balancer's members ("tenant/name"),
// by pool then address, as this host's checks see them now. It reads that
// load balancer's pools only.
func (p *Proxy) Members(lb string) []MemberHealth {
	cur := p.current.Load()
	if cur == nil {
		return nil
	}
	var out []MemberHealth
	of, _ := cur.byLB.Get(lb)
	for _, pool := range of {
		for _, m := range pool.members {
			out = append(out, MemberHealth{Pool: pool.Spec.Name, Addr: m.Addr, Healthy: m.Usable()})
		}
	}
	slices.SortFunc(out, func(a, b MemberHealth) int {
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
	return slices.CompactFunc(out, func(a, b MemberHealth) bool { return a.Pool == b.Pool && a.Addr == b.Addr })
}

// ReadinessOf is Readiness for the load balancers lbs only; gone lists
// those of lbs the last Update did not hold. It reads their own status and
// pools, nothing else, and applies Unhealthy's rule: members only ejected
// still count.
func (p *Proxy) ReadinessOf(lbs []string) (ready map[string]string, gone []string) {
	p.statusMu.Lock()
	st := p.status
	p.statusMu.Unlock()
	cur := p.current.Load()
	now := time.Now()
	ready = make(map[string]string, len(lbs))
	for _, lb := range lbs {
		problems, ok := st.Get(lb)
		if !ok {
			gone = append(gone, lb)
			continue
		}
		var parts []string
		for _, pr := range problems {
			parts = append(parts, pr.Field+": "+pr.Reason)
		}
		if len(parts) == 0 {
			pools, _ := cur.byLB.Get(lb)
			if r := p.memberReadiness(lb, unservable(pools), now); r != "" {
				parts = append(parts, r)
			}
		}
		ready[lb] = strings.Join(parts, "; ")
	}
	if len(gone) > 0 {
		p.forgetReadiness(func(lb string) bool { return !slices.Contains(gone, lb) })
	}
	return ready, gone
}

// StatusOf is Status for the load balancers lbs only; those the last
// Update did not hold are left out.
func (p *Proxy) StatusOf(lbs []string) map[string][]Problem {
	p.statusMu.Lock()
	st := p.status
	p.statusMu.Unlock()
	out := make(map[string][]Problem, len(lbs))
	for _, lb := range lbs {
		if ps, ok := st.Get(lb); ok {
			out[lb] = slices.Clone(ps)
		}
	}
	return out
}

// Readiness tells, for every load balancer of the last Update
// ("tenant/name"), why this host cannot serve it: its problems (a listener
// not open, a compile error) or, with none, no usable member in any of its
// pools. "" means ready. The VIP manager takes it to decide what this host
// may hold.
func (p *Proxy) Readiness() map[string]string {
	status, unhealthy := p.Status(), p.Unhealthy()
	now := time.Now()
	ready := make(map[string]string, len(status))
	for lb, problems := range status {
		var parts []string
		for _, pr := range problems {
			parts = append(parts, pr.Field+": "+pr.Reason)
		}
		if len(parts) == 0 {
			if r := p.memberReadiness(lb, unhealthy[lb] != "", now); r != "" {
				parts = append(parts, r)
			}
		}
		ready[lb] = strings.Join(parts, "; ")
	}
	p.forgetReadiness(func(lb string) bool { _, ok := status[lb]; return ok })
	return ready
}
