package l7

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// spentDescriptors is a budget with no descriptor left until freed.
type spentDescriptors struct{ free atomic.Int64 }

func (d *spentDescriptors) TakeDescriptor() bool {
	for {
		n := d.free.Load()
		if n <= 0 {
			return false
		}
		if d.free.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (d *spentDescriptors) ReleaseDescriptor() { d.free.Add(1) }

// TestMemberWaitersBounded: 500 dials of one tenant find its budget spent.
// At most maxMemberWaiters of them wait for it (each wakes every few
// milliseconds to look); the others fail at once with ErrMemberLimit,
// instead of 500 goroutines polling the budget and lengthening the
// host's run queue for every other tenant. A descriptor freed meanwhile
// still goes to a waiter.
func TestMemberWaitersBounded(t *testing.T) {
	t.Parallel()
	s := New(Config{MemberBudgetWait: 2 * time.Second})
	t.Cleanup(func() { s.Close() })
	d := &spentDescriptors{}
	key := poolKey{budget: NewMemberBudget(d, nil)}
	const dials = 500
	var refusedAtOnce, charged, waitedOut atomic.Int64
	var wg sync.WaitGroup
	for range dials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.charge(context.Background(), key)
			switch {
			case err == nil:
				charged.Add(1)
			case !errors.Is(err, ErrMemberLimit):
				t.Errorf("charge: %v, want ErrMemberLimit", err)
			case strings.Contains(err.Error(), "already wait"):
				refusedAtOnce.Add(1)
			default:
				waitedOut.Add(1)
			}
		}()
	}
	// Once every dial beyond the bound has been refused, free one
	// descriptor: a waiter takes it.
	deadline := time.Now().Add(time.Second)
	for refusedAtOnce.Load() < dials-maxMemberWaiters && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := refusedAtOnce.Load(); got != dials-maxMemberWaiters {
		t.Errorf("%d dials refused at once within 1s, want %d (all but the %d waiters)", got, dials-maxMemberWaiters, maxMemberWaiters)
	}
	if w := key.budget.waiters.Load(); w > maxMemberWaiters {
		t.Errorf("%d dials wait for the budget, want at most %d", w, maxMemberWaiters)
	}
	d.ReleaseDescriptor()
	wg.Wait()
	if charged.Load() != 1 || waitedOut.Load() != maxMemberWaiters-1 {
		t.Errorf("charged %d, waited out %d; want 1 and %d", charged.Load(), waitedOut.Load(), maxMemberWaiters-1)
	}
	if w := key.budget.waiters.Load(); w != 0 {
		t.Errorf("%d waiters left after every dial returned", w)
	}
}
