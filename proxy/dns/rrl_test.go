package dns

import (
	"net/netip"
	"testing"
	"time"
)

func TestRRLRateAndSlip(t *testing.T) {
	t.Parallel()
	r := newRRL(5, 2)
	now := time.Unix(1000, 0)
	src := netip.MustParseAddr("198.51.100.7")
	res := Result{Kind: KindAnswer, Key: "shop.acme.example.", Qtype: 1}
	count := map[Verdict]int{}
	for range 100 {
		count[r.check(src, res, now)]++
	}
	// The rate's worth at once, then every second one truncated.
	if count[Send] != 5 || count[Slip] != 47 || count[Drop] != 48 {
		t.Fatalf("100 responses at once: %v, want 5 sent, 47 slipped, 48 dropped", count)
	}
	// Another address of the same /24 shares the limit; another /24 and
	// another name do not.
	if v := r.check(netip.MustParseAddr("198.51.100.8"), res, now); v == Send {
		t.Error("same /24 not limited")
	}
	if v := r.check(netip.MustParseAddr("198.51.101.8"), res, now); v != Send {
		t.Error("another /24 limited")
	}
	if v := r.check(src, Result{Kind: KindAnswer, Key: "www.acme.example.", Qtype: 1}, now); v != Send {
		t.Error("another name limited")
	}
	// A second later, the rate's worth again.
	now = now.Add(time.Second)
	sent := 0
	for range 20 {
		if r.check(src, res, now) == Send {
			sent++
		}
	}
	if sent != 5 {
		t.Fatalf("a second later %d sent, want 5", sent)
	}
	// NXDOMAIN answers count under the zone: random names share one limit.
	nx := 0
	for i := range 50 {
		if r.check(netip.MustParseAddr("203.0.113.1"), Result{Kind: KindNXDomain, Key: "acme.example."}, now) == Send {
			nx++
		}
		_ = i
	}
	if nx != 5 {
		t.Fatalf("%d NXDOMAIN sent, want 5", nx)
	}
}

func TestRRLOffAndIPv6Prefix(t *testing.T) {
	t.Parallel()
	var off *rrl = newRRL(-1, 2)
	if off.check(netip.MustParseAddr("192.0.2.1"), Result{}, time.Now()) != Send {
		t.Fatal("rrl off limited")
	}
	if got := prefixOf(netip.MustParseAddr("2001:db8:1:2ff:3::1")); got != netip.MustParseAddr("2001:db8:1:200::") {
		t.Fatalf("IPv6 prefix %s", got)
	}
}

func TestTenantBudgetBucket(t *testing.T) {
	t.Parallel()
	tb := newTenantBudget(10)
	now := time.Unix(1000, 0)
	n := 0
	for range 100 {
		if tb.allow("acme", now) {
			n++
		}
	}
	if n != 10 || !tb.allow("other", now) {
		t.Fatalf("acme allowed %d of 100, want 10; other tenants unaffected", n)
	}
}
