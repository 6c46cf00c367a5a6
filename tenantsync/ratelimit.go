package tenantsync

import (
	"context"
	"sync"
	"time"
)

// bucket is a token bucket: rate tokens a second, at most burst saved.
// Waiters take tokens in turn; a request larger than the burst waits for
// the whole of it.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// reserve takes n tokens, going into debt if needed, and returns how long
// the caller must wait before it may go on.
func (b *bucket) reserve(n int, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// set changes the rate and the burst, keeping what was saved (at most the
// new burst). A debt is kept when the rate falls; when it rises the debt
// is forgiven and what the burst grew by is added: the operator raised it
// so that the waiting ends.
func (b *bucket) set(rate float64, burst int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == rate && b.burst == float64(burst) {
		return
	}
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if rate > b.rate {
		b.tokens = max(b.tokens, 0) + max(float64(burst)-b.burst, 0)
	}
	b.rate, b.burst = rate, float64(burst)
	b.tokens = min(b.tokens, b.burst)
}

// wait takes n tokens and blocks until they are paid for or ctx ends.
func (b *bucket) wait(ctx context.Context, n int) error {
	d := b.reserve(n, time.Now())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
