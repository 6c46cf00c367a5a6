package ratelimit

// Counts shared between hosts. Several LB hosts serve one VIP by ECMP, so
// a total limit counted on each host alone gives clients up to N times
// the limit. Each host therefore tells the others, every interval, how
// many arrivals each of its total limits admitted (Drain), and each host
// counts what the others admitted against its own limiter of the same id
// as if it had admitted them itself (Debit): every admission anywhere
// moves every host's theoretical arrival time on by one interval, once
// its report arrives. Over any window W the hosts together admit at most
//
//	rate × W + burst + (N−1) × (rate × (T + d) + burst)
//
// with T the reporting interval and d the report's delivery: a host
// admits what its own count allows, and what it has not yet heard of is
// at most what each other host admitted in the last T + d. While the
// load holds, the long-run rate is the limit (the excess does not grow
// with W), and a host whose peers get no traffic gives the whole limit
// alone. A host that hears nothing from its peers (they are down, or
// the reports are lost) falls back to counting alone.

// Drain calls f with the id of each Total limit in service and the
// arrivals it admitted since the last Drain, for those that admitted any.
func (t *Table) Drain(f func(id string, n int64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, l := range t.limiters {
		if !l.spec.Total {
			continue
		}
		if n := l.admitted.Swap(0); n > 0 {
			f(id, n)
		}
	}
}

// Debit counts n arrivals another host admitted at now against the
// Total limit of id, if this table has it in service. At most a second's
// worth and a burst is counted from one report.
func (t *Table) Debit(id string, n int64, now int64) {
	t.mu.Lock()
	l := t.limiters[id]
	t.mu.Unlock()
	if l == nil || !l.spec.Total || n <= 0 {
		return
	}
	n = min(n, int64(l.spec.Rate)+int64(l.spec.Burst))
	for {
		old := l.tat.Load()
		if l.tat.CompareAndSwap(old, max(old, now)+n*l.interval) {
			return
		}
	}
}
