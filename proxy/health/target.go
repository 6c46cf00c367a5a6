package health

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// State bits; a Target is healthy when none is set.
const (
	bitDown    = 1 << iota // the active check says down
	bitEjected             // passive ejection
	bitSelf                // the member is an address this host listens on
)

// Target is the live state of one member under one check. It is kept
// small (a host holds one per member and check): what only an active
// check needs is in active, allocated for targets that have one.
type Target struct {
	r   *Registry
	key targetKey
	// budget is the tenant's check budget; it names the tenant.
	budget *tenantBudget
	// next is the next target at the same address in r.targets (guarded
	// by r.mu).
	next *Target
	refs int32 // guarded by r.mu

	state     atomic.Uint32
	connFails atomic.Int32
	// ejections counts ejections since the last successful connect.
	ejections atomic.Int32
	inFlight  atomic.Int64
	// ejected counts every ejection.
	ejected atomic.Int64
	// passive holds what clients got from the member lately (Record);
	// nil until its first request.
	passive atomic.Pointer[passiveWindow]
	// passiveFailing is the last passive verdict (SetPassiveFailing).
	passiveFailing atomic.Bool

	mu         sync.Mutex
	stopped    bool
	ejectTimer *time.Timer
	// active is the state of the active check (guarded by mu; the
	// pointer itself never changes); nil without one.
	active *activeCheck
	// firstPool is the pool that acquired the target (nil: acquired
	// without one); its log lines name it while no served pool holds
	// the target.
	firstPool *snapshot.Pool
}

// activeCheck is what a Target with an active check keeps between
// checks.
type activeCheck struct {
	// tls is the TLS configuration of an https check (nil otherwise);
	// sessions holds the target's TLS session, so that a check resumes
	// the last one and signs nothing when the member allows it.
	tls      *tlsEntry
	sessions tls.ClientSessionCache
	// due is when the next check is due (on Registry.now), idx the
	// target's place in its tenant's heap and q where its next check is
	// (dispatch.go); guarded by the tenant budget's mu.
	due time.Duration
	idx int32
	q   uint8
	// cancel ends the check in flight, or waiting for a budget, when the
	// target stops (nil between checks).
	cancel     context.CancelFunc
	checked    bool
	rise, fall int // consecutive successes and failures
	lastErr    error
	lastCheck  time.Time
}

// Addr is the member's address.
func (t *Target) Addr() netip.AddrPort { return t.key.addr }

// Name is the member's address as text ("10.0.0.1:80", "[2001:db8::1]:80").
func (t *Target) Name() string { return t.key.addr.String() }

// Healthy reports whether the member may receive new traffic.
func (t *Target) Healthy() bool { return t.state.Load() == 0 }

// CheckedDown reports whether the active check has taken the member down
// (passive ejection aside).
func (t *Target) CheckedDown() bool { return t.state.Load()&bitDown != 0 }

// InFlight is the number of connections or requests the member serves.
func (t *Target) InFlight() int64 { return t.inFlight.Load() }

// Ejections counts the member's passive ejections.
func (t *Target) Ejections() int64 { return t.ejected.Load() }

// Begin counts a connection or request towards the member; call End when
// it finishes.
func (t *Target) Begin() { t.inFlight.Add(1) }

// End ends what Begin counted.
func (t *Target) End() { t.inFlight.Add(-1) }

// Status is a Target's state for display.
type Status struct {
	// Down: the active check failed Fall times (or the first time).
	Down bool
	// Ejected: passive ejection after consecutive connect failures.
	Ejected bool
	// Self: the member's address is one this host listens on (a VIP); it
	// is never dialled.
	Self bool
	// LastError is the last check's failure, "" after a success.
	LastError string
	// LastCheck is when the last active check finished (zero: none yet).
	LastCheck time.Time
}

// Status returns the Target's state.
func (t *Target) Status() Status {
	s := t.state.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Status{Down: s&bitDown != 0, Ejected: s&bitEjected != 0, Self: s&bitSelf != 0}
	if a := t.active; a != nil {
		st.LastCheck = a.lastCheck
		if a.lastErr != nil {
			st.LastError = a.lastErr.Error()
		}
	}
	return st
}

// OnlyEjected reports whether passive ejection alone keeps the member
// from traffic: its active check (if any) passes and it is not this
// host's own address. A pool whose members are all only ejected still
// tries them rather than refuse every connection.
func (t *Target) OnlyEjected() bool { return t.state.Load() == bitEjected }

// ConnectSucceeded records a successful connect to the member. A member
// that accepts a connection is alive: an ejection in force ends at once.
func (t *Target) ConnectSucceeded() {
	if t.connFails.Load() != 0 {
		t.connFails.Store(0)
	}
	if t.ejections.Load() != 0 {
		t.ejections.Store(0)
	}
	if t.state.Load()&bitEjected != 0 {
		t.endEjection("a connect succeeded")
	}
}

// endEjection lifts an ejection in force.
func (t *Target) endEjection(why string) {
	var notify func()
	defer func() { runNotify(notify) }()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state.Load()&bitEjected == 0 {
		return
	}
	if t.ejectTimer != nil {
		t.ejectTimer.Stop()
		t.ejectTimer = nil
	}
	t.setBit(bitEjected, false)
	t.log(slog.LevelInfo, "member back from ejection", "reason", why)
	if t.Healthy() {
		notify = t.notifier(true, "back from ejection: "+why)
	}
}

// ConnectFailed records a failed connect; EjectAfter of them in a row
// eject the member for a backoff period.
func (t *Target) ConnectFailed() {
	if int(t.connFails.Add(1)) < t.r.o.EjectAfter {
		return
	}
	var notify func()
	defer func() { runNotify(notify) }()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.state.Load()&bitEjected != 0 {
		return
	}
	t.connFails.Store(0)
	d := t.r.backoff(int(t.ejections.Add(1) - 1))
	was := t.Healthy()
	t.ejected.Add(1)
	t.setBit(bitEjected, true)
	t.log(slog.LevelWarn, "member ejected after consecutive connect failures",
		"failures", t.r.o.EjectAfter, "for", d)
	if was {
		notify = t.notifier(false, fmt.Sprintf("ejected for %s after %d consecutive connect failures", d, t.r.o.EjectAfter))
	}
	var timer *time.Timer
	timer = time.AfterFunc(d, func() {
		t.mu.Lock()
		current := t.ejectTimer == timer
		t.mu.Unlock()
		if current {
			t.endEjection("its time ended")
		}
	})
	t.ejectTimer = timer
}

// log writes a line about the member once per pool that serves it, with
// the tenant, load balancer ("tenant/name") and pool, so that an operator
// can grep a tenant's or a load balancer's lines.
func (t *Target) log(level slog.Level, msg string, args ...any) {
	lg := t.r.o.Logger
	if !lg.Enabled(context.Background(), level) {
		return
	}
	var pools []*snapshot.Pool
	if t.r.o.Owners != nil {
		pools = t.r.o.Owners(t)
	}
	if len(pools) == 0 && t.firstPool != nil {
		pools = []*snapshot.Pool{t.firstPool}
	}
	if len(pools) == 0 {
		lg.Log(context.Background(), level, msg, append([]any{"tenant", t.budget.tenant, "member", t.Name()}, args...)...)
		return
	}
	for _, p := range pools {
		lg.Log(context.Background(), level, msg, append([]any{"tenant", t.budget.tenant, "lb", p.LB, "pool", p.Name, "member", t.Name()}, args...)...)
	}
}

// notifier returns the call of the registry's OnChange for t, or nil.
func (t *Target) notifier(healthy bool, reason string) func() {
	if t.r.o.OnChange == nil {
		return nil
	}
	return func() { t.r.o.OnChange(t, healthy, reason) }
}

func runNotify(f func()) {
	if f != nil {
		f()
	}
}

// setSelf sets or clears bitSelf; a target whose Healthy() or
// OnlyEjected() changes (what decides whether it takes traffic) is
// appended to flipped.
func (t *Target) setSelf(on bool, flipped []*Target) []*Target {
	was := t.state.Load()
	t.setBit(bitSelf, on)
	if now := t.state.Load(); (now == 0) != (was == 0) || (now == bitEjected) != (was == bitEjected) {
		flipped = append(flipped, t)
	}
	return flipped
}

func (t *Target) setBit(bit uint32, on bool) {
	for {
		old := t.state.Load()
		nw := old &^ bit
		if on {
			nw |= bit
		}
		if t.state.CompareAndSwap(old, nw) {
			return
		}
	}
}

// stop ends the checks and the ejection timer; called under r.mu.
func (t *Target) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.active != nil {
		t.budget.unschedule(t)
	}
	if t.active != nil && t.active.cancel != nil {
		// A released target's check stops now, waiting or in flight,
		// and gives its tenant's budget back: a deleted load balancer's
		// checks of a tarpit must not hold up the tenant's new ones.
		t.active.cancel()
	}
	if t.ejectTimer != nil {
		t.ejectTimer.Stop()
	}
}

// schedule runs the next check after d, unless stopped.
func (t *Target) schedule(d time.Duration) { t.budget.schedule(t, d) }

// run makes one check, on a worker of the tenant's (which holds one of
// its MaxChecksPerTenant slots), and schedules the next.
func (t *Target) run() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(t.r.ctx)
	t.active.cancel = cancel
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.active.cancel = nil
		t.mu.Unlock()
		cancel()
	}()
	var err error
	self := t.state.Load()&bitSelf != 0
	if hc := t.key.check; !self && hc.Port != 0 {
		t.r.mu.Lock()
		self = t.r.isSelf(netip.AddrPortFrom(t.key.addr.Addr(), hc.Port))
		t.r.mu.Unlock()
	}
	if self {
		err = ErrSelf // never dialled: it would be this host's own listener
	} else {
		// The check holds a slot of its tenant's (its worker); it waits
		// while the tenant's handshake CPU or its host budget is spent
		// (its checks are delayed, not failed): every check costs its
		// tenant CPU (check), an https one a handshake. At most the
		// tenant's slots wait for its CPU, each waking when the debt is
		// paid, and its other due checks wait in its ready queue without
		// a goroutine. A tenant at its bound waits without holding a slot
		// of the host's.
		if !t.budget.cpu.Wait(ctx) {
			return
		}
		select {
		case t.r.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err = check(ctx, t.r.dialer(t.budget.tenant), t.key.addr, t.key.check, t.active.tls, t.active.sessions, t.budget.cpu)
		<-t.r.sem
		if ctx.Err() != nil {
			return // stopped: no result, no next check
		}
	}
	t.record(err)
	// Up to 10% of jitter keeps checks of many members from bunching.
	iv := t.key.check.Interval
	t.schedule(iv - time.Duration(rand.Int64N(int64(iv)/10+1)))
}

// record applies one check result: the first decides at once, then Rise
// successes bring the member up and Fall failures take it down.
func (t *Target) record(err error) {
	var notify func()
	defer func() { runNotify(notify) }()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	a := t.active
	a.lastErr, a.lastCheck = err, time.Now()
	if err == nil {
		a.rise, a.fall = a.rise+1, 0
	} else {
		a.rise, a.fall = 0, a.fall+1
	}
	down := t.state.Load()&bitDown != 0
	wasHealthy, first := t.Healthy(), !a.checked
	defer func() {
		if now := t.Healthy(); now != wasHealthy || (first && !now) {
			reason := "health check passes"
			if err != nil {
				reason = "health check fails: " + err.Error()
			}
			notify = t.notifier(now, reason)
		}
	}()
	switch {
	case !a.checked:
		a.checked = true
		t.setBit(bitDown, err != nil)
	case down && a.rise >= t.key.check.Rise:
		t.setBit(bitDown, false)
	case !down && a.fall >= t.key.check.Fall:
		t.setBit(bitDown, true)
	default:
		return
	}
	if now := t.state.Load()&bitDown != 0; now != down {
		if now {
			t.log(slog.LevelWarn, "member down", "error", err)
		} else {
			t.log(slog.LevelInfo, "member up")
		}
	}
}
