package accesslog

import (
	"fmt"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestTenantFloodDropsOnlyItsLines: tenant b floods ten load balancers
// within one second while tenant a logs 20 requests in that second: a's
// lines are all written, b's beyond its tenant budget are dropped and
// counted against b.
func TestTenantFloodDropsOnlyItsLines(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(Config{Out: &out, Now: func() time.Time { return now }})
	for i := range 1000 {
		for lb := range 10 {
			l.Request(l7.RequestStats{LB: fmt.Sprintf("b/lb%d", lb), Tenant: "b", Status: 200, AccessLog: 1})
		}
		if i%50 == 0 {
			l.Request(l7.RequestStats{LB: "a/shop", Tenant: "a", Status: 200, AccessLog: 1})
		}
		now = now.Add(time.Millisecond / 2) // all within one second
	}
	var a, b int
	for _, ln := range out.lines(t) {
		switch ln.Tenant {
		case "a":
			a++
		case "b":
			b++
		}
	}
	if a != 20 {
		t.Errorf("tenant a: %d of its 20 lines written", a)
	}
	if max := int(2*DefaultPerTenant + DefaultPerTenant/2 + 1); b > max {
		t.Errorf("tenant b: %d lines written, its budget allows %d", b, max)
	}
	d := l.Dropped()
	if d["a"] != 0 || d["b"] != int64(10000-b) {
		t.Errorf("dropped by tenant %v, want b's %d only", d, 10000-b)
	}
	t.Logf("tenant a: %d lines; tenant b: %d written, %d dropped", a, b, d["b"])
}

// TestHostBudgetSharedFairly: with more tenants at their budget than the
// host's bound allows, a tenant below its fair share of the host's lines
// still has its lines written, and the host writes at most twice its
// bound in a second.
func TestHostBudgetSharedFairly(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(Config{Out: &out, PerLB: 1000, PerTenant: 100, PerHost: 500, Now: func() time.Time { return now }})
	for i := range 400 {
		for tn := range 20 {
			l.Request(l7.RequestStats{LB: fmt.Sprintf("t%d/lb", tn), Tenant: fmt.Sprintf("t%d", tn), Status: 200, AccessLog: 1})
		}
		if i >= 200 && i%10 == 0 { // after the flood took the host's bound
			l.Request(l7.RequestStats{LB: "a/shop", Tenant: "a", Status: 200, AccessLog: 1})
		}
		now = now.Add(time.Millisecond)
	}
	lines := out.lines(t)
	a := 0
	for _, ln := range lines {
		if ln.Tenant == "a" {
			a++
		}
	}
	if a != 20 {
		t.Errorf("tenant a: %d of its 20 lines written under a flood of 20 tenants", a)
	}
	if len(lines) > 2*500 {
		t.Errorf("%d lines in one second, host bound 500", len(lines))
	}
	if d := l.Dropped(); d["a"] != 0 || d["t0"] == 0 {
		t.Errorf("dropped by tenant %v", d)
	}
}
