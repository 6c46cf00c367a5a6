package memlimit

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, room uint64
		base, want int
	}{
		{live: 0, room: 512 * mib, base: 100, want: 100},
		{live: 100 * mib, room: 512 * mib, base: 100, want: 100},
		{live: 512 * mib, room: 512 * mib, base: 100, want: 100},
		{live: 1024 * mib, room: 512 * mib, base: 100, want: 50},
		{live: 1100 * mib, room: 512 * mib, base: 100, want: 46},
		{live: 4096 * mib, room: 512 * mib, base: 100, want: MinPercent},
		{live: 400 * mib, room: 512 * mib, base: 200, want: 128},
		{live: 2048 * mib, room: 512 * mib, base: 50, want: MinPercent},
		{live: 2048 * mib, room: 512 * mib, base: 20, want: 20},
		{live: 1024 * mib, room: 0, base: 100, want: 100},
	} {
		if got := percentFor(tc.live, tc.room, tc.base); got != tc.want {
			t.Errorf("percentFor(%d MiB live, %d MiB room, GOGC %d) = %d; want %d", tc.live/mib, tc.room/mib, tc.base, got, tc.want)
		}
	}
}

func TestParseHeadroom(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "none", want: 0},
		{in: " 512MiB ", want: 512 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "16MiB", want: 16 << 20},
		{in: "8MiB", err: "below 16 MiB"},
		{in: "0", err: "below 16 MiB"},
		{in: "50%", err: "is not a headroom: give a size"},
		{in: "-1GiB", err: "is not a headroom: give a size"},
		{in: "lots", err: "is not a headroom: give a size"},
	} {
		got, err := ParseHeadroom(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseHeadroom(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseHeadroom(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestNoHeadroomWithoutACollector(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if h := NewHeadroom(512<<20, nil); h != nil {
		t.Error("a headroom with the collector off (GOGC=off)")
	}
	debug.SetGCPercent(100)
	if h := NewHeadroom(0, nil); h != nil {
		t.Error("a headroom of none")
	}
}

// TestHeadroomHoldsTheHeapGoal keeps 192 MiB live under a headroom of
// 64 MiB: the runtime's heap goal must come within live plus 64 MiB
// (GOGC 100 alone would put it at twice live), and the target must go
// back to GOGC's when the headroom stops.
func TestHeadroomHoldsTheHeapGoal(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const room = 64 << 20
	live := make([][]byte, 192)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	h := NewHeadroom(room, nil)
	if h == nil {
		t.Fatal("no headroom at GOGC 100")
	}
	h.every = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()

	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for {
		metrics.Read(s)
		gogc, lv, goal := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
		want := percentFor(lv, room, 100)
		if int(gogc) == want && want < 100 {
			// The goal also counts stacks and globals at the target's
			// share; a few MiB of slack covers them.
			if goal > lv+room+4<<20 || goal < lv+room/2 {
				t.Errorf("heap goal %d MiB with %d MiB live and a headroom of %d MiB (GOGC %d)", goal>>20, lv>>20, room>>20, gogc)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d with %d MiB live after a collection; want %d", gogc, lv>>20, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(live)
	cancel()
	<-done
	metrics.Read(s)
	if got := s[0].Value.Uint64(); got != 100 {
		t.Errorf("GOGC %d after the headroom stopped; want 100 back", got)
	}
}

// burstLab is a headroom of 16 MiB over 64 MiB kept live, at GOGC 100,
// looked at with a clock and a CPU time the test moves.
type burstLab struct {
	t      *testing.T
	h      *Headroom
	now    time.Time
	cpu    time.Duration
	live   [][]byte
	forced func() uint64
}

func newBurstLab(t *testing.T) *burstLab {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	l := &burstLab{t: t, now: time.Now()}
	for range 64 {
		l.live = append(l.live, make([]byte, 1<<20))
	}
	l.h = NewHeadroom(16<<20, nil)
	l.h.cpu = func() time.Duration { return l.cpu }
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	l.forced = func() uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	runtime.GC()
	l.h.update()
	if l.h.percent >= 100 {
		t.Fatalf("GOGC %d with 64 MiB live under a headroom of 16 MiB", l.h.percent)
	}
	l.look(0)
	return l
}

// look moves the clock by one look, the CPU by busy, and looks.
func (l *burstLab) look(busy time.Duration) {
	l.now = l.now.Add(l.h.every)
	l.cpu += busy
	l.h.update()
	l.h.afterBurst(l.now)
}

// garbage allocates n MiB that nothing keeps.
func garbage(n int) {
	for range n {
		sink = make([]byte, 1<<20)
	}
	sink = nil
}

var sink []byte

// cycles is how many collections the runtime has finished.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestCollectsWhenQuietAfterABurst: 10 MiB of garbage made at once, then
// a quiet look: the headroom collects, once, and not again within
// quietGap. 10 MiB is more than half the headroom and less than the
// runtime's own earliest start of a collection (0.7 of the way to its
// goal); should the runtime collect during the burst anyway (it may, on
// a loaded machine, start earlier), the garbage is gone and the lab is
// set up again.
func TestCollectsWhenQuietAfterABurst(t *testing.T) {
	var l *burstLab
	var f0 uint64
	for try := 0; ; try++ {
		l = newBurstLab(t)
		f0 = l.forced()
		c0 := cycles()
		garbage(10)
		if cycles() == c0 {
			break
		}
		if try == 4 {
			t.Fatalf("the runtime collected during each of 5 bursts of 10 MiB (headroom 16 MiB)")
		}
		t.Logf("the runtime collected during the burst; again")
	}
	l.look(0)
	if l.h.quietGCs != 1 || l.forced() != f0+1 {
		t.Fatalf("quiet after a burst of 10 MiB (headroom 16 MiB): %d collections started, %d forced", l.h.quietGCs, l.forced()-f0)
	}
	garbage(10)
	l.look(0)
	if l.h.quietGCs != 1 {
		t.Errorf("a second burst right after: %d collections started; want none within %s", l.h.quietGCs-1, quietGap)
	}
	runtime.KeepAlive(l.live)
}

// TestNoCollectionWhileBusy: after the same burst, looks that find the
// process using half a CPU start no collection.
func TestNoCollectionWhileBusy(t *testing.T) {
	l := newBurstLab(t)
	garbage(12)
	for range 4 {
		l.look(l.h.every / 2)
	}
	if l.h.quietGCs != 0 {
		t.Errorf("busy after a burst: %d collections started", l.h.quietGCs)
	}
	runtime.KeepAlive(l.live)
}

// TestNoCollectionForSlowGarbage: garbage that comes slowly (0.5 MiB a
// second, under a quarter of the headroom in burstWindow) is left to the
// target, quiet or not, though it grows past half the headroom. Should
// the runtime collect meanwhile (the heap would not grow), the lab is set
// up again.
func TestNoCollectionForSlowGarbage(t *testing.T) {
	var l *burstLab
	var keep [][]byte // garbage once dropped; kept until then so that it counts
	for try := 0; ; try++ {
		l, keep = newBurstLab(t), nil
		c0 := cycles()
		for range 80 {
			keep = append(keep, make([]byte, 128<<10))
			l.look(0)
		}
		if cycles() == c0 {
			break
		}
		if try == 4 {
			t.Fatalf("the runtime collected during each of 5 runs of 10 MiB made slowly (headroom 16 MiB)")
		}
		t.Logf("the runtime collected meanwhile; again")
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if grown := s[1].Value.Uint64() - s[0].Value.Uint64(); grown < 8<<20 {
		t.Fatalf("the heap grew by %d KiB past what is live: the test needs half the headroom (8 MiB)", grown>>10)
	}
	if l.h.quietGCs != 0 {
		t.Errorf("slow garbage: %d collections started", l.h.quietGCs)
	}
	runtime.KeepAlive(keep)
	runtime.KeepAlive(l.live)
}

// TestNoCollectionOnASmallHeap: when GOGC's share of the live heap is
// under the headroom (GOGC binds, not the headroom), a burst that would
// otherwise be collected starts no collection.
func TestNoCollectionOnASmallHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	h := NewHeadroom(16<<20, nil)
	var cpu time.Duration
	h.cpu = func() time.Duration { return cpu }
	now := time.Now()
	runtime.GC()
	h.update()
	if h.percent != h.base {
		t.Fatalf("GOGC %d for %d MiB live under a headroom of 16 MiB", h.percent, h.samples[1].Value.Uint64()>>20)
	}
	h.afterBurst(now)
	// No collection of its own until the look: the garbage stays.
	debug.SetGCPercent(-1)
	var keep [][]byte
	for range 24 {
		keep = append(keep, make([]byte, 1<<20))
	}
	keep = nil
	h.update()
	if objects, live := h.samples[4].Value.Uint64(), h.samples[1].Value.Uint64(); objects < live+8<<20 {
		t.Fatalf("%d MiB of garbage: the test needs half the headroom (8 MiB)", (objects-live)>>20)
	}
	h.afterBurst(now.Add(h.every))
	debug.SetGCPercent(100)
	if h.quietGCs != 0 {
		t.Errorf("a heap under the headroom (GOGC %d): %d collections started", h.percent, h.quietGCs)
	}
	runtime.KeepAlive(keep)
}
