package health

import (
	"container/heap"
	"time"
)

// Each tenant dispatches its own checks. A target's next check waits in
// its tenant's heap, by the time it is due, under one timer per tenant;
// when it is due it joins the tenant's ready queue, and a goroutine runs
// it only while the tenant has a free slot (MaxChecksPerTenant): the
// tenant's workers take the ready checks in the order they fell due. A
// target is in the heap, in the ready queue or being checked, never twice,
// so a tenant with 1,000 members has at most 1,000 entries and its slots'
// goroutines, however far its checks fall behind. Checks that fall behind
// are delayed, in their tenant's queue only (the member's LastCheck
// ages), and a quiet tenant's check starts when it is due, as a timer of
// its own would start it.

// Where a target's next check is (activeCheck.q, guarded by its
// tenantBudget's mu).
const (
	qIdle    uint8 = iota // not scheduled yet
	qTimed                // in the tenant's heap until it is due
	qReady                // due, waiting for a slot of the tenant
	qRunning              // being checked by one of the tenant's workers
	qStopped              // released or closed: never scheduled again
)

// timedHeap orders a tenant's scheduled targets by the time they are due.
type timedHeap []*Target

func (h timedHeap) Len() int           { return len(h) }
func (h timedHeap) Less(i, j int) bool { return h[i].active.due < h[j].active.due }
func (h timedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].active.idx, h[j].active.idx = int32(i), int32(j)
}
func (h *timedHeap) Push(x any) {
	t := x.(*Target)
	t.active.idx = int32(len(*h))
	*h = append(*h, t)
}
func (h *timedHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.active.idx = -1
	return t
}

// now is the registry's monotonic clock, which due times are on.
func (r *Registry) now() time.Duration { return time.Since(r.epoch) }

// schedule runs t's next check after d, unless t is stopped.
func (tb *tenantBudget) schedule(t *Target, d time.Duration) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	a := t.active
	if a.q != qIdle && a.q != qRunning {
		return // stopped, or already waiting: never twice
	}
	now := tb.r.now()
	a.due = now + d
	a.q = qTimed
	heap.Push(&tb.timed, t)
	tb.arm(now)
}

// unschedule takes a stopped target out of its tenant's queues for good.
func (tb *tenantBudget) unschedule(t *Target) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	a := t.active
	switch a.q {
	case qTimed:
		heap.Remove(&tb.timed, int(a.idx))
	case qReady:
		// Its entry stays in the queue until a worker skips it.
		tb.nready--
	}
	a.q = qStopped
}

// arm sets the tenant's timer for its earliest check; called under mu.
func (tb *tenantBudget) arm(now time.Duration) {
	if len(tb.timed) == 0 {
		return
	}
	next := tb.timed[0].active.due
	if tb.armed != 0 && tb.armed <= next {
		return // it fires in time for next
	}
	tb.armed = next
	if tb.timer == nil {
		tb.timer = time.AfterFunc(next-now, tb.fire)
	} else {
		tb.timer.Reset(next - now)
	}
}

// fire moves the tenant's due checks to its ready queue, starts workers
// for its free slots and sets the timer for the next check.
func (tb *tenantBudget) fire() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.armed = 0
	now := tb.r.now()
	for len(tb.timed) > 0 && tb.timed[0].active.due <= now {
		t := heap.Pop(&tb.timed).(*Target)
		t.active.q = qReady
		tb.ready = append(tb.ready, t)
		tb.nready++
	}
	// A worker starts only for a live ready target, so none starts once
	// Close has stopped every target (under this lock) and waits.
	for n := min(tb.slots-tb.running, tb.nready); n > 0; n-- {
		tb.running++
		tb.r.wg.Add(1)
		go tb.work()
	}
	tb.arm(now)
}

// next takes the first live ready target, or returns nil; called under
// mu.
func (tb *tenantBudget) next() *Target {
	for tb.head < len(tb.ready) {
		t := tb.ready[tb.head]
		tb.ready[tb.head] = nil
		tb.head++
		if t.active.q == qReady {
			tb.nready--
			t.active.q = qRunning
			return t
		}
	}
	tb.ready, tb.head = tb.ready[:0], 0
	return nil
}

// work runs the tenant's ready checks, one at a time, until none is
// ready.
func (tb *tenantBudget) work() {
	defer tb.r.wg.Done()
	tb.mu.Lock()
	for {
		t := tb.next()
		if t == nil {
			tb.running--
			tb.mu.Unlock()
			return
		}
		tb.mu.Unlock()
		t.run()
		tb.mu.Lock()
	}
}
