package scenarios

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// parallelWidthEnv sets how many parallel scenarios run at a time when the
// test binary gets no -parallel flag.
const parallelWidthEnv = "TEAPOT_SCENARIO_PARALLEL"

// defaultParallelWidth is that number by default. On this 2-core machine
// the parallel scenarios alone took 250 s three at a time and 304 s two at
// a time; make test names the scenarios package first, so that the other
// packages' tests have ended when they run. Three at a time beside other
// builds once starved the Kubernetes lab's client for seconds (README,
// Test time); $TEAPOT_SCENARIO_PARALLEL=2 is the width for a loaded machine.
const defaultParallelWidth = 3

// gatherWait is how long the first parallel scenario to be released waits
// for the others before the longest of those present starts. All of them
// are released at once when the last sequential scenario ends; the wait
// only runs out when -parallel holds some of them back.
const gatherWait = time.Second

// parallelScenario marks a scenario that may run beside others: one that
// mostly waits (for Kubernetes components, a container's boot, a token's
// expiry, ACME issuances and renewals), or one that only builds and
// checks artefacts (the packages and the image, whose builds run under nice so
// that they give way to the scenarios beside them). Such a scenario asserts no
// latency, rate or CPU figure that a neighbour could move beyond its margins,
// floods nothing, and uses only addresses of its own (network namespaces of
// its own, or ports picked free). It runs with t.Parallel: the testing package
// starts it after every other top-level scenario of the package has finished,
// beside at most the width (-parallel when given, else $TEAPOT_SCENARIO_PARALLEL,
// else 2) minus one other such scenarios. A scenario that measures time or
// rates, saturates the CPU with traffic or binds a fixed address in the host's
// namespace must not call it; it runs alone, as every scenario does by default
// (TestDashboardInBrowser holds a page's render time to a bound: beside a
// Kubernetes lab it missed it).
func parallelScenario(t *testing.T) {
	t.Helper()
	parallelScenarioTaking(t, 0)
}

// parallelScenarioTaking is parallelScenario for a scenario that takes about
// d on a quiet machine: of the parallel scenarios waiting for a place, the
// longest starts first, so that the parallel part does not end with one
// long scenario running alone.
func parallelScenarioTaking(t *testing.T, d time.Duration) {
	t.Helper()
	checkPhase(t)
	parallelSlots.register()
	t.Parallel()
	parallelSlots.acquire(d)
	t.Cleanup(parallelSlots.release)
	// make test's report counts the scenario's time from here, not from
	// its wait for a place (scenarios/testreport).
	t.Log("testreport: running")
}

// parallelScenarioWaiting is parallelScenario for a scenario that spends
// nearly all its time waiting on a clock with one idle host (a token's
// expiry): it takes no place among the width, so it starts with the first
// parallel scenarios and waits beside them, and its minute is not added to
// the part's length (with -parallel n given, the testing package still
// counts it among its n). Its waits must not need the CPU on time: its
// bounds are tens of seconds.
func parallelScenarioWaiting(t *testing.T) {
	t.Helper()
	checkPhase(t)
	t.Parallel()
	t.Log("testreport: running")
}

// setParallelWidth runs in TestMain before the tests: unless -parallel
// was given, it sets the width of the parallel scenarios from
// $TEAPOT_SCENARIO_PARALLEL (default 2) and lifts the testing package's
// own limit so that parallelSlots alone decides which run.
func setParallelWidth() error {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			given = true
		}
	})
	if given {
		n, err := strconv.Atoi(flag.Lookup("test.parallel").Value.String())
		if err != nil {
			return fmt.Errorf("-parallel: %w", err)
		}
		parallelSlots.free = max(n, 1)
		return nil
	}
	width := defaultParallelWidth
	if v := os.Getenv(parallelWidthEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("$%s=%q: want a number of scenarios from 1 to 64 (default %d)", parallelWidthEnv, v, defaultParallelWidth)
		}
		width = n
	}
	parallelSlots.free = width
	// The parallel tests of the rule tests are cheap; the scenarios'
	// places are counted by parallelSlots.
	return flag.Set("test.parallel", "64")
}

// parallelSlots hands out the places of the parallel scenarios, longest
// first.
var parallelSlots = &slots{free: defaultParallelWidth}

type slots struct {
	mu         sync.Mutex
	free       int
	registered int       // scenarios that called parallelScenario
	arrived    int       // of those, released by the testing package
	gate       chan bool // closed when all arrived or gatherWait ran out
	waiting    []*slotWaiter
}

type slotWaiter struct {
	d     time.Duration
	ready chan struct{}
}

func (s *slots) register() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registered++
}

func (s *slots) acquire(d time.Duration) {
	s.mu.Lock()
	s.arrived++
	if s.gate == nil {
		s.gate = make(chan bool)
		gate := s.gate
		time.AfterFunc(gatherWait, func() { s.open(gate) })
	}
	w := &slotWaiter{d: d, ready: make(chan struct{})}
	// Longest first; among equals, first come first served.
	i, _ := slices.BinarySearchFunc(s.waiting, d, func(x *slotWaiter, d time.Duration) int {
		if x.d >= d {
			return -1
		}
		return 1
	})
	s.waiting = slices.Insert(s.waiting, i, w)
	if s.arrived == s.registered {
		s.openLocked(s.gate)
	}
	s.grantLocked()
	s.mu.Unlock()
	<-w.ready
}

func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free++
	s.grantLocked()
}

func (s *slots) open(gate chan bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openLocked(gate)
}

func (s *slots) openLocked(gate chan bool) {
	select {
	case <-gate:
	default:
		close(gate)
		s.grantLocked()
	}
}

// grantLocked starts waiting scenarios, longest first, once the gate is
// open and while places are free.
func (s *slots) grantLocked() {
	select {
	case <-s.gate:
	default:
		return
	}
	for s.free > 0 && len(s.waiting) > 0 {
		w := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.free--
		close(w.ready)
	}
}

// The places go to the longest waiting scenarios first, and no more run at
// a time than the width.
func TestParallelSlotsLongestFirst(t *testing.T) {
	t.Parallel()
	s := &slots{free: 2}
	durations := []time.Duration{10, 200, 0, 90, 120, 65}
	for range durations {
		s.register()
	}
	var (
		mu               sync.Mutex
		order            []time.Duration
		running, highest int
		wg               sync.WaitGroup
		next             = make(chan struct{})
	)
	for _, d := range durations {
		wg.Go(func() {
			s.acquire(d)
			mu.Lock()
			order = append(order, d)
			running++
			highest = max(highest, running)
			mu.Unlock()
			<-next
			mu.Lock()
			running--
			mu.Unlock()
			s.release()
		})
	}
	// Let one scenario finish at a time once the places are taken.
	for k := range durations {
		want := min(2, len(durations)-k)
		waitFor(t, 10*time.Second, "the places are taken", func() error {
			mu.Lock()
			defer mu.Unlock()
			if running != want || len(order) != min(len(durations), k+2) {
				return fmt.Errorf("%d run, want %d; started %v", running, want, order)
			}
			return nil
		})
		next <- struct{}{}
	}
	wg.Wait()
	if highest != 2 {
		t.Errorf("%d scenarios ran at once, want 2", highest)
	}
	// The first two start together.
	slices.Sort(order[:2])
	want := []time.Duration{120, 200, 90, 65, 10, 0}
	if !slices.Equal(order, want) {
		t.Errorf("scenarios started in the order %v, want %v", order, want)
	}
}
