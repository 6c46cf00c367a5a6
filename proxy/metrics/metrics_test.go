package metrics

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

func TestMemoryReport(t *testing.T) {
	var m Memory
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				m.ConnOpened("acme/shop", "192.0.2.1:80/tcp")
				m.BytesIn("acme/shop", "192.0.2.1:80/tcp", 10)
				m.BytesOut("acme/shop", "192.0.2.1:80/tcp", 20)
				m.ConnClosed("acme/shop", "192.0.2.1:80/tcp", 3*time.Millisecond)
				m.MemberRequest("acme/shop", "web", "10.0.0.1:80", 200, 700*time.Microsecond)
			}
		})
	}
	wg.Wait()
	m.ConnRefused("acme/shop", "192.0.2.1:80/tcp", "no-member")
	m.MemberRequest("acme/shop", "web", "10.0.0.1:80", 502, 2*time.Minute)
	m.RouteRequest("acme/shop", "routes[0]", 404, time.Millisecond)
	r := m.Report()
	if len(r.Listeners) != 1 || len(r.Members) != 1 || len(r.Routes) != 1 {
		t.Fatalf("report %+v", r)
	}
	l := r.Listeners[0]
	tests := []struct {
		name      string
		got, want int64
	}{
		{"opened", l.Opened, 400},
		{"closed", l.Closed, 400},
		{"bytes in", l.BytesIn, 4000},
		{"bytes out", l.BytesOut, 8000},
		{"refused", l.Refused["no-member"], 1},
		{"duration count", int64(l.Duration.Count), 400},
		{"duration bucket 5ms", int64(l.Duration.Counts[3]), 400},
		{"member 200", r.Members[0].ByStatus[200], 400},
		{"member 502", r.Members[0].ByStatus[502], 1},
		{"member latency up to 1ms", int64(r.Members[0].Latency.Counts[1]), 400},
		{"member latency overflow", int64(r.Members[0].Latency.Counts[len(Buckets)]), 1},
		{"route 404", r.Routes[0].ByStatus[404], 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %d, want %d", tt.got, tt.want)
			}
		})
	}
}

func TestMemoryRetain(t *testing.T) {
	var m Memory
	for _, lb := range []string{"acme/a", "acme/b"} {
		m.ConnOpened(lb, "192.0.2.1:80/tcp")
		m.MemberRequest(lb, "web", "10.0.0.1:80", 200, time.Millisecond)
		m.RouteRequest(lb, "routes[0]", 200, time.Millisecond)
	}
	m.Retain(func(lb string) bool { return lb == "acme/a" })
	r := m.Report()
	if len(r.Listeners) != 1 || r.Listeners[0].LB != "acme/a" || len(r.Members) != 1 || len(r.Routes) != 1 {
		t.Fatalf("after Retain(acme/a): %+v", r)
	}
	m.ConnOpened("acme/b", "192.0.2.1:80/tcp")
	if r := m.Report(); len(r.Listeners) != 2 || r.Listeners[1].Opened != 1 {
		t.Fatalf("a load balancer served again should start from zero: %+v", r.Listeners)
	}
}

// TestBucketsResolveWebLatencies: between 50 ms and 1.5 s a p99 is read
// from a bucket at most 1.5 times the true value (a 180 ms p99 is 0.2 s,
// not the 0.25 s of the coarser buckets before), and the histogram's
// counts match the bounds.
func TestBucketsResolveWebLatencies(t *testing.T) {
	t.Parallel()
	if len(Buckets)+1 != numBuckets {
		t.Fatalf("%d bounds need %d counts, histograms keep %d", len(Buckets), len(Buckets)+1, numBuckets)
	}
	for i := 1; i < len(Buckets); i++ {
		if lo, hi := Buckets[i-1], Buckets[i]; lo >= 50*time.Millisecond && hi <= 1500*time.Millisecond && float64(hi) > 1.5*float64(lo) {
			t.Errorf("bounds %s and %s are more than 1.5 times apart", lo, hi)
		}
	}
	for _, tc := range []struct{ took, p99 time.Duration }{
		{60 * time.Millisecond, 75 * time.Millisecond},
		{120 * time.Millisecond, 150 * time.Millisecond},
		{180 * time.Millisecond, 200 * time.Millisecond},
		{350 * time.Millisecond, 400 * time.Millisecond},
		{600 * time.Millisecond, 750 * time.Millisecond},
		{1200 * time.Millisecond, 1500 * time.Millisecond},
	} {
		var m Memory
		for range 100 {
			m.MemberRequest("acme/shop", "web", "10.0.0.1:80", 200, tc.took)
		}
		if got := Quantile(m.Report().Members[0].Latency, 0.99); got != tc.p99 {
			t.Errorf("p99 of %s: %s, want %s", tc.took, got, tc.p99)
		}
	}
}

// A request its tenant's HTTP/2 body bound reset is counted on its
// listener as a tenant-bodies refusal; other requests are not.
func TestBodyLimitCountedAsRefusal(t *testing.T) {
	m := &Memory{}
	m.Request(l7.RequestStats{LB: "acme/web", Listener: "192.0.2.2:443/tcp", Status: 200, Outcome: l7.OutcomeOK})
	m.Request(l7.RequestStats{LB: "acme/web", Listener: "192.0.2.2:443/tcp", Outcome: l7.OutcomeBodyLimit})
	m.Request(l7.RequestStats{LB: "acme/web", Listener: "192.0.2.2:443/tcp", Outcome: l7.OutcomeBodyLimit})
	var got int64
	for _, l := range m.Report().Listeners {
		got += l.Refused[ReasonTenantBodies]
	}
	if got != 2 {
		t.Errorf("%s refusals: %d, want 2", ReasonTenantBodies, got)
	}
	var out strings.Builder
	if err := NewCollector(m, CollectorConfig{}).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := `reason="tenant-bodies"`; !strings.Contains(out.String(), want) {
		t.Errorf("the exposition has no %s:\n%s", want, out.String())
	}
}
