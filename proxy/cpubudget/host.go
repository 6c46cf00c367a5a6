package cpubudget

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// The host budget: one budget of CPU per tenant on this host
// (quotas.cpuMillicores) over everything the tenant makes the host
// compute. What is measured where it is spent (signatures, certificate
// chains, regular expressions, WAF inspections: ChargeDirect) is charged
// as measured; the rest of the process's CPU time (reading, parsing and
// relaying requests, TLS records, HTTP/2 frames, L4 bytes, QUIC) is split
// by the accountant (Run), every Tick, across the tenants in proportion
// to the work they brought in that tick (Work: requests, connections,
// datagrams, bytes), each unit at most MaxUnitCost, so that the host's
// own work (the admin API, Raft, a flood of its API port) is never billed
// to a tenant that brought in a few requests. A tenant in debt is
// throttled where its work enters (Throttle: its connections wait before
// their next request, its new connections before they are served, its
// handshakes and checks wait as for their own budget) until the
// accountant finds it out of debt; its neighbours and the admin API never
// wait for it.
const (
	// DefaultHostShare is the part of the host's CPUs one tenant may use
	// when its quotas.cpuMillicores is unset: a quarter (half a core of
	// 2, 8 cores of 32), so that whatever one tenant does, three quarters
	// of the host are left to the others and the admin API.
	DefaultHostShare = 0.25
	// DefaultTick is how often the accountant charges the process's CPU
	// time and opens or closes each tenant's gate.
	DefaultTick = 25 * time.Millisecond
	// DefaultHostBurst is the CPU time a quiet tenant may spend at once,
	// as time at its rate: a fifth of a second's worth.
	DefaultHostBurst = 200 * time.Millisecond
	// MaxDebt bounds a tenant's debt, as time at its rate: a tenant is
	// never throttled more than a second for what it spent at once.
	MaxDebt = time.Second
	// DefaultMaxUnitCost bounds what one unit of work is charged of the
	// process's CPU time that was not measured directly: about ten times
	// what a request costs without the race detector (22 us HTTP/1.1, 40
	// us HTTP/2 in proxy/l7's benchmarks), so that the CPU of work no
	// tenant brought in (the admin API, Raft, a flood of the API port)
	// charges a neighbour that serves 100 requests a second at most 25 ms
	// a second, a twentieth of its default budget on 2 cores. At 2 ms a
	// unit, tenant a's 114 probes a second were charged 0.26 of a core
	// while b flooded the API port (TestNoisyNeighbour, all at once).
	DefaultMaxUnitCost = 250 * time.Microsecond
	// HotFor is how long after it was last in debt a tenant's work is
	// paced at its rate.
	HotFor = 2 * time.Second
	// UsageWindow is the window over which a tenant's use of its host
	// budget is reported (HostStat.Used): the interval of the host's
	// history ring.
	UsageWindow = 10 * time.Second
)

// startProcs is GOMAXPROCS as the process started: the host's CPUs (Go
// counts them within the process's CPU set and cgroup limit, or
// GOMAXPROCS says how many), before serve adds a spare processor for the
// VIP heartbeat threads. The defaults are shares of it.
var startProcs = runtime.GOMAXPROCS(0)

// HostCPUs is the CPUs the budgets' defaults are shares of, and what the
// host reports as its cores: GOMAXPROCS as the process started, not the
// spare processor serve adds (with it, a tenant's default budget on 2
// CPUs was 750 millicores, not the quarter of them, 500, it is said to
// be).
func HostCPUs() int { return startProcs }

// paceEpoch is the origin of the pacing clock (monotonic).
var paceEpoch = time.Now()

// Work weights, in units: what the data plane tells the accountant a
// tenant brought in (Tenant.Work).
const (
	WorkRequest  = 1 // an HTTP request (any version), routed
	WorkConn     = 2 // a connection accepted or a UDP flow opened
	WorkDatagram = 1 // a UDP datagram relayed either way
	// WorkBytesShift: one unit per 64 KiB relayed by an L4 connection or
	// moved as the body of an HTTP request or response (any version) or
	// through an upgraded (WebSocket) tunnel.
	WorkBytesShift = 16
	// WorkTLSBytes multiplies the units of bytes the host decrypts or
	// encrypts (a TLS-terminated connection's, QUIC's): the record
	// crypto.
	WorkTLSBytes = 4
	// WorkControlFrames is how many HTTP/2 frames that carry no request
	// and no body byte and are not answered (WINDOW_UPDATE, PRIORITY,
	// RST_STREAM, CONTINUATION, an empty DATA, an ACK, an unknown type)
	// count one unit: about 1.6 us each when they come together
	// (proxy/l7's BenchmarkH2Priority64), a sixteenth of a request
	// (BenchmarkProxyH2, 26-35 us with its client and member).
	WorkControlFrames = 16
	// WorkAnsweredFrame is what a PING or a SETTINGS that the server
	// answers counts: its ACK is a TLS record and a write of its own,
	// 7-15 us a PING even when 64 come at once (BenchmarkH2Ping64), a
	// third to a half of a request.
	WorkAnsweredFrame = 1
)

// host is a tenant's account in the host budget, embedded in Tenant.
type host struct {
	// millicores is the tenant's quotas.cpuMillicores (0: the host's
	// default).
	millicores atomic.Int64
	// work counts the units of work the tenant brought in; direct the
	// CPU time (ns) charged to it as measured.
	work, direct atomic.Int64
	// gate is nil while the tenant may run; while it is in debt, a
	// channel closed when it is out of debt.
	gate atomic.Pointer[chan struct{}]
	// pace is, while the tenant is hot (in debt within HotFor), the
	// budget time (ns) one unit of its work costs: Throttle spaces its
	// work by it (tat), so that it runs at its rate evenly rather than
	// in bursts each time its gate opens; 0 while it is not hot.
	pace, tat atomic.Int64
	// openAt is, while the tenant is in debt, when the accountant expects
	// its gate to open (ns since paceEpoch), else 0: a waiter's pace slot
	// starts there at the earliest, so that the waiters leave one by one
	// at the tenant's rate as their timers fire, not all at once when the
	// gate's channel closes (a herd of the tenant's goroutines, readied
	// together, that filled every processor's run queue ahead of its
	// neighbours' requests).
	openAt atomic.Int64
	// atGate counts the waiters that found the gate still closed once
	// their slot came and waited on its channel.
	atGate atomic.Uint64

	// The accountant's (Run) alone.
	hostTokens           float64 // ns of CPU; negative: in debt
	lastWork, lastDirect int64
	// unitCost is the CPU time (ns) a unit of the tenant's work cost,
	// averaged over the ticks it worked; hotUntil the ticks left before
	// it is not hot.
	unitCost float64
	hotTicks int
	// The window being measured: its time so far and the CPU time
	// charged when it began; window is the last one ended.
	winElapsed time.Duration
	winSpent0  int64
	window     atomic.Pointer[usage]

	// Counters: CPU time charged (ns), time the gate was closed (ns),
	// times it closed, waits at a closed gate.
	hostSpent, throttledNs atomic.Int64
	throttles, waits       atomic.Uint64
}

// SetMillicores sets the tenant's quotas.cpuMillicores (0: the host's
// default, DefaultHostShare of its CPUs). A nil Tenant ignores it.
func (t *Tenant) SetMillicores(mc int) {
	if t != nil && t.millicores.Load() != int64(mc) {
		t.millicores.Store(int64(mc))
	}
}

// Work counts units of work the tenant brought in (see WorkRequest etc.).
// It is one atomic add: the hot path calls it. A nil Tenant counts
// nothing.
func (t *Tenant) Work(units int64) {
	if t != nil {
		t.work.Add(units)
	}
}

// Throttle waits while the tenant is in debt of its host budget. It is
// one atomic load when it is not: the hot path calls it where the
// tenant's work enters (before a request is routed, before a new
// connection is served). A nil Tenant never waits.
func (t *Tenant) Throttle() {
	if t == nil {
		return
	}
	t.waitGate(1)
}

// waitGate waits, for units of work, while the tenant is in debt and then
// for the units' slot in its pace while it is hot: a waiter in debt takes
// its slot at once, at or after the time the gate is expected to open
// (openAt), and sleeps until it; only if the gate is still closed then
// does it wait on the gate's channel. Not in debt and not hot, it is two
// atomic loads.
func (t *Tenant) waitGate(units int64) {
	g := t.gate.Load()
	if g != nil {
		t.waits.Add(1)
	}
	if u := t.pace.Load(); u > 0 {
		if d := t.reservePace(u * units); d > 0 {
			time.Sleep(d)
		}
		if g != nil {
			g = t.gate.Load()
		}
	}
	if g != nil {
		t.atGate.Add(1)
		<-*g
	}
}

// Relay counts units of work an open connection brought in by moving
// bytes or frames (a request's or a tunnel's body, an L4 connection's
// bytes, HTTP/2 control frames) and, as Throttle does for a request,
// waits while the tenant is in debt and then, while it is hot, for the
// slot of those units in its pace: so that a connection opened before the
// tenant fell into debt moves at the tenant's rate too, between its
// copies. Each wait is bounded: the gate opens once the debt (at most
// MaxDebt of the tenant's rate) is repaid, and a pace slot is never
// further than MaxDebt ahead. Not in debt and not hot, it is an atomic
// add and two loads. A nil Tenant counts nothing and never waits.
func (t *Tenant) Relay(units int64) {
	if t == nil || units <= 0 {
		return
	}
	t.work.Add(units)
	t.waitGate(units)
}

// HoldPoll is how long a relay that cannot wait at the gate (Hold) pauses
// a connection of a tenant in debt before it asks again.
const HoldPoll = 10 * time.Millisecond

// Hold is Relay for a relay that serves many tenants' connections on one
// thread (io_uring) and so must not wait: it counts the units and returns
// how long the connection should pause before it moves more bytes:
// HoldPoll while the tenant is in debt (then ask again with Hold(0)),
// the time to the slot of the units in the tenant's pace while it is hot,
// 0 otherwise. A nil Tenant counts nothing and returns 0.
func (t *Tenant) Hold(units int64) time.Duration {
	if t == nil {
		return 0
	}
	if units > 0 {
		t.work.Add(units)
	}
	if t.gate.Load() != nil {
		if units > 0 {
			t.waits.Add(1)
		}
		return HoldPoll
	}
	if u := t.pace.Load(); u > 0 && units > 0 {
		return t.reservePace(u * units)
	}
	return 0
}

// reservePace takes a unit's slot of the tenant's pace and returns how
// long until it starts.
func (t *Tenant) reservePace(u int64) time.Duration {
	now := int64(time.Since(paceEpoch))
	from := max(now, t.openAt.Load())
	for {
		old := t.tat.Load()
		start := max(old, from)
		if start-now > int64(MaxDebt) {
			// A queue longer than the debt bound: wait it, do not grow it.
			return time.Duration(start - now)
		}
		if t.tat.CompareAndSwap(old, start+u) {
			return time.Duration(start - now)
		}
	}
}

// ThrottleCtx is Throttle that gives up when ctx ends; it reports
// whether the tenant may go on.
func (t *Tenant) ThrottleCtx(ctx context.Context) bool {
	if t == nil {
		return true
	}
	g := t.gate.Load()
	if g == nil {
		return t.paceCtx(ctx, WorkConn)
	}
	t.waits.Add(1)
	// As waitGate: the pace slot first (from when the gate should open),
	// then the gate if it is still closed.
	if !t.paceCtx(ctx, WorkConn) {
		return false
	}
	if g = t.gate.Load(); g == nil {
		return true
	}
	select {
	case <-*g:
		return true
	case <-ctx.Done():
		return false
	}
}

// paceCtx is the pace of Throttle for units of work, giving up when ctx
// ends.
func (t *Tenant) paceCtx(ctx context.Context, units int64) bool {
	u := t.pace.Load()
	if u <= 0 {
		return true
	}
	d := t.reservePace(u * units)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// throttleUntil waits while the tenant is in debt, at most until
// deadline; it reports whether the gate is open.
func (t *Tenant) throttleUntil(ctx context.Context, deadline time.Time) bool {
	g := t.gate.Load()
	if g == nil {
		return true
	}
	t.waits.Add(1)
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-*g:
		return true
	case <-tm.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// ChargeHandshake charges the CPU time of a handshake measured where it
// was made (a health check's over TLS, its client signature aside) to
// the tenant's handshake bucket, as a signature is, and to its host
// budget: its checks then wait for both (Wait). A nil Tenant ignores it.
func (t *Tenant) ChargeHandshake(d time.Duration) {
	if t != nil && d > 0 {
		t.charge(d)
	}
}

// ChargeDirect charges CPU time measured where it was spent (a regular
// expression's match, a WAF inspection) to the tenant's host budget;
// the accountant does not bill it again. A nil Tenant ignores it.
func (t *Tenant) ChargeDirect(d time.Duration) {
	if t != nil && d > 0 {
		t.direct.Add(int64(d))
	}
}

// usage is what a tenant was charged over one window.
type usage struct {
	used, window time.Duration
	at           time.Time
}

// HostStat is a tenant's account in the host budget.
type HostStat struct {
	// Millicores is the budget in effect, thousandths of a core.
	Millicores int64
	// Spent is the CPU time charged; Direct the part measured where it
	// was spent.
	Spent, Direct time.Duration
	// Throttled is how long the tenant's gate was closed, Throttles how
	// many times it closed, Waits how many times work waited at it.
	Throttled        time.Duration
	Throttles, Waits uint64
	Work             int64
	InDebt           bool
	// Used is the CPU time charged over the last window of UsageWindow
	// that ended, Window its length and At its end (zero before one
	// ended): Used / Window is the cores the tenant used.
	Used, Window time.Duration
	At           time.Time
}

// HostStat returns the tenant's account in the host budget.
func (t *Tenant) HostStat() HostStat {
	s := HostStat{Millicores: t.b.millicoresOf(t), Spent: time.Duration(t.hostSpent.Load()), Direct: time.Duration(t.direct.Load()),
		Throttled: time.Duration(t.throttledNs.Load()), Throttles: t.throttles.Load(), Waits: t.waits.Load(), Work: t.work.Load(), InDebt: t.gate.Load() != nil}
	if u := t.window.Load(); u != nil {
		s.Used, s.Window, s.At = u.used, u.window, u.at
	}
	return s
}

// Lookup returns a tenant's budget, or nil when it has none yet (it is
// not made).
func (b *Budgets) Lookup(name string) *Tenant {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tenants[name]
}

// defaultMillicores is the host's default budget of one tenant.
func (b *Budgets) defaultMillicores() int64 {
	if b.o.HostMillicores > 0 {
		return int64(b.o.HostMillicores)
	}
	return max(1, int64(DefaultHostShare*1000*float64(HostCPUs())))
}

func (b *Budgets) millicoresOf(t *Tenant) int64 {
	if mc := t.millicores.Load(); mc > 0 {
		return mc
	}
	return b.defaultMillicores()
}

// Run is the accountant: every Tick it charges the process's CPU time to
// the tenants and opens or closes their gates, until ctx ends; then it
// opens every gate. Without a process CPU clock it charges what was
// measured directly only.
func (b *Budgets) Run(ctx context.Context) {
	tk := time.NewTicker(b.o.Tick)
	defer tk.Stop()
	last, lastCPU := time.Now(), processCPU()
	for {
		select {
		case <-ctx.Done():
			b.openAll()
			return
		case now := <-tk.C:
			cpu := processCPU()
			b.account(now.Sub(last), cpu-lastCPU)
			last, lastCPU = now, cpu
		}
	}
}

// openAll opens every tenant's gate.
func (b *Budgets) openAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.tenants {
		if g := t.gate.Swap(nil); g != nil {
			close(*g)
		}
	}
}

// account charges one tick: elapsed wall time, proc the process's CPU
// time over it.
func (b *Budgets) account(elapsed, proc time.Duration) {
	b.mu.Lock()
	ts := make([]*Tenant, 0, len(b.tenants))
	for _, t := range b.tenants {
		ts = append(ts, t)
	}
	b.mu.Unlock()
	work := make([]int64, len(ts))
	direct := make([]time.Duration, len(ts))
	var measured time.Duration
	for i, t := range ts {
		w, d := t.work.Load(), t.direct.Load()
		work[i], direct[i] = w-t.lastWork, time.Duration(d-t.lastDirect)
		t.lastWork, t.lastDirect = w, d
		measured += direct[i]
	}
	shares := Split(proc-measured, work, b.o.MaxUnitCost)
	now := time.Now()
	for i, t := range ts {
		mc := b.millicoresOf(t)
		charge := direct[i] + shares[i]
		spent := t.hostSpent.Add(int64(charge))
		if t.winElapsed += elapsed; t.winElapsed >= UsageWindow {
			t.window.Store(&usage{used: time.Duration(spent - t.winSpent0), window: t.winElapsed, at: now})
			t.winSpent0, t.winElapsed = spent, 0
		}
		var debt bool
		t.hostTokens, debt = Step(t.hostTokens, elapsed, charge, mc, b.o.HostBurst)
		t.setPace(work[i], charge, debt, mc, b.o.Tick)
		if debt {
			// Tokens earn millicores/1000 ns of CPU a ns: repaid then, and
			// the gate opens at the tick after (give or take half a tick
			// of the ticker's lateness).
			repay := time.Duration(-t.hostTokens * 1000 / float64(mc))
			ticks := (repay + b.o.Tick - 1) / b.o.Tick
			t.openAt.Store(int64(now.Sub(paceEpoch) + ticks*b.o.Tick + b.o.Tick/2))
		} else if t.openAt.Load() != 0 {
			t.openAt.Store(0)
		}
		if debt {
			t.throttledNs.Add(int64(elapsed))
			if t.gate.Load() == nil {
				ch := make(chan struct{})
				t.gate.Store(&ch)
				t.throttles.Add(1)
			}
		} else if g := t.gate.Swap(nil); g != nil {
			close(*g)
		}
	}
}

// Split divides rest, CPU time not measured where it was spent, across
// tenants in proportion to the units of work each brought in, each unit
// charged at most maxUnit; what is left is the host's own.
func Split(rest time.Duration, work []int64, maxUnit time.Duration) []time.Duration {
	out := make([]time.Duration, len(work))
	var total int64
	for _, w := range work {
		if w > 0 {
			total += w
		}
	}
	if rest <= 0 || total == 0 {
		return out
	}
	perUnit := float64(rest) / float64(total)
	if maxUnit > 0 {
		perUnit = min(perUnit, float64(maxUnit))
	}
	for i, w := range work {
		if w > 0 {
			out[i] = time.Duration(perUnit * float64(w))
		}
	}
	return out
}

// Step is one tick of a tenant's bucket: tokens (ns of CPU) earns
// elapsed at millicores/1000 of a core, up to burst's worth, and pays
// charge; the debt is bounded by MaxDebt's worth. It returns the new
// tokens and whether the tenant is in debt.
func Step(tokens float64, elapsed, charge time.Duration, millicores int64, burst time.Duration) (float64, bool) {
	rate := float64(millicores) / 1000
	tokens = min(tokens+float64(elapsed)*rate, float64(burst)*rate) - float64(charge)
	tokens = max(tokens, -float64(MaxDebt)*rate)
	return tokens, tokens < 0
}

// setPace keeps the tenant's cost of a unit of work and, while it is hot,
// its pace: the budget time of a unit at its rate.
func (t *Tenant) setPace(work int64, charge time.Duration, debt bool, millicores int64, tick time.Duration) {
	if work > 0 {
		c := float64(charge) / float64(work)
		if t.unitCost == 0 {
			t.unitCost = c
		} else {
			t.unitCost = 0.7*t.unitCost + 0.3*c
		}
	}
	if debt {
		t.hotTicks = int(HotFor / tick)
	} else if t.hotTicks > 0 {
		t.hotTicks--
	}
	if t.hotTicks == 0 || t.unitCost == 0 {
		if t.pace.Load() != 0 {
			t.pace.Store(0)
		}
		return
	}
	t.pace.Store(int64(t.unitCost * 1000 / float64(millicores)))
}
