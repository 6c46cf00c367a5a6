package health

import (
	"net/netip"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// TestTargetsShareOneCopyOfACheck: targets of equal checks (from different
// pools and snapshots) hold one copy of the check between them, and the
// copy goes with the last target, so a target's key stays small at a
// million members.
func TestTargetsShareOneCopyOfACheck(t *testing.T) {
	r := NewRegistry(Options{})
	defer r.Close()
	check := func() *snapshot.HealthCheck {
		return &snapshot.HealthCheck{HTTP: true, Path: "/healthz", Interval: time.Hour, Timeout: time.Second, Rise: 2, Fall: 3}
	}
	// Loopback addresses: a first check, if one runs, stays on this machine.
	a := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.1:80"), check())
	b := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.2:80"), check())
	again := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.1:80"), check())
	passive := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.3:80"), nil)
	if again != a {
		t.Fatal("an equal check of the same member made a second target")
	}
	if a.key.check != b.key.check || len(r.checks) != 1 {
		t.Fatalf("two targets of one check hold %d copies", len(r.checks))
	}
	if passive.key.check != nil {
		t.Fatal("a target without a check holds one")
	}
	for _, tg := range []*Target{a, again, b} {
		r.Release(tg)
	}
	if len(r.checks) != 0 {
		t.Errorf("%d checks kept after their last target went", len(r.checks))
	}
	r.Release(passive)
	if r.Len() != 0 {
		t.Errorf("%d targets left", r.Len())
	}
}

// TestTargetsAtOneAddress: targets of one address under other tenants and
// checks are distinct, found again by their own key, all marked by
// ChangeSelf, and each released alone (first, middle or last of the
// address) leaves the others in place.
func TestTargetsAtOneAddress(t *testing.T) {
	r := NewRegistry(Options{})
	defer r.Close()
	addr := netip.MustParseAddrPort("127.0.0.1:80")
	mapped := netip.MustParseAddrPort("[::ffff:127.0.0.1]:80")
	check := &snapshot.HealthCheck{Interval: time.Hour, Timeout: time.Second, Rise: 1, Fall: 1}
	acquire := func() []*Target {
		return []*Target{
			r.AcquireFor("acme", addr, nil),
			r.AcquireFor("globex", addr, nil),
			r.AcquireFor("acme", addr, check),
			r.AcquireFor("acme", mapped, nil),
		}
	}
	ts := acquire()
	for i, a := range ts {
		for j, b := range ts[:i] {
			if a == b {
				t.Fatalf("targets %d and %d are one", j, i)
			}
		}
	}
	if r.Len() != 4 {
		t.Fatalf("%d targets, want 4", r.Len())
	}
	for i, again := range acquire() {
		if again != ts[i] {
			t.Fatalf("target %d acquired again is another", i)
		}
		r.Release(again)
	}
	r.ChangeSelf([]netip.AddrPort{addr}, nil)
	for i, tg := range ts {
		if tg.Healthy() || !tg.Status().Self {
			t.Errorf("target %d at a listened address is healthy", i)
		}
	}
	r.ChangeSelf(nil, []netip.AddrPort{addr})
	released := map[int]bool{}
	for _, i := range []int{1, 3, 0, 2} {
		r.Release(ts[i])
		released[i] = true
		for j, tg := range ts {
			if released[j] {
				continue
			}
			got := r.AcquireFor(tg.budget.tenant, tg.key.addr, tg.key.check)
			r.Release(got)
			if got != tg {
				t.Fatalf("after releasing %d, target %d acquired again is another", i, j)
			}
		}
	}
	if r.Len() != 0 || len(r.targets) != 0 {
		t.Errorf("%d targets (%d addresses) left", r.Len(), len(r.targets))
	}
}
