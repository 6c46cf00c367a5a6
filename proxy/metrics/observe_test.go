package metrics

import (
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

func TestObserveTraffic(t *testing.T) {
	m := &Memory{}
	// L4: two connections, one still open; three connects, one failed.
	m.ConnOpened("acme/db", "192.0.2.1:5432/tcp")
	m.ConnOpened("acme/db", "192.0.2.1:5432/tcp")
	m.ConnClosed("acme/db", "192.0.2.1:5432/tcp", time.Second)
	m.BytesIn("acme/db", "192.0.2.1:5432/tcp", 100)
	m.BytesOut("acme/db", "192.0.2.1:5432/tcp", 300)
	m.MemberRequest("acme/db", "app", "10.20.0.1:5432", 0, time.Millisecond)
	m.MemberRequest("acme/db", "app", "10.20.0.1:5432", 0, time.Millisecond)
	m.MemberRequest("acme/db", "app", "10.20.0.2:5432", 502, 2*time.Millisecond)
	// L7: 99 fast 200s and one slow 503.
	m.ConnOpened("acme/web", "192.0.2.2:80/tcp")
	for range 99 {
		m.Request(l7.RequestStats{LB: "acme/web", Listener: "192.0.2.2:80/tcp", Status: 200, Duration: 3 * time.Millisecond})
		m.MemberRequest("acme/web", "web", "10.20.0.3:80", 200, 3*time.Millisecond)
	}
	m.Request(l7.RequestStats{LB: "acme/web", Listener: "192.0.2.2:80/tcp", Status: 503, Duration: 2 * time.Second, RequestBytes: 10, ResponseBytes: 700})
	m.ConnOpened("beta/x", "192.0.2.3:80/tcp")

	var h pb.HostObservation
	m.Observe(observe.Filter{Tenant: "acme"}, &h)
	if len(h.Traffic) != 2 {
		t.Fatalf("traffic %v", h.Traffic)
	}
	db, web := h.Traffic[0], h.Traffic[1]
	if db.LoadBalancer != "acme/db" || db.Connections != 2 || db.ActiveConnections != 1 || db.BytesIn != 100 || db.BytesOut != 300 ||
		db.Requests["2xx"] != 2 || db.Requests["5xx"] != 1 || db.P99Seconds != (2500*time.Microsecond).Seconds() {
		t.Errorf("L4: %v", db)
	}
	if web.Requests["2xx"] != 99 || web.Requests["5xx"] != 1 || web.Connections != 1 || web.P99Seconds != (5*time.Millisecond).Seconds() ||
		web.BytesIn != 10 || web.BytesOut != 700 {
		t.Errorf("L7 (member requests must not count twice): %v", web)
	}
	// The histogram behind the p99: 99 requests up to 5 ms, one up to 2.5 s.
	if len(web.LatencyBounds) != len(Buckets) || len(web.LatencyCounts) != len(Buckets)+1 {
		t.Fatalf("histogram: %d bounds, %d counts; want %d and %d", len(web.LatencyBounds), len(web.LatencyCounts), len(Buckets), len(Buckets)+1)
	}
	var total uint64
	for i, n := range web.LatencyCounts {
		total += n
		if b := web.LatencyBounds[min(i, len(Buckets)-1)]; (b == 0.005 && n != 99) || (b == 2.5 && n != 1) {
			t.Errorf("bucket up to %gs counts %d", b, n)
		}
	}
	if total != 100 {
		t.Errorf("histogram counts %d requests, want 100", total)
	}
	if q := Quantile(HistogramValues{}, 0.99); q != 0 {
		t.Errorf("quantile of nothing: %s", q)
	}
}
