package cpubudget

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		rest    time.Duration
		work    []int64
		maxUnit time.Duration
		want    []time.Duration
	}{
		{"in proportion to work", 90 * ms, []int64{1, 2, 0}, 0, []time.Duration{30 * ms, 60 * ms, 0}},
		{"no work: the host's", 90 * ms, []int64{0, 0}, 0, []time.Duration{0, 0}},
		{"nothing to split", -5 * ms, []int64{3, 1}, 0, []time.Duration{0, 0}},
		// The host's own work (an API flood) is not billed to a tenant
		// that brought in a few requests.
		{"a unit costs at most maxUnit", 500 * ms, []int64{10}, 2 * ms, []time.Duration{20 * ms}},
		{"cap binds every tenant alike", 1000 * ms, []int64{100, 300}, ms, []time.Duration{100 * ms, 300 * ms}},
		{"cap above the cost changes nothing", 40 * ms, []int64{1, 3}, 100 * ms, []time.Duration{10 * ms, 30 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Split(tc.rest, tc.work, tc.maxUnit); !slices.Equal(got, tc.want) {
				t.Errorf("Split(%s, %v, %s) = %v, want %v", tc.rest, tc.work, tc.maxUnit, got, tc.want)
			}
		})
	}
}

func TestStep(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name       string
		tokens     float64
		elapsed    time.Duration
		charge     time.Duration
		millicores int64
		want       float64
		debt       bool
	}{
		// 500 millicores earn 25 ms of CPU in 50 ms.
		{"within rate", 0, 50 * ms, 20 * ms, 500, float64(5 * ms), false},
		{"past rate: debt", 0, 50 * ms, 50 * ms, 500, float64(-25 * ms), true},
		{"earnings capped at the burst", float64(90 * ms), 50 * ms, 0, 500, float64(100 * ms), false},
		{"burst then debt", float64(100 * ms), 50 * ms, 150 * ms, 500, float64(-50 * ms), true},
		{"debt bounded by MaxDebt", 0, 50 * ms, 5 * time.Second, 500, -float64(500 * ms), true},
		{"repaid", float64(-20 * ms), 50 * ms, 0, 500, float64(5 * ms), false},
		{"two cores", 0, 50 * ms, 90 * ms, 2000, float64(10 * ms), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, debt := Step(tc.tokens, tc.elapsed, tc.charge, tc.millicores, 200*ms)
			if got != tc.want || debt != tc.debt {
				t.Errorf("Step = %v, %v; want %v, %v", time.Duration(got), debt, time.Duration(tc.want), tc.debt)
			}
		})
	}
}

// The accountant bills the process's CPU to the tenant whose work took
// it, closes that tenant's gate alone, and opens it once the debt is
// repaid.
func TestAccountantThrottlesTheBusyTenantAlone(t *testing.T) {
	t.Parallel()
	b := New(Options{HostMillicores: 500})
	busy, quiet := b.Tenant("b"), b.Tenant("a")
	// A tick of 50 ms in which the process spent 100 ms of CPU: b
	// brought in 990 requests, a 10.
	busy.Work(990 * WorkRequest)
	quiet.Work(10 * WorkRequest)
	b.account(50*time.Millisecond, 100*time.Millisecond)
	if busy.gate.Load() == nil {
		t.Fatalf("b charged %s in a tick that earns it 25 ms: want its gate closed", busy.HostStat().Spent)
	}
	if quiet.gate.Load() != nil {
		t.Fatalf("a's gate closed: %+v", quiet.HostStat())
	}
	released := make(chan struct{})
	go func() { busy.Throttle(); close(released) }()
	quiet.Throttle() // does not wait
	if !quiet.ThrottleCtx(context.Background()) {
		t.Fatal("a throttled")
	}
	// The gate stays closed while b is in debt (99 ms less 25 ms a tick).
	for i := 0; i < 2; i++ {
		b.account(50*time.Millisecond, 0)
		if busy.gate.Load() == nil {
			t.Fatalf("b's gate opened after %d idle ticks with debt left", i+1)
		}
	}
	b.account(50*time.Millisecond, 0)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("b's waiter not released once its debt was repaid")
	}
	st := busy.HostStat()
	if st.Throttles != 1 || st.Throttled != 150*time.Millisecond || st.InDebt || st.Millicores != 500 {
		t.Errorf("b's account %+v", st)
	}
}

// Directly measured CPU is charged as measured and not billed again by
// the split.
func TestAccountantChargesDirectOnce(t *testing.T) {
	t.Parallel()
	b := New(Options{HostMillicores: 1000, MaxUnitCost: time.Second})
	x, y := b.Tenant("x"), b.Tenant("y")
	x.ChargeDirect(30 * time.Millisecond)
	x.Work(1)
	y.Work(1)
	// 40 ms of process CPU, 30 of it x's regexes: 10 left to split.
	b.account(50*time.Millisecond, 40*time.Millisecond)
	if got := x.HostStat().Spent; got != 35*time.Millisecond {
		t.Errorf("x spent %s, want 35ms", got)
	}
	if got := y.HostStat().Spent; got != 5*time.Millisecond {
		t.Errorf("y spent %s, want 5ms", got)
	}
}

// A tenant in debt of its host budget has its handshakes wait for it,
// then refused, and its checks delayed until it is repaid.
func TestHostDebtHoldsHandshakesAndChecks(t *testing.T) {
	t.Parallel()
	b := New(Options{HostMillicores: 100, MaxWait: 20 * time.Millisecond})
	tn := b.Tenant("b")
	tn.Work(1000)
	b.account(50*time.Millisecond, 500*time.Millisecond)
	if err := tn.Hello(); err == nil {
		t.Fatal("hello admitted while in debt")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if tn.Wait(ctx) {
		t.Fatal("check not delayed while in debt")
	}
	if err := b.Tenant("a").Hello(); err != nil {
		t.Fatalf("a's hello: %v", err)
	}
	b.openAll()
	if err := tn.Hello(); err != nil {
		t.Fatalf("hello once the gate opened: %v", err)
	}
}

// The hot path's checks allocate nothing.
func TestThrottleAllocatesNothing(t *testing.T) {
	b := New(Options{})
	tn := b.Tenant("a")
	var nilT *Tenant
	if n := testing.AllocsPerRun(100, func() {
		tn.Work(WorkRequest)
		tn.Throttle()
		nilT.Work(1)
		nilT.Throttle()
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// A connection that moves bytes (Relay) waits while its tenant is in
// debt and goes on once it is repaid; Hold, for a relay that cannot
// wait, says how long to pause instead. Neither holds another tenant.
func TestRelayAndHoldWaitWhileInDebt(t *testing.T) {
	t.Parallel()
	b := New(Options{HostMillicores: 500})
	busy, quiet := b.Tenant("b"), b.Tenant("a")
	busy.Work(1000)
	b.account(50*time.Millisecond, 100*time.Millisecond)
	if busy.gate.Load() == nil {
		t.Fatal("b not in debt")
	}
	released := make(chan struct{})
	go func() { busy.Relay(4); close(released) }()
	for busy.waits.Load() == 0 { // at the gate
		time.Sleep(time.Millisecond)
	}
	quiet.Relay(4) // does not wait
	if d := quiet.Hold(4); d != 0 {
		t.Errorf("a asked to pause %v", d)
	}
	if d := busy.Hold(4); d != HoldPoll {
		t.Errorf("b in debt asked to pause %v, want %v", d, HoldPoll)
	}
	for range 4 {
		b.account(50*time.Millisecond, 0)
	}
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("b's relay not released once its debt was repaid")
	}
	if d := busy.Hold(0); d != 0 {
		t.Errorf("b repaid asked to pause %v", d)
	}
	if st := busy.HostStat(); st.Work != 1000+4+4 || st.Waits < 2 {
		t.Errorf("b's account %+v: want the relayed units counted and the waits", st)
	}
	var nilT *Tenant
	nilT.Relay(3)
	if nilT.Hold(3) != 0 {
		t.Error("a nil tenant paused")
	}
}

// The use reported is what was charged over the last window that ended.
func TestUsageWindow(t *testing.T) {
	t.Parallel()
	b := New(Options{HostMillicores: 2000, MaxUnitCost: time.Second})
	tn := b.Tenant("a")
	tick := 50 * time.Millisecond
	n := int(UsageWindow / tick)
	for i := range n {
		if st := tn.HostStat(); st.Window != 0 {
			t.Fatalf("a window reported after %d ticks: %+v", i, st)
		}
		tn.Work(1)
		b.account(tick, 10*time.Millisecond) // a fifth of a core
	}
	st := tn.HostStat()
	if st.Window != UsageWindow || st.Used != time.Duration(n)*10*time.Millisecond || st.At.IsZero() {
		t.Fatalf("window %v used %v at %v; want %v, %v", st.Window, st.Used, st.At, UsageWindow, time.Duration(n)*10*time.Millisecond)
	}
	tn.Work(1)
	b.account(tick, 40*time.Millisecond)
	if got := tn.HostStat(); got.Used != st.Used || got.At != st.At {
		t.Errorf("the reported window changed before the next ended: %+v", got)
	}
}

// The defaults are shares of the host's CPUs as the process started:
// serve adds a spare Go processor for the VIP heartbeat threads, and the
// budgets must not grow with it (on 2 CPUs a tenant's default was 750
// millicores, not the quarter, 500, it is documented to be). Not
// parallel: it changes GOMAXPROCS.
func TestDefaultsAreSharesOfTheHostsCPUs(t *testing.T) {
	cpus := HostCPUs()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cpus + 1))
	b := New(Options{})
	o := b.Options()
	if want := DefaultShare * float64(cpus); o.Rate != want {
		t.Errorf("default handshake rate %g cores with GOMAXPROCS %d, want %g (a quarter of %d CPUs)", o.Rate, runtime.GOMAXPROCS(0), want, cpus)
	}
	if want := max(1, cpus/4); o.Concurrency != want {
		t.Errorf("default signatures at once %d, want %d", o.Concurrency, want)
	}
	if got, want := b.Tenant("a").HostStat().Millicores, max(1, int64(DefaultHostShare*1000*float64(cpus))); got != want {
		t.Errorf("default host budget %d millicores with GOMAXPROCS %d, want %d (a quarter of %d CPUs)", got, runtime.GOMAXPROCS(0), want, cpus)
	}
}

// Opening a tenant's gate does not ready all its waiters at once: a
// waiter in debt takes its slot of the pace from when the gate should
// open and sleeps until it, so 200 waiters leave one by one at the
// tenant's rate and (nearly) none waits on the gate's channel. Before,
// all 200 waited on the channel and were readied together when it
// closed: in the noisy neighbour's "all at once", hundreds of b's
// goroutines filled every processor's run queue ahead of a's requests
// each time b's gate opened.
func TestWaitersLeaveAtThePaceNotAsAHerd(t *testing.T) {
	t.Parallel()
	b := New(Options{HostMillicores: 500})
	busy := b.Tenant("b")
	busy.Work(1000)
	// 100 ms charged in a tick that earns 12.5: 87.5 ms in debt, repaid
	// in 175 ms; a unit cost 100 us, 200 us of the tenant's time.
	b.account(DefaultTick, 100*time.Millisecond)
	last := time.Now()
	if busy.gate.Load() == nil || busy.pace.Load() == 0 {
		t.Fatalf("b not in debt and hot: %+v", busy.HostStat())
	}
	const waiters = 200
	left := make(chan time.Time, waiters)
	for range waiters {
		go func() { busy.Throttle(); left <- time.Now() }()
	}
	for busy.waits.Load() < waiters {
		time.Sleep(time.Millisecond)
	}
	// The accountant as serve runs it, until the gate opens: each tick
	// accounts the real time since the last. A waiter whose slot comes
	// before the gate really opens waits on the channel: the accountant's
	// lateness (a loaded machine's ticker can be late by more than half a
	// tick) over a slot, no more.
	expected := time.Duration(busy.openAt.Load())
	var late time.Duration
	tk := time.NewTicker(DefaultTick)
	defer tk.Stop()
	for busy.gate.Load() != nil {
		now := <-tk.C
		b.account(now.Sub(last), 0)
		last = now
		if busy.gate.Load() == nil {
			late = max(0, time.Since(paceEpoch)-expected)
		}
	}
	var first, lastLeft time.Time
	for range waiters {
		select {
		case at := <-left:
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(lastLeft) {
				lastLeft = at
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter never left")
		}
	}
	herd := busy.atGate.Load()
	slot := busy.pace.Load()
	allowed := uint64(waiters/10) + uint64(int64(late)/max(1, slot))
	t.Logf("%d waiters left over %s; %d waited on the gate's channel (the gate opened %s after it was expected to, slots of %s: %d allowed)",
		waiters, lastLeft.Sub(first).Round(time.Millisecond), herd, late.Round(100*time.Microsecond), time.Duration(slot), allowed)
	if herd > allowed {
		t.Errorf("%d of %d waiters waited on the gate's channel and were readied together; want their own slots (at most %d)", herd, waiters, allowed)
	}
	// The waiters that had their own slots: 200 us each (40 ms for all
	// 200), less a loaded machine's timer slack.
	if want := time.Duration(int64(waiters-int(herd))*slot) / 2; lastLeft.Sub(first) < want {
		t.Errorf("the waiters left within %s, want spread over their slots (at least %s)", lastLeft.Sub(first), want)
	}
}
