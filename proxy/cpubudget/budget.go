// Package cpubudget charges the CPU of TLS handshakes to the tenant they
// are made for: the ClientHellos its https listeners answer (the key
// exchange, charged a fixed cost before it is done), their full
// handshakes (the server signs with the listener's certificate), the
// checks of its clients' certificate chains (Verify) and the
// handshakes of its HTTPS health checks (the check signs with its client
// key). Each tenant has a token bucket of CPU time and a bound on its
// signatures in progress; a tenant past either waits, then is refused
// (handshakes) or delayed (checks), while the other tenants keep their
// own budgets. A resumed session signs nothing: it pays its ClientHello.
//
// Each tenant also has one host budget over everything it makes the
// host compute (host.go): what is measured here charges it too, and an
// accountant (Budgets.Run) splits the rest of the process's CPU across
// the tenants by the work the data plane counts for them (Tenant.Work),
// holding a tenant in debt where its work enters (Tenant.Throttle).
package cpubudget

import (
	"context"
	"crypto"
	"errors"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOverBudget: a handshake's signature was refused because its tenant
// spent its CPU budget or has too many signatures in progress.
var ErrOverBudget = errors.New("cpubudget: the tenant's handshake CPU budget is spent")

// Defaults, as shares of the host's CPUs (HostCPUs).
const (
	// DefaultShare is the part of the host's CPU time one tenant's
	// signatures may use on average: a quarter (half a core on a 2-core
	// host).
	DefaultShare = 0.25
	// DefaultBurst is how long a quiet tenant may sign at its full rate
	// before it is held to the average: one second of its rate.
	DefaultBurst = time.Second
	// DefaultMaxWait is how long a handshake over budget waits for the
	// budget before it is refused and its connection closed.
	DefaultMaxWait = 200 * time.Millisecond
	// DefaultOverhead is charged for each ClientHello a tenant's
	// listener answers, resumed or not: the key exchange (X25519MLKEM768
	// or X25519) and transcript work done before any signature.
	DefaultOverhead = 150 * time.Microsecond
)

// Options configure Budgets; zero fields take the defaults.
type Options struct {
	// Rate is the CPU time per second one tenant may spend signing
	// (default DefaultShare of GOMAXPROCS: 0.5 on 2 CPUs).
	Rate float64
	// Burst is the CPU time a tenant may spend at once after a quiet
	// period (default DefaultBurst of Rate).
	Burst time.Duration
	// Concurrency bounds one tenant's signatures in progress (default a
	// quarter of GOMAXPROCS, at least 1).
	Concurrency int
	// MaxWait: see DefaultMaxWait.
	MaxWait time.Duration
	// Overhead: see DefaultOverhead (charged by Hello).
	Overhead time.Duration

	// The host budget (host.go). HostMillicores is one tenant's whose
	// quotas.cpuMillicores is unset (default DefaultHostShare of
	// GOMAXPROCS); Tick, HostBurst and MaxUnitCost default to
	// DefaultTick, DefaultHostBurst and DefaultMaxUnitCost.
	HostMillicores int
	Tick           time.Duration
	HostBurst      time.Duration
	MaxUnitCost    time.Duration
}

func (o Options) withDefaults() Options {
	procs := HostCPUs()
	if o.Rate <= 0 {
		o.Rate = DefaultShare * float64(procs)
	}
	if o.Burst <= 0 {
		o.Burst = time.Duration(o.Rate * float64(DefaultBurst))
	}
	if o.Concurrency <= 0 {
		o.Concurrency = max(1, procs/4)
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Overhead <= 0 {
		o.Overhead = DefaultOverhead
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.HostBurst <= 0 {
		o.HostBurst = DefaultHostBurst
	}
	if o.MaxUnitCost <= 0 {
		o.MaxUnitCost = DefaultMaxUnitCost
	}
	return o
}

// Budgets holds every tenant's budget on this host.
type Budgets struct {
	o       Options
	mu      sync.Mutex
	tenants map[string]*Tenant
}

// New returns the budgets of a host.
func New(o Options) *Budgets {
	return &Budgets{o: o.withDefaults(), tenants: map[string]*Tenant{}}
}

// Options returns the options in effect (defaults filled in).
func (b *Budgets) Options() Options { return b.o }

// Tenant returns a tenant's budget, created on first use (nil for a nil
// Budgets: nothing is charged, nothing waits). A tenant keeps
// its budget (a few hundred bytes) while the process runs, so that
// removing and adding its listeners does not refill it.
func (b *Budgets) Tenant(name string) *Tenant {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenants[name]
	if t == nil {
		t = &Tenant{b: b, name: name, sem: make(chan struct{}, b.o.Concurrency), tokens: float64(b.o.Burst), last: time.Now()}
		b.tenants[name] = t
	}
	return t
}

// Stat is one tenant's account.
type Stat struct {
	Tenant string
	// Hellos counts ClientHellos admitted, Signed signatures made,
	// Refused handshakes refused over budget, Delayed health checks that
	// waited for the budget.
	Hellos, Signed, Refused, Delayed uint64
	// Verified counts client certificate chains checked (Verify).
	Verified uint64
	// Spent is the CPU time charged.
	Spent time.Duration
	// InFlight is the signatures in progress, Peak the most at once.
	InFlight, Peak int
}

// Stats returns every tenant's account, by tenant name (none for a nil
// Budgets: nothing is charged).
func (b *Budgets) Stats() []Stat {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	out := make([]Stat, 0, len(b.tenants))
	for _, t := range b.tenants {
		out = append(out, t.Stat())
	}
	b.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

// Tenant is one tenant's budget: a token bucket of CPU time that may go
// into debt by one signature (its cost is known only once made), and a
// semaphore of signatures in progress.
type Tenant struct {
	b    *Budgets
	name string
	sem  chan struct{}

	mu     sync.Mutex
	tokens float64 // nanoseconds of CPU; negative: in debt
	last   time.Time

	hellos, signed, refused, delayed atomic.Uint64
	verified                         atomic.Uint64
	spent                            atomic.Int64
	// inFlight counts signatures in progress, peak the most at once.
	inFlight, peak atomic.Int32

	host    // the tenant's account in the host budget (host.go)
	compute // its slots of background computing (compute.go)
}

// Name returns the tenant's name.
func (t *Tenant) Name() string { return t.name }

// Stat returns the tenant's account.
func (t *Tenant) Stat() Stat {
	return Stat{Tenant: t.name, Hellos: t.hellos.Load(), Signed: t.signed.Load(), Refused: t.refused.Load(), Delayed: t.delayed.Load(), Verified: t.verified.Load(), Spent: time.Duration(t.spent.Load()), InFlight: int(t.inFlight.Load()), Peak: int(t.peak.Load())}
}

// owed returns how long until the bucket is out of debt (0: it is not);
// it refills the bucket first.
func (t *Tenant) owed(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill(now)
	if t.tokens >= 0 {
		return 0
	}
	return time.Duration(-t.tokens/t.b.o.Rate) + 1
}

// refill adds what the time since the last refill earned, up to Burst;
// called under t.mu.
func (t *Tenant) refill(now time.Time) {
	if el := now.Sub(t.last); el > 0 {
		t.tokens = min(t.tokens+float64(el)*t.b.o.Rate, float64(t.b.o.Burst))
		t.last = now
	}
}

// charge takes cost from the bucket.
func (t *Tenant) charge(cost time.Duration) {
	t.mu.Lock()
	t.refill(time.Now())
	t.tokens -= float64(cost)
	t.mu.Unlock()
	t.spent.Add(int64(cost))
	t.ChargeDirect(cost)
}

// Hello admits a ClientHello to one of the tenant's listeners before any
// key exchange is done: while the bucket is in debt it waits up to
// MaxWait, then fails with ErrOverBudget (the handshake ends before it
// cost more); admitted, it is charged Overhead. A resumed session pays
// this and nothing more.
func (t *Tenant) Hello() error {
	deadline := time.Now().Add(t.b.o.MaxWait)
	if !t.waitTokens(context.Background(), deadline) || !t.throttleUntil(context.Background(), deadline) {
		t.refused.Add(1)
		return ErrOverBudget
	}
	t.hellos.Add(1)
	t.charge(t.b.o.Overhead)
	return nil
}

// waitTokens waits until the bucket is out of debt, for at most until
// deadline (zero: no deadline) or until ctx ends; it reports whether the
// bucket is out of debt.
func (t *Tenant) waitTokens(ctx context.Context, deadline time.Time) bool {
	for {
		now := time.Now()
		d := t.owed(now)
		if d == 0 {
			return true
		}
		if !deadline.IsZero() {
			if !now.Before(deadline) {
				return false
			}
			d = min(d, deadline.Sub(now))
		}
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return false
		}
	}
}

// acquire takes a slot of the semaphore, waiting until deadline (zero: no
// deadline) or ctx ends.
func (t *Tenant) acquire(ctx context.Context, deadline time.Time) bool {
	select {
	case t.sem <- struct{}{}:
		return true
	default:
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return false
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		timeout = tm.C
	}
	select {
	case t.sem <- struct{}{}:
		return true
	case <-timeout:
		return false
	case <-ctx.Done():
		return false
	}
}

// Wait blocks until the tenant's bucket and its host budget are out of
// debt or ctx ends, and reports whether they are: a health check calls it
// before it starts, so a tenant whose checks (or anything else) spent its
// budget has its checks delayed.
func (t *Tenant) Wait(ctx context.Context) bool {
	if t.owed(time.Now()) == 0 && t.gate.Load() == nil {
		return true
	}
	t.delayed.Add(1)
	return t.waitTokens(ctx, time.Time{}) && t.ThrottleCtx(ctx)
}

// sign makes one signature charged to the tenant. With refuse, a
// signature that cannot start within MaxWait fails with ErrOverBudget;
// without, it waits for a slot as long as it takes (the caller waited for
// the tokens already).
func (t *Tenant) sign(s crypto.Signer, rand io.Reader, digest []byte, opts crypto.SignerOpts, refuse bool) ([]byte, error) {
	ctx := context.Background()
	var deadline time.Time
	if refuse {
		deadline = time.Now().Add(t.b.o.MaxWait)
		if !t.waitTokens(ctx, deadline) || !t.throttleUntil(ctx, deadline) || !t.acquire(ctx, deadline) {
			t.refused.Add(1)
			return nil, ErrOverBudget
		}
	} else {
		t.acquire(ctx, time.Time{})
	}
	if n := t.inFlight.Add(1); n > t.peak.Load() {
		t.peak.Store(n) // a race may lose a peak by one; it is a statistic
	}
	run := measure
	if !refuse {
		// A check's signature: no client waits for it, and the tenant may
		// make one after another up to its budget, a quarter of the
		// host's CPUs by default. On a thread of a low priority it
		// takes little of the CPU the host's other work wants, so that on a
		// busy host it slows the tenant's checks, not its neighbours'
		// requests or the admin API.
		run = measureLow
	}
	sig, cost, err := run(func() ([]byte, error) { return s.Sign(rand, digest, opts) })
	t.inFlight.Add(-1)
	<-t.sem
	t.charge(cost)
	t.signed.Add(1)
	return sig, err
}

// Signer returns s with its signatures charged to the tenant; over budget
// they wait up to MaxWait and then fail with ErrOverBudget, which fails
// the handshake. It is the key of the tenant's server certificates.
func (t *Tenant) Signer(s crypto.Signer) crypto.Signer {
	return &signer{t: t, s: s, refuse: true}
}

// ClientSigner returns s with its signatures charged to the tenant
// without refusal: the health checks that sign with it wait for the
// budget before they start (Wait). Each signature runs on a thread of
// a low priority (measureLow).
func (t *Tenant) ClientSigner(s crypto.Signer) crypto.Signer {
	return &signer{t: t, s: s}
}

type signer struct {
	t      *Tenant
	s      crypto.Signer
	refuse bool
}

var _ crypto.Signer = (*signer)(nil)

func (s *signer) Public() crypto.PublicKey { return s.s.Public() }

func (s *signer) Sign(rand io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	return s.t.sign(s.s, rand, digest, opts, s.refuse)
}

// Measure runs f on a thread of its own and returns the CPU time that
// thread spent in it (on Linux; the wall time elsewhere): the cost of f
// itself, not of the goroutines that ran while it waited for a core.
func Measure(f func()) time.Duration {
	_, d, _ := measure(func() ([]byte, error) { f(); return nil, nil })
	return d
}
