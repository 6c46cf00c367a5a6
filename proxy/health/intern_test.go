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
