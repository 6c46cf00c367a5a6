package cpubudget

import (
	"context"
	"sync"
	"time"
)

// A tenant's background computing (its health checks' TLS handshakes:
// key exchange, certificate verification, the request) runs on at most
// as many of the host's processors at once as its host budget has cores,
// rounded up (one at the default of half a core). The budget bounds what
// a tenant spends on average, charged once it is spent; it does not bound
// how many processors a tenant's thousand checks hold at the same moment,
// and Go's scheduler has no priorities: a neighbour's request queued
// behind them waited tens of milliseconds while the tenant stayed within
// its budget. With the bound, however many checks a tenant queues, the
// other processors stay free for the others. The slots are taken in the
// order they were asked for.

// compute is a tenant's slots of background computing.
type compute struct {
	mu      sync.Mutex
	running int
	waiters []chan struct{} // FIFO; closed when handed a slot

	computeWaits  uint64
	computeWaited time.Duration
}

// ComputeSlots is how many processors the tenant's background computing
// may use at once: its host budget in cores, rounded up, at least one.
func (t *Tenant) ComputeSlots() int {
	if t == nil {
		return 0
	}
	return max(1, int((t.b.millicoresOf(t)+999)/1000))
}

// Compute takes one of the tenant's slots of background computing,
// waiting in order behind the tenant's earlier asks until one is free or
// ctx ends; it returns how long it waited and whether it got the slot,
// which ComputeDone gives back. A nil Tenant never waits.
func (t *Tenant) Compute(ctx context.Context) (time.Duration, bool) {
	if t == nil {
		return 0, true
	}
	c := &t.compute
	c.mu.Lock()
	if c.running < t.ComputeSlots() && len(c.waiters) == 0 {
		c.running++
		c.mu.Unlock()
		return 0, true
	}
	ch := make(chan struct{})
	c.waiters = append(c.waiters, ch)
	c.mu.Unlock()
	start := time.Now()
	select {
	case <-ch:
	case <-ctx.Done():
		c.mu.Lock()
		for i, w := range c.waiters {
			if w == ch {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				c.mu.Unlock()
				return time.Since(start), false
			}
		}
		c.mu.Unlock()
		// Handed a slot as ctx ended: give it on.
		t.ComputeDone()
		return time.Since(start), false
	}
	waited := time.Since(start)
	c.mu.Lock()
	c.computeWaits++
	c.computeWaited += waited
	c.mu.Unlock()
	return waited, true
}

// ComputeDone gives back a slot Compute took: to the first waiter while
// the tenant is within its slots.
func (t *Tenant) ComputeDone() {
	if t == nil {
		return
	}
	c := &t.compute
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) > 0 && c.running <= t.ComputeSlots() {
		ch := c.waiters[0]
		c.waiters[0] = nil
		c.waiters = c.waiters[1:]
		close(ch) // the slot passes on: running is unchanged
		return
	}
	c.running--
}

// ComputeStat is a tenant's background computing: its slots, those in
// use, the asks waiting, and the times and time its asks waited.
type ComputeStat struct {
	Slots, Running, Waiting int
	Waits                   uint64
	Waited                  time.Duration
}

// ComputeStat returns the tenant's background computing.
func (t *Tenant) ComputeStat() ComputeStat {
	c := &t.compute
	c.mu.Lock()
	defer c.mu.Unlock()
	return ComputeStat{Slots: t.ComputeSlots(), Running: c.running, Waiting: len(c.waiters), Waits: c.computeWaits, Waited: c.computeWaited}
}
