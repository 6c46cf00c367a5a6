// Package ratelimit counts the requests and connections of the tenants'
// rate limits on one LB host, without any external store.
//
// Each limit is a GCRA (generic cell rate algorithm): one theoretical
// arrival time per key, which admits a burst and then the rate. A limit
// keyed per client keeps one arrival time per client address (IPv6
// clients per /64, the smallest block a client is given) in its tenant's
// Table, one keyed by a request header one per value (AllowKey: the
// value's 64-bit SipHash under the cluster's key, so a key costs the
// same whatever the value's length and a client cannot choose values
// that collide); a limit for all clients together keeps one in itself.
//
// The Table never holds more keys than its tenant's bound. An arrival
// time in the past behaves as an absent key, so when the table is full
// such entries are dropped; if that leaves it fuller than 7/8 of the
// bound (an attack: more live addresses or header values than the bound),
// the keys that owe the least of their limit's burst are evicted down to
// 7/8. Forgetting a key forgives what it owes, and those owe the least: a
// flood of new keys, each with one arrival, owes 1/burst each, while a
// key past its limit owes all of its burst, so a client past its limit is
// not given a fresh burst by a flood (burst 1 cannot tell them apart). Both happen at
// most once per sweepEvery; in between, a new key past a full table is
// refused (Stats.Full). Tables are per tenant: a flood costs the
// flooded tenant's keys, never another tenant's.
//
// Limits are shared with the other hosts serving the same VIPs (share.go):
// total limits always, the keys of per-client and per-header limits once
// they are hot, up to a bound per tenant (ShareCap), so that a client
// whose flows ECMP spreads over several hosts gets its limit, not the
// limit from each host.
package ratelimit

import (
	"crypto/rand"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// sweepEvery bounds how often a full table is swept for expired keys, so
// that a flood of new clients costs the tenant's requests a sweep of its
// table at most this often.
const sweepEvery = 50 * time.Millisecond

var base = time.Now()

// Now is the clock of Allow: nanoseconds on the monotonic clock.
func Now() int64 { return int64(time.Since(base)) }

// key is a client address (hash 0; IPv4 in its IPv4-mapped form) or a
// header value's hash (odd; addr zero): 32 bytes.
type key struct {
	lim  *Limiter
	addr [16]byte
	hash uint64
}

// Table holds one tenant's per-client keys on one host.
type Table struct {
	max atomic.Int64

	hash atomic.Pointer[sipKey]

	mu        sync.Mutex
	keys      map[key]slot
	limiters  map[string]*Limiter
	lastSweep int64
	owed      []float64 // the sweep's scratch
	// churn counts the keys deleted since keys was made: a Go map keeps
	// the room of deleted entries, and under a flood of new keys would
	// grow past what the bound's keys need, so it is made anew.
	churn int64

	// shareCap bounds the keys shared per drain (0: none, the host has
	// no peers); hot holds those to share at the next DrainKeys.
	shareCap int
	hot      []key

	full, refused, evicted   atomic.Int64
	shared, unshared, debits atomic.Int64
}

// slot is a key's state: its theoretical arrival time, and the arrivals
// admitted here since it was last shared (queued: it is in the table's
// hot list).
type slot struct {
	tat     int64
	pending uint32
	queued  bool
}

// NewTable returns a table that holds at most max keys.
func NewTable(max int) *Table {
	t := &Table{keys: map[key]slot{}, limiters: map[string]*Limiter{}, lastSweep: -int64(sweepEvery)}
	var k [16]byte
	_, _ = rand.Read(k[:])
	t.SetHashKey(k)
	t.SetMax(max)
	return t
}

// SetMax changes the bound (the tenant's quota changed). A table over a
// lowered bound takes no new key until it is under it again.
func (t *Table) SetMax(max int) { t.max.Store(int64(max)) }

// Stats are a table's counts.
type Stats struct {
	// Keys is the number of keys held now; Max the bound.
	Keys, Max int
	// Refused counts arrivals refused over their limit; Full those
	// refused because the table had no room for a new key; Evicted the
	// live keys dropped to make room (expired ones are not counted).
	Refused, Full, Evicted int64
	// Shared counts the keys sent to the other hosts (DrainKeys);
	// Unshared the arrivals of hot keys counted here alone because the
	// drain's ShareCap was spent; Debits the other hosts' counts taken.
	Shared, Unshared, Debits int64
}

// Stats returns the table's counts.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	n := len(t.keys)
	t.mu.Unlock()
	return Stats{Keys: n, Max: int(t.max.Load()), Refused: t.refused.Load(), Full: t.full.Load(), Evicted: t.evicted.Load(),
		Shared: t.shared.Load(), Unshared: t.unshared.Load(), Debits: t.debits.Load()}
}

// Spec is one limit: Rate events per second, Burst of them at once, per
// client or for everyone (Total). Header names the request header whose
// values the limit's user counts apart (AllowKey); the table only keeps
// it as part of the limit's identity.
type Spec struct {
	Rate, Burst uint32
	Total       bool
	Header      string
}

// Limiter is one limit in service. Acquire it from its table for each
// user (a listener snapshot) and Release it when that user is gone: a
// limiter whose id and spec stay the same across configuration changes
// keeps its counts.
type Limiter struct {
	t        *Table
	id       string
	spec     Spec
	interval int64 // ns per event
	tau      int64 // the burst's tolerance: (Burst-1)*interval
	// shareAt is the arrivals a key admits here before it is hot and
	// shared (shareThreshold).
	shareAt uint32
	refs    int
	retired atomic.Bool
	tat     atomic.Int64 // Total limits
	// admitted counts a Total limit's arrivals admitted since the last
	// Drain, for the host's peers (share.go).
	admitted atomic.Int64
}

// Spec returns the limit's spec.
func (l *Limiter) Spec() Spec { return l.spec }

// Acquire returns the table's limiter of id, made with spec unless one of
// the same spec is in service; the old one of another spec is retired
// once released by its users. Acquire and Release are called by one
// goroutine at a time (the proxy's configuration changes).
func (t *Table) Acquire(id string, s Spec) *Limiter {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.limiters[id]; l != nil && l.spec == s {
		l.refs++
		return l
	}
	if s.Rate == 0 {
		s.Rate = 1
	}
	if s.Burst == 0 {
		s.Burst = s.Rate
	}
	interval := int64(time.Second) / int64(s.Rate)
	l := &Limiter{t: t, id: id, spec: s, interval: interval, tau: int64(s.Burst-1) * interval, shareAt: shareThreshold(s.Burst), refs: 1}
	l.tat.Store(-1 << 62)
	t.limiters[id] = l
	return l
}

// Release drops one user of l; the last one retires it, and its keys go
// with the next sweep.
func (l *Limiter) Release() {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if l.refs--; l.refs > 0 {
		return
	}
	l.retired.Store(true)
	if t.limiters[l.id] == l {
		delete(t.limiters, l.id)
	}
}

// clientKey is the address a client is counted under: IPv4 as it is,
// IPv6 by its /64.
func clientKey(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// Verdict is the outcome of one arrival.
type Verdict struct {
	OK bool
	// Remaining is how many more may arrive now; RetryAfter how long a
	// refused one should wait.
	Remaining  int
	RetryAfter time.Duration
	// Reset is when the limit is back to its full burst.
	Reset time.Duration
}

// Allow counts one arrival of client at now (Now()). It allocates nothing
// unless the table stores a new client.
func (l *Limiter) Allow(client netip.Addr, now int64) Verdict {
	if l.spec.Total {
		for {
			old := l.tat.Load()
			v, tat := l.gcra(old, now)
			if !v.OK {
				l.t.refused.Add(1)
				return v
			}
			if l.tat.CompareAndSwap(old, tat) {
				l.admitted.Add(1)
				return v
			}
		}
	}
	return l.allow(key{lim: l, addr: clientKey(client).As16()}, now)
}

// AllowKey counts one arrival of a request whose header value is v (not
// retained) at now, as Allow does for a client address. A Total limiter
// counts it with everyone's.
func (l *Limiter) AllowKey(v string, now int64) Verdict {
	if l.spec.Total {
		return l.Allow(netip.Addr{}, now)
	}
	return l.allow(key{lim: l, hash: l.t.hash.Load().sum64(v) | 1}, now)
}

func (l *Limiter) allow(k key, now int64) Verdict {
	t := l.t
	t.mu.Lock()
	old, had := t.keys[k]
	if !had {
		old.tat = -1 << 62
		if int64(len(t.keys)) >= t.max.Load() && !t.makeRoom(now) {
			t.mu.Unlock()
			t.full.Add(1)
			t.refused.Add(1)
			return Verdict{RetryAfter: time.Second, Reset: time.Second}
		}
	}
	v, tat := l.gcra(old.tat, now)
	if v.OK {
		old.tat = tat
		if t.shareCap > 0 {
			t.queue(k, &old)
		}
		t.keys[k] = old
	}
	t.mu.Unlock()
	if !v.OK {
		t.refused.Add(1)
	}
	return v
}

// gcra decides an arrival at now against the theoretical arrival time
// tat, and returns the new one.
func (l *Limiter) gcra(tat, now int64) (Verdict, int64) {
	tat = max(tat, now)
	if wait := tat - now - l.tau; wait > 0 {
		return Verdict{RetryAfter: time.Duration(wait), Reset: time.Duration(tat - now)}, 0
	}
	tat += l.interval
	left := (l.tau - (tat - now - l.interval)) / l.interval
	return Verdict{OK: true, Remaining: int(max(left, 0)), Reset: time.Duration(tat - now)}, tat
}

// makeRoom drops the keys whose arrival time passed (they act as absent)
// and those of retired limiters, then, if the table is still fuller than
// 7/8 of its bound, the keys with the earliest arrival times down to 7/8;
// at most once per sweepEvery. It reports whether the table has room
// now. t.mu is held.
func (t *Table) makeRoom(now int64) bool {
	max := t.max.Load()
	if now-t.lastSweep >= int64(sweepEvery) {
		t.lastSweep = now
		n := len(t.keys)
		for k, s := range t.keys {
			if s.tat <= now && !s.queued || k.lim.retired.Load() {
				delete(t.keys, k)
			}
		}
		if over := int64(len(t.keys)) - (max - max/8); over > 0 {
			t.evict(int(over), now)
		}
		if t.churn += int64(n - len(t.keys)); t.churn > 2*max {
			fresh := make(map[key]slot, len(t.keys))
			for k, s := range t.keys {
				fresh[k] = s
			}
			t.keys, t.churn = fresh, 0
		}
	}
	return int64(len(t.keys)) < max
}

// evict drops the n keys that owe the least of their limit's burst (the
// time their arrival time is ahead of now, over the burst's time), so
// that limits of different rates compare: a key with one arrival owes
// 1/burst of it, a key past its limit all of it. t.mu is held.
func (t *Table) evict(n int, now int64) {
	owed := func(k key, tat int64) float64 {
		return float64(tat-now) / float64(k.lim.tau+k.lim.interval)
	}
	t.owed = t.owed[:0]
	for k, s := range t.keys {
		t.owed = append(t.owed, owed(k, s.tat))
	}
	slices.Sort(t.owed)
	cut := t.owed[n-1]
	ties := n - sort.SearchFloat64s(t.owed[:n], cut) // keys owing cut to drop
	for k, s := range t.keys {
		if o := owed(k, s.tat); o < cut || o == cut && ties > 0 {
			if o == cut {
				ties--
			}
			delete(t.keys, k)
		}
	}
	t.evicted.Add(int64(n))
}
