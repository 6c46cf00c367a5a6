package ratelimit

import (
	"net/netip"
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
// is refused while the keys held are live, and expired keys make room.
func TestTableBounded(t *testing.T) {
	t.Parallel()
	tb := NewTable(10)
	l := tb.Acquire("x", Spec{Rate: 1, Burst: 2})
	now := int64(time.Hour)
	for i := range 1000 {
		l.Allow(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), now)
	}
	st := tb.Stats()
	if st.Keys != 10 || st.Full != 990 {
		t.Fatalf("stats %+v, want 10 keys and 990 refused as full", st)
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
}
