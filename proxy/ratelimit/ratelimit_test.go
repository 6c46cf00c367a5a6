package ratelimit

import (
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	a = netip.MustParseAddr("192.0.2.1")
	b = netip.MustParseAddr("192.0.2.2")
)

// A client gets its burst at once, then the rate; another client has its
// own count.
func TestPerClientBurstThenRate(t *testing.T) {
	t.Parallel()
	tb := NewTable(100)
	l := tb.Acquire("lb/routes[0]", Spec{Rate: 10, Burst: 3})
	now := int64(time.Hour)
	for i := range 3 {
		if v := l.Allow(a, now); !v.OK || v.Remaining != 2-i {
			t.Fatalf("arrival %d of the burst: %+v", i, v)
		}
	}
	v := l.Allow(a, now)
	if v.OK || v.RetryAfter <= 0 || v.RetryAfter > 100*time.Millisecond {
		t.Fatalf("fourth at once: %+v, want refused with a wait of at most 100 ms", v)
	}
	if !l.Allow(b, now).OK {
		t.Fatal("another client was refused")
	}
	if !l.Allow(a, now+int64(100*time.Millisecond)).OK {
		t.Fatal("refused after one interval")
	}
	// Over 10 s at 100 arrivals a second, about 10 a second pass.
	passed := 0
	for i := range 1000 {
		if l.Allow(a, now+int64(time.Second)+int64(i)*int64(10*time.Millisecond)).OK {
			passed++
		}
	}
	if passed < 100 || passed > 103 {
		t.Fatalf("%d of 1000 passed over 10 s at 10/s (burst 3)", passed)
	}
	if st := tb.Stats(); st.Refused == 0 || st.Keys != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// IPv6 clients count by /64: an attacker's /64 is one client.
func TestIPv6ByPrefix(t *testing.T) {
	t.Parallel()
	tb := NewTable(100)
	l := tb.Acquire("x", Spec{Rate: 1, Burst: 1})
	if !l.Allow(netip.MustParseAddr("2001:db8::1"), 0).OK {
		t.Fatal("first refused")
	}
	if l.Allow(netip.MustParseAddr("2001:db8::ffff:1"), 0).OK {
		t.Fatal("another address of the same /64 was a new client")
	}
	if !l.Allow(netip.MustParseAddr("2001:db8:0:1::1"), 0).OK {
		t.Fatal("another /64 refused")
	}
	if !l.Allow(netip.MustParseAddr("::ffff:192.0.2.1"), 0).OK || l.Allow(a, 0).OK {
		t.Fatal("an IPv4-mapped address is not counted as its IPv4 address")
	}
}

// The table never holds more keys than its bound: a flood of new clients
// is refused while the keys held are live, but for the eighth of the
// table (here one key) a sweep evicts, and expired keys make room.
func TestTableBounded(t *testing.T) {
	t.Parallel()
	tb := NewTable(10)
	l := tb.Acquire("x", Spec{Rate: 1, Burst: 2})
	now := int64(time.Hour)
	for i := range 1000 {
		l.Allow(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), now)
	}
	st := tb.Stats()
	if st.Keys != 10 || st.Full != 989 || st.Evicted != 1 {
		t.Fatalf("stats %+v, want 10 keys, 989 refused as full and 1 evicted", st)
	}
	// A second later every key is back to a full burst: the next new
	// client makes room.
	if !l.Allow(b, now+int64(2*time.Second)).OK {
		t.Fatal("a new client refused once the keys expired")
	}
	if st := tb.Stats(); st.Keys != 1 {
		t.Fatalf("keys %d after the sweep, want 1", st.Keys)
	}
}

// A total limit counts every client together, without keys.
func TestTotal(t *testing.T) {
	t.Parallel()
	tb := NewTable(1)
	l := tb.Acquire("x", Spec{Rate: 5, Burst: 5, Total: true})
	passed := 0
	for i := range 100 {
		if l.Allow(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 0).OK {
			passed++
		}
	}
	if passed != 5 || tb.Stats().Keys != 0 {
		t.Fatalf("%d passed, keys %d", passed, tb.Stats().Keys)
	}
}

// A limiter kept across a configuration change (same id and spec) keeps
// its counts; a new spec starts afresh and the old one's keys are swept.
func TestAcquireKeepsCounts(t *testing.T) {
	t.Parallel()
	tb := NewTable(2)
	s := Spec{Rate: 1, Burst: 1}
	l1 := tb.Acquire("x", s)
	l1.Allow(a, 0)
	l2 := tb.Acquire("x", s)
	l1.Release()
	if l2 != l1 || l2.Allow(a, 0).OK {
		t.Fatal("the same spec did not keep the count")
	}
	l3 := tb.Acquire("x", Spec{Rate: 2, Burst: 1})
	l2.Release()
	if !l3.Allow(a, 0).OK || !l3.Allow(b, 0).OK {
		t.Fatal("a new spec should make room by dropping the retired limiter's key")
	}
}

func TestAllowAllocatesNothingForAKnownClient(t *testing.T) {
	tb := NewTable(10)
	l := tb.Acquire("x", Spec{Rate: 1000000, Burst: 1000000})
	l.Allow(a, 0)
	if n := testing.AllocsPerRun(1000, func() { l.Allow(a, Now()) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	// Shared with peers: the key queued, drained, queued again.
	tb.SetShareCap(16)
	if n := testing.AllocsPerRun(1000, func() {
		l.Allow(a, Now())
		l.AllowKey("alpha", Now())
		if l.Allow(b, Now()); len(tb.hot) == 3 {
			tb.DrainKeys(func(string, SharedKey, uint32) {})
		}
	}); n != 0 {
		t.Fatalf("%v allocations sharing", n)
	}
}

// Header values are keys of their own, whatever their length; a Total
// limiter counts them with everyone.
func TestHeaderKeys(t *testing.T) {
	tb := NewTable(100)
	l := tb.Acquire("x", Spec{Rate: 1, Burst: 2})
	long := strings.Repeat("k", 8<<10)
	for _, v := range []string{"alpha", "beta", long} {
		if !l.AllowKey(v, 0).OK || !l.AllowKey(v, 0).OK || l.AllowKey(v, 0).OK {
			t.Fatalf("key of %d bytes: not burst 2 then refused", len(v))
		}
	}
	if !l.Allow(a, 0).OK {
		t.Fatal("a client address shares a header value's count")
	}
	if st := tb.Stats(); st.Keys != 4 {
		t.Fatalf("keys %d, want 4", st.Keys)
	}
	tot := tb.Acquire("y", Spec{Rate: 1, Burst: 2, Total: true})
	if !tot.AllowKey("alpha", 0).OK || !tot.AllowKey("beta", 0).OK || tot.AllowKey("gamma", 0).OK {
		t.Fatal("a total limit counted header values apart")
	}
	if n := testing.AllocsPerRun(1000, func() { l.AllowKey(long, 0) }); n != 0 {
		t.Fatalf("%v allocations for a known value", n)
	}
}

// TestHeaderFloodBoundedAndEvicted attacks a tenant's table with a flood
// of distinct header values, the attack a header key invites (a value
// costs the client nothing): the table never holds more than its bound,
// its memory does not grow past what the bound costs, the flood's keys
// are evicted so that new values keep being served, a key over its limit
// is not given a fresh burst by the evictions, and another tenant's
// table keeps every key.
func TestHeaderFloodBoundedAndEvicted(t *testing.T) {
	const max = 2000
	tb := NewTable(max)
	other := NewTable(max)
	l := tb.Acquire("api", Spec{Rate: 1, Burst: 100})
	ol := other.Acquire("api", Spec{Rate: 1, Burst: 100})
	now := int64(time.Hour)
	for i := range 101 {
		if v := l.AllowKey("greedy", now); v.OK != (i < 100) {
			t.Fatalf("greedy arrival %d: %+v", i, v)
		}
	}
	for i := range max / 2 {
		ol.AllowKey(fmt.Sprintf("neighbour-%d", i), now)
	}
	var ms runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	var full, mid uint64
	served := 0
	buf := make([]byte, 0, 32)
	for i := range 200_000 {
		switch i {
		case max:
			full = heap()
		case 50_000:
			mid = heap()
		}
		// 40,000 new values a second, a sweep's worth every 2,000.
		now += int64(25 * time.Microsecond)
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		if l.AllowKey(string(buf), now).OK {
			served++
		}
		if i%1000 == 0 {
			if st := tb.Stats(); st.Keys > max {
				t.Fatalf("after %d values the table holds %d keys; bound %d", i, st.Keys, max)
			}
		}
	}
	after := heap()
	st := tb.Stats()
	t.Logf("table %+v; %d of 200000 flood values served; heap %d B before, %d with the table full, %d after 50,000 values, %d after 200,000 (%.0f B a key)",
		st, served, before, full, mid, after, float64(int64(full)-int64(before))/max)
	if st.Keys > max || st.Evicted == 0 || st.Full == 0 {
		t.Fatalf("stats %+v: want at most %d keys, evictions and refusals", st, max)
	}
	// A sweep every 50 ms frees an eighth of the table: 100 sweeps of 250
	// keys. Expiry alone frees the keys of a second ago: about 10,000.
	if served < 20_000 {
		t.Fatalf("%d of 200000 new values served: the evictions did not make room", served)
	}
	if grow := int64(after) - int64(mid); grow > 64<<10 {
		t.Fatalf("the heap grew %d bytes from 50,000 flood values to 200,000", grow)
	}
	// The quota's doc says about api.RateLimitKeyBytes (100) a key: 40
	// bytes of entry, the map's room (a power of two) and the sweep's 8.
	if per := (int64(after) - int64(before)) / max; per > 128 {
		t.Fatalf("a key costs %d bytes; the quota's doc says about 100", per)
	}
	// Over the flood's 5 s the greedy key earned 5 arrivals back (a rate
	// of 1); forgotten, it would have its burst of 100.
	greedy := 0
	for l.AllowKey("greedy", now).OK {
		greedy++
	}
	if greedy > 6 {
		t.Fatalf("the key over its limit got %d arrivals after the flood, want at most 6: the evictions forgave it", greedy)
	}
	if st := other.Stats(); st.Keys != max/2 || st.Evicted != 0 {
		t.Fatalf("the other tenant's table: %+v", st)
	}
}

// A total limit's admissions are drained once, and another host's
// admissions debited against it take from the same budget; per-client
// limits are not shared.
func TestDrainAndDebit(t *testing.T) {
	t.Parallel()
	tb := NewTable(10)
	l := tb.Acquire("lb total", Spec{Rate: 10, Burst: 10, Total: true})
	pc := tb.Acquire("lb client", Spec{Rate: 10, Burst: 10})
	now := int64(time.Hour)
	for range 4 {
		l.Allow(a, now)
		pc.Allow(a, now)
	}
	got := map[string]int64{}
	tb.Drain(func(id string, n int64) { got[id] += n })
	tb.Drain(func(id string, n int64) { got[id] += n })
	if len(got) != 1 || got["lb total"] != 4 {
		t.Fatalf("drained %v, want lb total: 4 once", got)
	}
	tb.Debit("lb total", 5, now)
	tb.Debit("lb client", 5, now)
	tb.Debit("gone", 5, now)
	passed := 0
	for l.Allow(b, now).OK {
		passed++
	}
	if passed != 1 {
		t.Fatalf("%d passed after 4 here and 5 elsewhere of a burst of 10", passed)
	}
	if !pc.Allow(a, now).OK {
		t.Fatal("a per-client limit was debited")
	}
}

// Eviction compares what keys owe of their own limit's burst: a flood of
// new values on a slow limit (each owing a second) does not evict a key
// past a fast limit (owing a tenth of a second, all of its burst).
func TestEvictionAcrossRates(t *testing.T) {
	t.Parallel()
	tb := NewTable(64)
	slow := tb.Acquire("slow", Spec{Rate: 1, Burst: 10, Header: "X-Api-Key"})
	fast := tb.Acquire("fast", Spec{Rate: 1000, Burst: 100})
	now := int64(time.Hour)
	for fast.Allow(a, now).OK {
	}
	for i := range 1000 {
		now += int64(10 * time.Microsecond)
		slow.AllowKey("flood-"+strconv.Itoa(i), now)
	}
	if st := tb.Stats(); st.Evicted == 0 {
		t.Fatalf("no eviction: %+v", st)
	}
	// 60 ms passed (the next sweep may run): the fast key earned back 60
	// of its burst of 100.
	now += int64(50 * time.Millisecond)
	passed := 0
	for fast.Allow(a, now).OK {
		passed++
	}
	if passed > 61 {
		t.Fatalf("the fast key got %d after the flood: forgiven", passed)
	}
}

// A per-client key is shared once hot (its limit's shareThreshold
// arrivals), drained once, and debited on the other host against the same
// key; a header value's key is the same on two tables under one hash key.
// The hot list holds at most the share cap, the rest count as unshared.
func TestDrainAndDebitKeys(t *testing.T) {
	t.Parallel()
	var hosts [2]*Table
	var lims [2]*Limiter
	for i := range hosts {
		hosts[i] = NewTable(100)
		hosts[i].SetHashKey([16]byte{9})
		hosts[i].SetShareCap(2)
		lims[i] = hosts[i].Acquire("lb routes[0]", Spec{Rate: 10, Burst: 8, Header: "X-Api-Key"}) // hot at 2
	}
	now := int64(time.Hour)
	type got struct {
		id string
		k  SharedKey
		n  uint32
	}
	drain := func(tb *Table) []got {
		var g []got
		tb.DrainKeys(func(id string, k SharedKey, n uint32) { g = append(g, got{id, k, n}) })
		return g
	}
	lims[0].Allow(a, now)
	if g := drain(hosts[0]); len(g) != 0 {
		t.Fatalf("a key of one arrival was shared: %v", g)
	}
	lims[0].Allow(a, now)
	lims[0].Allow(a, now)
	lims[0].AllowKey("secret", now)
	lims[0].AllowKey("secret", now)
	lims[0].Allow(b, now)
	lims[0].Allow(b, now) // hot, but the list holds 2
	g := drain(hosts[0])
	if len(g) != 2 || g[0].n != 3 || g[0].k.Addr != a.As16() || g[1].n != 2 || g[1].k.Hash&1 != 1 {
		t.Fatalf("drained %+v, want a's 3 and the value's 2", g)
	}
	if st := hosts[0].Stats(); st.Shared != 2 || st.Unshared != 1 {
		t.Fatalf("stats %+v, want 2 shared and 1 unshared", st)
	}
	if g := drain(hosts[0]); len(g) != 0 {
		t.Fatalf("drained again: %+v", g)
	}
	for _, e := range g {
		hosts[1].DebitKey(e.id, e.k, int64(e.n), now)
	}
	// Of a burst of 8, the other host had 3 of a and 2 of the value.
	count := func(f func() bool) int {
		n := 0
		for f() {
			n++
		}
		return n
	}
	if n := count(func() bool { return lims[1].Allow(a, now).OK }); n != 5 {
		t.Fatalf("a got %d on the second host, want 5", n)
	}
	if n := count(func() bool { return lims[1].AllowKey("secret", now).OK }); n != 6 {
		t.Fatalf("the value got %d on the second host, want 6", n)
	}
	// Debits do not make the debited key hot again, and one of another
	// limit, a total, or a malformed key is ignored.
	if g := drain(hosts[1]); len(g) != 2 {
		t.Fatalf("the second host's own arrivals: %+v", g)
	}
	hosts[1].DebitKey("gone", SharedKey{Addr: b.As16()}, 5, now)
	hosts[1].DebitKey("lb routes[0]", SharedKey{Addr: b.As16(), Hash: 3}, 5, now)
	hosts[1].DebitKey("lb routes[0]", SharedKey{Hash: 4}, 5, now)
	if st := hosts[1].Stats(); st.Debits != 2 || st.Keys != 2 {
		t.Fatalf("stats %+v, want the 2 good debits and 2 keys", st)
	}
}

// Without a share cap (a host with no peers), nothing is queued.
func TestNoShareCapNothingQueued(t *testing.T) {
	t.Parallel()
	tb := NewTable(100)
	l := tb.Acquire("x", Spec{Rate: 1, Burst: 1})
	for i := range 50 {
		l.Allow(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), int64(time.Hour))
	}
	n := 0
	tb.DrainKeys(func(string, SharedKey, uint32) { n++ })
	if st := tb.Stats(); n != 0 || st.Unshared != 0 {
		t.Fatalf("%d drained, stats %+v", n, st)
	}
}
