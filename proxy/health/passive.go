package health

import (
	"sync/atomic"
	"time"
)

// Outcome is what one request (L7) or connection (L4) got from a member,
// for passive health.
type Outcome uint8

// Outcomes. OutcomeOK is anything the member answered that is not a
// failure (a 500 too: the application answered).
const (
	OutcomeOK Outcome = iota
	Outcome502
	Outcome503
	Outcome504
	OutcomeConnect
	OutcomeTimeout
	OutcomeReset
	OutcomeProtocol
	numOutcomes
)

// OutcomeKinds names the failure outcomes as api/observe does
// (observe.FailConnect, ...); OutcomeKinds[OutcomeOK] is "".
var OutcomeKinds = [numOutcomes]string{"", "502", "503", "504", "connect", "timeout", "reset", "protocol"}

// The passive window: PassiveBuckets buckets of PassiveBucket each. A
// request counts in the bucket of its time; a bucket is reused (zeroed)
// when its time comes round again, so the window holds the last 50 to
// 60 s and a member's memory is fixed: 6 × (8 + 8 × 4) = 240 bytes,
// allocated on its first request.
const (
	PassiveBucket  = 10 * time.Second
	PassiveBuckets = 6
)

type passiveBucket struct {
	// epoch is the bucket's time: Unix time / PassiveBucket.
	epoch atomic.Int64
	// counts[OutcomeOK] counts everything; the others the failures by
	// outcome.
	counts [numOutcomes]atomic.Uint32
}

type passiveWindow struct {
	b [PassiveBuckets]passiveBucket
}

// Record counts one request or connection to the member and its outcome.
// It allocates only the first time (the window), never per request, and
// takes no lock: a bucket is zeroed by the first recorder that finds it
// stale, and a count racing with that reset may be lost (a statistic, not
// an account).
func (t *Target) Record(o Outcome) {
	t.record1(o, time.Now(), true)
}

// RecordFailure counts a failure of a connection already counted (a
// member that resets a connection it accepted).
func (t *Target) RecordFailure(o Outcome) {
	if o != OutcomeOK {
		t.record1(o, time.Now(), false)
	}
}

func (t *Target) record1(o Outcome, now time.Time, total bool) {
	w := t.passive.Load()
	if w == nil {
		w = new(passiveWindow)
		if !t.passive.CompareAndSwap(nil, w) {
			w = t.passive.Load()
		}
	}
	e := now.UnixNano() / int64(PassiveBucket)
	b := &w.b[e%PassiveBuckets]
	if old := b.epoch.Load(); old < e && b.epoch.CompareAndSwap(old, e) {
		for i := range b.counts {
			b.counts[i].Store(0)
		}
	}
	if total {
		b.counts[OutcomeOK].Add(1)
	}
	if o != OutcomeOK && o < numOutcomes {
		b.counts[o].Add(1)
	}
}

// PassiveCounts are a member's counts over the window.
type PassiveCounts struct {
	Total uint64
	// Failed counts the failures by outcome (Failed[OutcomeOK] is 0).
	Failed [numOutcomes]uint64
}

// Any reports whether anything was counted.
func (c PassiveCounts) Any() bool { return c.Total > 0 }

// Passive returns the member's counts over the window ending at now.
func (t *Target) Passive(now time.Time) PassiveCounts {
	var c PassiveCounts
	w := t.passive.Load()
	if w == nil {
		return c
	}
	e := now.UnixNano() / int64(PassiveBucket)
	for i := range w.b {
		b := &w.b[i]
		if be := b.epoch.Load(); be > e || be <= e-PassiveBuckets {
			continue
		}
		c.Total += uint64(b.counts[OutcomeOK].Load())
		for o := OutcomeOK + 1; o < numOutcomes; o++ {
			c.Failed[o] += uint64(b.counts[o].Load())
		}
	}
	return c
}

// PassiveFailing reports whether the data plane last judged the member
// Failing by what its clients get (SetPassiveFailing).
func (t *Target) PassiveFailing() bool { return t.passiveFailing.Load() }

// SetPassiveFailing records the data plane's verdict; it reports whether
// it changed.
func (t *Target) SetPassiveFailing(on bool) bool {
	return t.passiveFailing.Swap(on) != on
}
