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
		{in: "50%", err: "a headroom is a size"},
		{in: "-1GiB", err: "a headroom is a size"},
		{in: "lots", err: "a headroom is a size"},
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
