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
