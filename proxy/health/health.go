// Package health tracks whether backend members may receive traffic:
// active checks (a TCP connect, or an HTTP GET, plain or over TLS with the
// member's certificate verified, expecting a status, with interval,
// timeout and rise/fall thresholds) and passive outlier ejection
// (a member whose connects fail several times in a row is taken out for a
// backoff period that doubles while it keeps failing).
//
// State lives in a Registry keyed by member address and check spec, with
// reference counts: a config change that keeps a member keeps its health,
// in-flight count and ejection, and pools of different load balancers that
// check the same member the same way share one Target. Each tenant
// dispatches its checks from one timer to at most MaxChecksPerTenant
// goroutines (dispatch.go), never one per member, and at most
// MaxConcurrentChecks run at once.
package health

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// Options configure a Registry; zero fields take the defaults below.
type Options struct {
	Logger *slog.Logger
	// EjectAfter consecutive connect failures eject a member (default 3).
	EjectAfter int
	// EjectFor is the first ejection's length (default 5s); it doubles for
	// each ejection that follows without a successful connect in between,
	// up to MaxEjectFor (default 1m).
	EjectFor    time.Duration
	MaxEjectFor time.Duration
	// MaxConcurrentChecks bounds the checks in flight (default 256).
	MaxConcurrentChecks int
	// MaxChecksPerTenant bounds one tenant's checks in flight (default
	// MaxConcurrentChecks/8, at least 1): a tenant whose checks hang (a
	// tarpit) holds at most this share of MaxConcurrentChecks.
	MaxChecksPerTenant int
	// MaxCheckTimeout bounds any check's timeout (default 10s).
	MaxCheckTimeout time.Duration
	// OnChange is called, without locks held, when a target becomes
	// healthy or unhealthy (check or ejection); reason says why.
	OnChange func(t *Target, healthy bool, reason string)
	// Owners, when set, returns the pools that serve a target now; each
	// log line about a target is written once per pool, with its tenant,
	// load balancer and pool. A target no served pool holds yet (its
	// first check may end before the snapshot that holds it is
	// published) is logged with the pool that acquired it first.
	Owners func(t *Target) []*snapshot.Pool
	// CPU charges the client signatures of a tenant's https checks to
	// the tenant (the budget its listeners' handshakes draw on too): a
	// tenant whose checks spent it has its checks delayed. Nil takes
	// budgets of the defaults.
	CPU *cpubudget.Budgets
	// Dial, when set, makes the checks' connections of a tenant as d
	// would (from the namespace of the tenant's attachment); nil dials
	// from the host's namespace.
	Dial func(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.EjectAfter <= 0 {
		o.EjectAfter = 3
	}
	if o.EjectFor <= 0 {
		o.EjectFor = 5 * time.Second
	}
	if o.MaxEjectFor <= 0 {
		o.MaxEjectFor = time.Minute
	}
	o.MaxEjectFor = max(o.MaxEjectFor, o.EjectFor)
	if o.MaxConcurrentChecks <= 0 {
		o.MaxConcurrentChecks = 256
	}
	if o.MaxChecksPerTenant <= 0 {
		o.MaxChecksPerTenant = max(1, o.MaxConcurrentChecks/8)
	}
	o.MaxChecksPerTenant = min(o.MaxChecksPerTenant, o.MaxConcurrentChecks)
	if o.MaxCheckTimeout <= 0 {
		o.MaxCheckTimeout = 10 * time.Second
	}
	if o.CPU == nil {
		o.CPU = cpubudget.New(cpubudget.Options{})
	}
	return o
}

// Registry holds the Targets in use.
type Registry struct {
	o   Options
	sem chan struct{}
	wg  sync.WaitGroup
	mu  sync.Mutex
	// targets holds the targets in use by address (in selfKey's form):
	// the first, the others at that address (other tenants or checks)
	// chained through Target.next. It is also the index by address that
	// ChangeSelf uses, so a member costs one map entry.
	targets map[netip.AddrPort]*Target
	// n is the number of targets in use.
	n int
	// checks holds one copy of each check in use, for the targets' keys.
	checks map[snapshot.HealthCheck]*checkRef
	closed bool
	// self holds the addresses this host listens on (guarded by mu).
	self map[netip.AddrPort]bool
	// selfLooks counts the targets SetSelf and ChangeSelf looked at.
	selfLooks int
	// tenants holds each tenant's check budget (guarded by mu).
	tenants map[string]*tenantBudget
	// tlsConfs holds the parsed TLS settings of https checks (guarded by
	// mu).
	tlsConfs map[tlsKey]*tlsEntry
	// epoch is the start of the registry's clock (now).
	epoch time.Time
	// ctx ends with Close: checks waiting or in flight stop at once.
	ctx    context.Context
	cancel context.CancelFunc
}

// tenantBudget bounds one tenant's checks in flight and dispatches them
// (dispatch.go). A Target names its tenant through its budget.
type tenantBudget struct {
	r      *Registry
	tenant string
	slots  int // MaxChecksPerTenant

	mu sync.Mutex
	// timed holds the targets whose next check is not due yet, ready
	// (from head) those due, waiting for a slot; nready counts the live
	// ones among them (a stopped target's entry stays until skipped).
	timed  timedHeap
	ready  []*Target
	head   int
	nready int
	// running counts the tenant's workers (at most slots).
	running int
	// timer fires at armed, the earliest due check (0: not set).
	timer *time.Timer
	armed time.Duration

	// cpu is the tenant's budget of signature CPU.
	cpu  *cpubudget.Tenant
	refs int // targets of the tenant, guarded by Registry.mu
}

// targetKey is a Target's address and check; with the tenant (its
// budget) it identifies the Target. check is the registry's one copy of
// the check (nil: passive only), so that a key is small: a million
// targets at 100,000 load balancers do not each carry a HealthCheck.
type targetKey struct {
	addr  netip.AddrPort
	check *snapshot.HealthCheck
}

// checkRef is the registry's copy of one check and how many targets use it.
type checkRef struct {
	hc   snapshot.HealthCheck
	refs int
}

// NewRegistry returns an empty registry.
func NewRegistry(o Options) *Registry {
	o = o.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Registry{o: o, sem: make(chan struct{}, o.MaxConcurrentChecks), targets: map[netip.AddrPort]*Target{}, checks: map[snapshot.HealthCheck]*checkRef{},
		tenants: map[string]*tenantBudget{}, tlsConfs: map[tlsKey]*tlsEntry{}, epoch: time.Now(), ctx: ctx, cancel: cancel}
}

// Acquire returns the Target for a member address and check (nil: no
// active check), creating it and starting its checks on first use. Each
// Acquire needs a Release.
func (r *Registry) Acquire(addr netip.AddrPort, hc *snapshot.HealthCheck) *Target {
	return r.AcquireFor("", addr, hc)
}

// AcquireFor is Acquire for a tenant's member: the tenant's checks share
// its budget of MaxChecksPerTenant in flight, so they cannot delay
// another tenant's.
func (r *Registry) AcquireFor(tenant string, addr netip.AddrPort, hc *snapshot.HealthCheck) *Target {
	return r.acquire(tenant, addr, hc, nil)
}

// AcquireForPool is AcquireFor for a member of pool: the target's log
// lines name the pool until Options.Owners finds it served.
func (r *Registry) AcquireForPool(pool *snapshot.Pool, addr netip.AddrPort) *Target {
	tenant, _, _ := strings.Cut(pool.LB, "/")
	return r.acquire(tenant, addr, pool.Health, pool)
}

func (r *Registry) acquire(tenant string, addr netip.AddrPort, hc *snapshot.HealthCheck, pool *snapshot.Pool) *Target {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := targetKey{addr: addr}
	var ref *checkRef
	if hc != nil {
		c := *hc
		c.Timeout = min(c.Timeout, r.o.MaxCheckTimeout)
		if ref = r.checks[c]; ref == nil {
			ref = &checkRef{hc: c}
			r.checks[c] = ref
		}
		k.check = &ref.hc
	}
	a := selfKey(addr)
	first := r.targets[a]
	for t := first; t != nil; t = t.next {
		if t.key == k && t.budget.tenant == tenant {
			t.refs++
			return t
		}
	}
	if ref != nil {
		ref.refs++
	}
	tb := r.tenants[tenant]
	if tb == nil {
		tb = &tenantBudget{r: r, tenant: tenant, slots: r.o.MaxChecksPerTenant, cpu: r.o.CPU.Tenant(tenant)}
		r.tenants[tenant] = tb
	}
	tb.refs++
	t := &Target{r: r, key: k, budget: tb, next: first, refs: 1, firstPool: pool}
	if k.check != nil {
		t.active = &activeCheck{}
		if k.check.TLS {
			t.active.tls = r.acquireTLS(tb, k.check)
			t.active.sessions = tls.NewLRUClientSessionCache(1)
		}
	}
	t.setBit(bitSelf, r.isSelf(addr))
	r.targets[a] = t
	r.n++
	if k.check != nil && !r.closed {
		first := time.Duration(rand.Int64N(int64(min(k.check.Interval, time.Second)) + 1))
		t.schedule(first)
	}
	return t
}

// SetSelf names the addresses and ports this host listens on (every
// listener of the snapshot about to be served). Targets at one of them, or
// at an unspecified address, are never usable and never dialled, by checks
// or traffic: the proxy must not connect to its own listeners.
//
// Targets whose health this changes are reported to Options.OnChange, as a
// check would report them, once the registry's lock is released.
func (r *Registry) SetSelf(addrs map[netip.AddrPort]bool) {
	r.mu.Lock()
	r.self = addrs
	var flipped []*Target
	for _, first := range r.targets {
		for t := first; t != nil; t = t.next {
			r.selfLooks++
			flipped = t.setSelf(r.isSelf(t.key.addr), flipped)
		}
	}
	r.mu.Unlock()
	r.notifySelf(flipped)
}

// ChangeSelf changes the addresses and ports SetSelf named: added are
// listened on now, removed no longer. It looks at the targets at those
// addresses alone: a change costs what it opens and closes, not what the
// registry holds. Like SetSelf, it reports the targets whose health it
// changes to Options.OnChange.
func (r *Registry) ChangeSelf(added, removed []netip.AddrPort) {
	r.mu.Lock()
	if r.self == nil {
		r.self = map[netip.AddrPort]bool{}
	}
	var flipped []*Target
	for _, a := range removed {
		a = selfKey(a)
		delete(r.self, a)
		for t := r.targets[a]; t != nil; t = t.next {
			r.selfLooks++
			flipped = t.setSelf(r.isSelf(a), flipped)
		}
	}
	for _, a := range added {
		a = selfKey(a)
		r.self[a] = true
		for t := r.targets[a]; t != nil; t = t.next {
			r.selfLooks++
			flipped = t.setSelf(true, flipped)
		}
	}
	r.mu.Unlock()
	r.notifySelf(flipped)
}

// notifySelf reports targets whose health SetSelf or ChangeSelf changed;
// called without r.mu. A target flipped twice in one call is reported
// once, in its final state.
func (r *Registry) notifySelf(flipped []*Target) {
	if r.o.OnChange == nil {
		return
	}
	seen := make(map[*Target]bool, len(flipped))
	for _, t := range flipped {
		if seen[t] {
			continue
		}
		seen[t] = true
		if healthy := t.Healthy(); healthy {
			r.o.OnChange(t, true, "no longer an address this host listens on")
		} else {
			r.o.OnChange(t, false, "an address this host listens on; never dialled")
		}
	}
}

// selfKey is the form of an address and port in self and targets.
func selfKey(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// isSelf is called under r.mu.
func (r *Registry) isSelf(a netip.AddrPort) bool {
	a = selfKey(a)
	return a.Addr().IsUnspecified() || r.self[a]
}

// Release drops one reference; the last one stops the Target's checks.
// The Target stays usable by whoever still holds it, frozen in its last
// state.
func (r *Registry) Release(t *Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.refs--; t.refs > 0 {
		return
	}
	if r.unlink(t) {
		r.n--
		if t.budget.refs--; t.budget.refs == 0 && r.tenants[t.budget.tenant] == t.budget {
			delete(r.tenants, t.budget.tenant)
		}
		if t.active != nil && t.active.tls != nil {
			r.releaseTLS(t.budget.tenant, t.key.check, t.active.tls)
		}
		if c := t.key.check; c != nil {
			if ref := r.checks[*c]; ref != nil && &ref.hc == c {
				if ref.refs--; ref.refs == 0 {
					delete(r.checks, *c)
				}
			}
		}
	}
	t.stop()
}

// unlink takes t out of r.targets and reports whether it was there;
// called under r.mu.
func (r *Registry) unlink(t *Target) bool {
	a := selfKey(t.key.addr)
	first := r.targets[a]
	if first == t {
		if t.next == nil {
			delete(r.targets, a)
		} else {
			r.targets[a] = t.next
		}
		t.next = nil
		return true
	}
	for p := first; p != nil; p = p.next {
		if p.next == t {
			p.next = t.next
			t.next = nil
			return true
		}
	}
	return false
}

// Len returns the number of targets in use.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Close stops every check and waits for those in flight.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	for _, first := range r.targets {
		for t := first; t != nil; t = t.next {
			t.stop()
		}
	}
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// backoff returns the length of the n-th consecutive ejection (from 0).
func (r *Registry) backoff(n int) time.Duration {
	d := r.o.EjectFor
	for ; n > 0 && d < r.o.MaxEjectFor; n-- {
		d *= 2
	}
	return min(d, r.o.MaxEjectFor)
}
