package metrics

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

var t0 = time.Unix(1_800_000_000, 0)

// TestHistoryRates: each point of the ring is the rates of its interval
// (requests, errors, p99 of the interval's histogram, conn/s and bytes
// for an L4 load balancer), the host's series sums its load balancers,
// and a counter reset counts from zero.
func TestHistoryRates(t *testing.T) {
	t.Parallel()
	m := &Memory{}
	h := NewHistory(m)
	h.Sample(t0) // baseline
	// L7: 100 requests in 10 s, 10 of them 503, upstream 180 ms.
	for i := range 100 {
		status := 200
		if i < 10 {
			status = 503
		}
		m.Request(l7.RequestStats{LB: "acme/web", Listener: "l", Status: status, Duration: 180 * time.Millisecond,
			Upstream: 180 * time.Millisecond, Pool: "web", Member: netip.MustParseAddrPort("10.20.0.1:80")})
	}
	// L4: 20 connects, 2 of them failed, 5 MB in, 10 MB out.
	for i := range 20 {
		m.ConnOpened("acme/db", "tcp")
		status := statusConnected
		if i < 2 {
			status = 502
		}
		m.MemberRequest("acme/db", "db", "10.20.0.2:5432", status, time.Millisecond)
	}
	m.BytesIn("acme/db", "tcp", 5_000_000)
	m.BytesOut("acme/db", "tcp", 10_000_000)
	h.Sample(t0.Add(10 * time.Second))

	var o pb.HostObservation
	m.Observe(observe.Filter{}, &o)
	h.Observe(observe.Filter{History: true}, &o)
	series := map[string]*pb.HistorySeries{}
	for _, lb := range []string{"acme/web", "acme/db"} {
		var one pb.HostObservation
		h.Observe(observe.Filter{LB: lb, History: true}, &one)
		if len(one.History) != 2 || one.History[1].LoadBalancer != lb {
			t.Fatalf("history of %s: %v", lb, one.History)
		}
		series[lb] = one.History[1]
	}
	if len(o.History) != 1 {
		t.Fatalf("history without a load balancer selected: %v", o.History)
	}
	series[""] = o.History[0]
	web := series["acme/web"].Points[0]
	if web.RequestsPerSecond != 10 || !near(web.ErrorShare, 0.1) || !near(web.P99Seconds, 0.2) {
		t.Errorf("web point %v", web)
	}
	db := series["acme/db"].Points[0]
	if db.RequestsPerSecond != 2 || !near(db.ErrorShare, 0.1) || db.ConnectionsPerSecond != 2 || db.BytesInPerSecond != 500_000 ||
		db.BytesOutPerSecond != 1_000_000 || db.ActiveConnections != 20 {
		t.Errorf("db point %v", db)
	}
	host := series[""].Points[0]
	if host.RequestsPerSecond != 12 || host.ConnectionsPerSecond != 2 || !near(host.ErrorShare, 12.0/120) || !host.Time.AsTime().Equal(t0.Add(10*time.Second)) {
		t.Errorf("host point %v", host)
	}
	// Members: the busiest first, with their own p99 and error share.
	if w := o.Traffic[1]; w.LoadBalancer != "acme/web" || len(w.Members) != 1 || w.Members[0].RequestsPerSecond != 10 ||
		!near(w.Members[0].ErrorShare, 0.1) || !near(w.Members[0].P99Seconds, 0.2) || w.Members[0].IntervalSeconds != 10 {
		t.Errorf("web members %v", w)
	}
	if l := o.Traffic[1].Last; l.GetRequestsPerSecond() != 10 || !l.Time.AsTime().Equal(t0.Add(10*time.Second)) {
		t.Errorf("web's last interval %v", l)
	}
	if d := o.Traffic[0]; len(d.Members) != 1 || d.Members[0].RequestsPerSecond != 2 || !near(d.Members[0].ErrorShare, 0.1) {
		t.Errorf("db members %v", d)
	}

	// No traffic: a point of zeros; then a reset (the counters start
	// over) counts what came since.
	h.Sample(t0.Add(20 * time.Second))
	fresh := &Memory{}
	h.m = fresh
	for range 15 {
		fresh.MemberRequest("acme/db", "db", "10.20.0.2:5432", statusConnected, time.Millisecond)
	}
	h.Sample(t0.Add(30 * time.Second))
	o = pb.HostObservation{}
	h.Observe(observe.Filter{LB: "acme/db", History: true}, &o)
	if len(o.History) != 2 || o.History[1].LoadBalancer != "acme/db" {
		t.Fatalf("history of acme/db: %v", o.History)
	}
	pts := o.History[1].Points
	if len(pts) != 3 || pts[1].RequestsPerSecond != 0 || pts[2].RequestsPerSecond != 1.5 {
		t.Errorf("db points %v", pts)
	}
}

// TestHistoryBounds: a series keeps one hour at 10 s and no more; at
// most MaxHistoryLBs load balancers get a series (the rest are counted);
// at most MaxMemberTraffic members are reported per load balancer (the
// busiest; the rest counted); the ring's memory stays under its bound.
func TestHistoryBounds(t *testing.T) {
	t.Parallel()
	m := &Memory{}
	h := NewHistory(m)
	h.Sample(t0)
	// 1,000 members of one load balancer, one connect each, the last 100.
	for i := range 1000 {
		for range max(1, (i-998)*100) {
			m.MemberRequest("big/lb", "p", fmt.Sprintf("10.0.%d.%d:80", i/250, i%250), statusConnected, time.Millisecond)
		}
	}
	h.Sample(t0.Add(HistoryInterval))
	var o pb.HostObservation
	m.Observe(observe.Filter{LB: "big/lb"}, &o)
	h.Observe(observe.Filter{LB: "big/lb"}, &o)
	tr := o.Traffic[0]
	if len(tr.Members) != MaxMemberTraffic || tr.MembersOmitted != 1000-MaxMemberTraffic {
		t.Fatalf("%d members reported, %d omitted", len(tr.Members), tr.MembersOmitted)
	}
	if busiest := tr.Members[0]; busiest.Address != "10.0.3.249:80" || busiest.RequestsPerSecond != 10 {
		t.Errorf("busiest member %v", busiest)
	}
	// More than an hour (big/lb deleted: its members' counters would
	// only slow the test), then more load balancers than the ring keeps.
	m.Retain(func(lb string) bool { return lb != "big/lb" })
	m.ConnOpened("t/lb0000", "tcp")
	for i := 2; i <= HistoryPoints+3; i++ {
		h.Sample(t0.Add(time.Duration(i) * HistoryInterval))
	}
	for i := range MaxHistoryLBs + 10 {
		m.ConnOpened(fmt.Sprintf("t/lb%04d", i), "tcp")
	}
	h.Sample(t0.Add((HistoryPoints + 4) * HistoryInterval))
	h.Sample(t0.Add((HistoryPoints + 5) * HistoryInterval))
	o = pb.HostObservation{}
	h.Observe(observe.Filter{LB: "t/lb0000", History: true}, &o)
	if len(o.History) != 2 || len(o.History[1].Points) != HistoryPoints || len(o.History[0].Points) != HistoryPoints {
		t.Fatalf("history %d series", len(o.History))
	}
	pts := o.History[0].Points
	if first, last := pts[0].Time.AsTime(), pts[len(pts)-1].Time.AsTime(); last.Sub(first) != (HistoryPoints-1)*HistoryInterval ||
		!last.Equal(t0.Add((HistoryPoints+5)*HistoryInterval)) {
		t.Errorf("the ring spans %s to %s", first, last)
	}
	h.mu.Lock()
	n, omitted, used := len(h.lbs), h.omitted, h.bytes()
	h.mu.Unlock()
	if n != MaxHistoryLBs || omitted != 10 {
		t.Errorf("%d series, %d omitted; want %d and 10", n, omitted, MaxHistoryLBs)
	}
	if used > HistoryMaxBytes || HistoryMaxBytes > 8<<20 {
		t.Errorf("the ring holds %d bytes, bound %d (stated: at most 8 MiB)", used, HistoryMaxBytes)
	}
	if o.Resources.GetHistoryBytes() != uint64(used) || o.Resources.GetHistoryMaxBytes() != uint64(HistoryMaxBytes) {
		t.Errorf("resources %v", o.Resources)
	}
	// Without a load balancer selected, an answer carries the host's
	// series alone.
	o = pb.HostObservation{}
	h.Observe(observe.Filter{History: true}, &o)
	if len(o.History) != 1 || o.History[0].LoadBalancer != "" || o.HistoryOmitted != 10 {
		t.Errorf("%d series in one answer, %d omitted", len(o.History), o.HistoryOmitted)
	}
	// A load balancer deleted frees its series.
	m.Retain(func(lb string) bool { return lb == "t/lb0000" })
	h.Sample(t0.Add((HistoryPoints + 6) * HistoryInterval))
	h.mu.Lock()
	n = len(h.lbs)
	h.mu.Unlock()
	if n != 1 {
		t.Errorf("%d series after the others were deleted", n)
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

const statusConnected = 0 // proxy.StatusConnected
