// Package metrics is a simple in-memory recorder of the data plane's
// counters: per listener (connections opened, closed and refused, bytes
// each way, connection durations), per member (requests or connects by
// status, latency) and per route. It implements proxy.Metrics; Report
// returns plain values for an endpoint or a dashboard to render.
package metrics

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Buckets are the upper bounds of the latency histograms; a last,
// unbounded bucket catches the rest. Between 50 ms and 1.5 s, where web
// latencies live, a bound is at most 1.5 times the one below it, so a p99
// read from the bucket is at most that far above the true one (the bounds
// of earlier releases are all kept, so queries naming an le still work).
var Buckets = []time.Duration{
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond,
	100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond,
	300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond,
	time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond,
	5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
}

// numBuckets is len(Buckets)+1: the histograms' counts.
const numBuckets = 24

// Histogram counts durations into Buckets.
type Histogram struct {
	counts [numBuckets]atomic.Uint64
	sum    atomic.Int64
}

// Observe adds one duration.
func (h *Histogram) Observe(d time.Duration) {
	i, _ := slices.BinarySearch(Buckets, d)
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramValues is a histogram's state: Counts[i] counts durations up to
// Buckets[i] (not cumulative), the last one those above every bucket.
type HistogramValues struct {
	Counts []uint64
	Count  uint64
	Sum    time.Duration
}

func (h *Histogram) values() HistogramValues {
	v := HistogramValues{Counts: make([]uint64, len(h.counts)), Sum: time.Duration(h.sum.Load())}
	for i := range h.counts {
		v.Counts[i] = h.counts[i].Load()
		v.Count += v.Counts[i]
	}
	return v
}

// table is a concurrent map of counters created on first use.
type table[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]*V
}

func (t *table[K, V]) get(k K) *V {
	t.mu.RLock()
	v := t.m[k]
	t.mu.RUnlock()
	if v != nil {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v = t.m[k]; v == nil {
		if t.m == nil {
			t.m = map[K]*V{}
		}
		v = new(V)
		t.m[k] = v
	}
	return v
}

// retain deletes the entries keep refuses.
func (t *table[K, V]) retain(keep func(K) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if !keep(k) {
			delete(t.m, k)
		}
	}
}

func (t *table[K, V]) each(f func(K, *V)) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for k, v := range t.m {
		f(k, v)
	}
}

type listenerKey struct{ lb, listener string }

type listenerCounters struct {
	opened, closed, bytesIn, bytesOut atomic.Int64
	udpReplyDropped                   atomic.Int64
	refused                           table[string, atomic.Int64]
	duration                          Histogram
}

type memberKey struct{ lb, pool, member string }

type requestCounters struct {
	byStatus table[int, atomic.Int64]
	latency  Histogram
}

type routeKey struct{ lb, route string }

// Memory records everything in memory. The zero value is ready to use.
type Memory struct {
	listeners table[listenerKey, listenerCounters]
	members   table[memberKey, requestCounters]
	routes    table[routeKey, requestCounters]

	http        table[httpKey, httpCounters]
	httpMembers table[httpMemberKey, httpMemberCounters]
}

// Retain forgets the counters of the load balancers keep refuses (those
// deleted), so that tenants creating and deleting load balancers cannot
// grow the memory without bound. A load balancer that is served again
// starts from zero.
func (m *Memory) Retain(keep func(lb string) bool) {
	m.listeners.retain(func(k listenerKey) bool { return keep(k.lb) })
	m.members.retain(func(k memberKey) bool { return keep(k.lb) })
	m.routes.retain(func(k routeKey) bool { return keep(k.lb) })
	m.http.retain(func(k httpKey) bool { return keep(k.lb) })
	m.httpMembers.retain(func(k httpMemberKey) bool { return keep(k.lb) })
}

// ConnOpened counts an accepted connection or a new UDP flow.
func (m *Memory) ConnOpened(lb, listener string) {
	m.listeners.get(listenerKey{lb, listener}).opened.Add(1)
}

// ConnClosed counts a finished connection or flow and its duration.
func (m *Memory) ConnClosed(lb, listener string, d time.Duration) {
	c := m.listeners.get(listenerKey{lb, listener})
	c.closed.Add(1)
	c.duration.Observe(d)
}

// ConnRefused counts a connection or flow turned away, by reason.
func (m *Memory) ConnRefused(lb, listener, reason string) {
	m.listeners.get(listenerKey{lb, listener}).refused.get(reason).Add(1)
}

// BytesIn counts bytes from clients.
func (m *Memory) BytesIn(lb, listener string, n int64) {
	m.listeners.get(listenerKey{lb, listener}).bytesIn.Add(n)
}

// BytesOut counts bytes to clients.
func (m *Memory) BytesOut(lb, listener string, n int64) {
	m.listeners.get(listenerKey{lb, listener}).bytesOut.Add(n)
}

// UDPReplyDropped counts bytes of member replies a UDP listener dropped
// over a flow's reply budget.
func (m *Memory) UDPReplyDropped(lb, listener string, n int64) {
	m.listeners.get(listenerKey{lb, listener}).udpReplyDropped.Add(n)
}

// MemberRequest counts one request (L7) or connect (L4) to a member.
func (m *Memory) MemberRequest(lb, pool, member string, status int, d time.Duration) {
	c := m.members.get(memberKey{lb, pool, member})
	c.byStatus.get(status).Add(1)
	c.latency.Observe(d)
}

// RouteRequest counts one request matched to a route.
func (m *Memory) RouteRequest(lb, route string, status int, d time.Duration) {
	c := m.routes.get(routeKey{lb, route})
	c.byStatus.get(status).Add(1)
	c.latency.Observe(d)
}

// ListenerStats are one listener's counters.
type ListenerStats struct {
	LB, Listener      string
	Opened, Closed    int64
	BytesIn, BytesOut int64
	// UDPReplyDropped is the bytes of member replies dropped over the
	// reply budget of UDP flows.
	UDPReplyDropped int64
	Refused         map[string]int64
	Duration        HistogramValues
}

// RequestStats are one member's or route's counters; Pool is empty for
// routes, Name is the member address or the route.
type RequestStats struct {
	LB, Pool, Name string
	ByStatus       map[int]int64
	Latency        HistogramValues
}

// Report is everything recorded, sorted by name.
type Report struct {
	Listeners []ListenerStats
	Members   []RequestStats
	Routes    []RequestStats
}

// Report returns the current values.
func (m *Memory) Report() Report {
	var r Report
	m.listeners.each(func(k listenerKey, c *listenerCounters) {
		s := ListenerStats{LB: k.lb, Listener: k.listener, Opened: c.opened.Load(), Closed: c.closed.Load(),
			BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(), UDPReplyDropped: c.udpReplyDropped.Load(), Refused: map[string]int64{}, Duration: c.duration.values()}
		c.refused.each(func(reason string, n *atomic.Int64) { s.Refused[reason] = n.Load() })
		r.Listeners = append(r.Listeners, s)
	})
	m.members.each(func(k memberKey, c *requestCounters) {
		r.Members = append(r.Members, requestStats(k.lb, k.pool, k.member, c))
	})
	m.routes.each(func(k routeKey, c *requestCounters) {
		r.Routes = append(r.Routes, requestStats(k.lb, "", k.route, c))
	})
	slices.SortFunc(r.Listeners, func(a, b ListenerStats) int {
		return cmp.Or(cmp.Compare(a.LB, b.LB), cmp.Compare(a.Listener, b.Listener))
	})
	byName := func(a, b RequestStats) int {
		return cmp.Or(cmp.Compare(a.LB, b.LB), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Name, b.Name))
	}
	slices.SortFunc(r.Members, byName)
	slices.SortFunc(r.Routes, byName)
	return r
}

func requestStats(lb, pool, name string, c *requestCounters) RequestStats {
	s := RequestStats{LB: lb, Pool: pool, Name: name, ByStatus: map[int]int64{}, Latency: c.latency.values()}
	c.byStatus.each(func(code int, n *atomic.Int64) { s.ByStatus[code] = n.Load() })
	return s
}
