package health

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// checkGoroutines counts the goroutines running or waiting to run a
// check: those in a tenant's worker or in a target's run.
func checkGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("proxy/health.(*Target).run(")) || bytes.Contains(g, []byte("proxy/health.(*tenantBudget).work(")) {
			count++
		}
	}
	return count
}

// TestChecksDueAtOnceRunOnTheirTenantsSlots: tenant b has 1,000 members
// whose checks hang on a tarpit until their timeout, all due within the
// same second; its due checks wait in its queue, so the goroutines
// checking stay at its slots (not one per due check, a crowd in the run
// queue every tenant and the admin API share), each of b's members is
// still checked in turn, and tenant a's check keeps its interval.
// Before, each due check started its own goroutine, which waited for a
// slot: about 1,000 at once here.
//
// Not parallel: it counts the checking goroutines of the whole process.
func TestChecksDueAtOnceRunOnTheirTenantsSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	const members, slots = 1000, 8
	r := NewRegistry(Options{MaxChecksPerTenant: slots})
	defer r.Close()
	pit := tarpit(t)
	var bs []*Target
	for i := range members {
		hc := &snapshot.HealthCheck{HTTP: true, Path: fmt.Sprintf("/slow/%d", i), Interval: time.Second, Timeout: 50 * time.Millisecond, Rise: 1, Fall: 1}
		tg := r.AcquireFor("b", pit, hc)
		bs = append(bs, tg)
		defer r.Release(tg)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	const aEvery = 100 * time.Millisecond
	a := r.AcquireFor("a", netip.MustParseAddrPort(l.Addr().String()), &snapshot.HealthCheck{Interval: aEvery, Timeout: time.Second, Rise: 1, Fall: 1})
	defer r.Release(a)

	// Watch for 3 s: b's checks all fall due in the first second and
	// fall behind (8 slots of 50 ms checks do 160 a second).
	start := time.Now()
	var most int
	var aMaxAge time.Duration
	for time.Since(start) < 3*time.Second {
		most = max(most, checkGoroutines())
		if last := a.Status().LastCheck; !last.IsZero() {
			aMaxAge = max(aMaxAge, time.Since(last))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("at most %d goroutines checking; a's check at most %v old; a's member accepted %d checks in 3 s",
		most, aMaxAge.Round(time.Millisecond), accepted.Load())
	// b's slots, a's one, and a worker finishing as the next starts.
	if bound := slots + 1 + 2; most > bound {
		t.Errorf("%d goroutines checking at once, want at most %d (b's %d slots, a's 1, 2 in passing)", most, bound, slots)
	}
	// Deadlines for a loaded 2-core machine under -race: a is checked
	// every 100 ms; b's crowd must not make it wait a second.
	if aMaxAge > aEvery+900*time.Millisecond {
		t.Errorf("a's check was %v old while b's checks were behind; its interval is %v", aMaxAge, aEvery)
	}
	if n := accepted.Load(); n < 10 {
		t.Errorf("a's member was checked %d times in 3 s at an interval of %v", n, aEvery)
	}
	tb := bs[0].budget
	tb.mu.Lock()
	queued := len(tb.timed) + tb.nready
	tb.mu.Unlock()
	if queued > members {
		t.Errorf("b's queues hold %d entries for %d members", queued, members)
	}

	// Behind, not starved: b's checks run in the order they fell due,
	// so each member is checked within ~1,000/160 s.
	deadline := time.Now().Add(90 * time.Second)
	for _, tg := range bs {
		for tg.Status().LastCheck.IsZero() {
			if time.Now().After(deadline) {
				t.Fatalf("b's member %s never checked", tg.key.check.Path)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("every one of b's %d members checked after %v", members, time.Since(start).Round(time.Millisecond))
}
