package tenantsync

import (
	"testing"
	"time"
)

// step takes n tokens after a pause and expects to wait so long.
type step struct {
	after time.Duration
	n     int
	wait  time.Duration
}

func TestBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name  string
		steps []step
	}{
		{"burst is free, then the rate applies", []step{{0, 100, 0}, {0, 10, 100 * time.Millisecond}, {100 * time.Millisecond, 10, 100 * time.Millisecond}}},
		{"tokens come back over time up to the burst", []step{{0, 100, 0}, {time.Hour, 100, 0}, {0, 1, 10 * time.Millisecond}}},
		{"a change larger than the burst waits for all of it", []step{{0, 300, 2 * time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBucket(100, 100)
			b.last = t0
			now := t0
			for i, s := range tt.steps {
				now = now.Add(s.after)
				if got := b.reserve(s.n, now); got != s.wait {
					t.Errorf("step %d: reserve(%d) = %s, want %s", i, s.n, got, s.wait)
				}
			}
		})
	}
}

// set keeps the tokens saved (at most the new burst) and a debt when the
// rate falls; when it rises, the debt is forgiven and the burst's growth
// is added.
func TestBucketSet(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	b := newBucket(100, 100)
	b.last = t0
	if got := b.reserve(150, t0); got != 500*time.Millisecond {
		t.Fatalf("reserve(150) = %s, want 500ms", got)
	}
	b.set(50, 50, t0) // lowered: the debt of 50 stays, paid at 50 a second
	if got := b.reserve(0, t0); got != time.Second {
		t.Fatalf("after lowering, wait %s, want 1s", got)
	}
	b.set(1000, 1000, t0) // raised: debt forgiven, 950 more of burst
	if got := b.reserve(950, t0); got != 0 {
		t.Fatalf("after raising, reserve(950) waits %s, want 0", got)
	}
	if got := b.reserve(10, t0); got != 10*time.Millisecond {
		t.Fatalf("past the raised burst, reserve(10) = %s, want 10ms", got)
	}
}
