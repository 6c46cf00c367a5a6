package web

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// traffic is one host's observation at t0+sec with one load balancer's
// counters: ok 2xx and bad 5xx requests in total, active connections.
func traffic(node string, sec float64, lb string, ok, bad uint64, active int64, p99 float64) *pb.HostObservation {
	return &pb.HostObservation{
		NodeId: node, Reachable: true, Time: timestamppb.New(t0.Add(time.Duration(sec * float64(time.Second)))),
		Traffic: []*pb.TrafficObservation{{
			LoadBalancer: lb, Requests: map[string]uint64{"2xx": ok, "5xx": bad},
			ActiveConnections: active, P99Seconds: p99,
		}},
	}
}

func unreachable(node string) *pb.HostObservation {
	return &pb.HostObservation{NodeId: node, Error: "deadline exceeded"}
}

func observed(hosts ...*pb.HostObservation) *pb.ObserveResponse {
	return &pb.ObserveResponse{Hosts: hosts}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func last(t *testing.T, ps []Point) Point {
	t.Helper()
	if len(ps) == 0 {
		t.Fatal("no point")
	}
	return ps[len(ps)-1]
}

func TestChartRates(t *testing.T) {
	c := newCharter(chartPoints)
	c.add(observed(traffic("n1", 0, "acme/shop", 100, 0, 3, 0.01), traffic("n2", 0, "acme/shop", 50, 0, 1, 0.02)), t0)
	if ps := c.lbs["acme/shop"]; len(ps) != 0 {
		t.Fatalf("first observation is a baseline, got points %v", ps)
	}
	// In 2 s: n1 served 200 (20 of them 5xx), n2 60 (none 5xx).
	c.add(observed(traffic("n1", 2, "acme/shop", 280, 20, 5, 0.05), traffic("n2", 2, "acme/shop", 110, 0, 2, 0.02)), t0.Add(2*time.Second))
	p := last(t, c.lbs["acme/shop"])
	if !near(p.RPS, 130) || !near(p.Errors, 20.0/260) || p.Active != 7 || p.P99 != 0.05 || p.Hosts != 2 {
		t.Errorf("lb point = %+v, want 130 req/s, error share 20/260, 7 active, p99 0.05, 2 hosts", p)
	}
	if h := last(t, c.hosts["n1"]); !near(h.RPS, 100) || !near(h.Errors, 0.1) || h.Active != 5 {
		t.Errorf("host n1 point = %+v, want 100 req/s, 10%% errors, 5 active", h)
	}
	if h := last(t, c.hosts["n2"]); !near(h.RPS, 30) || h.Errors != 0 {
		t.Errorf("host n2 point = %+v, want 30 req/s, no errors", h)
	}
}

func TestChartHostRestart(t *testing.T) {
	c := newCharter(chartPoints)
	c.add(observed(traffic("n1", 0, "acme/shop", 1000, 10, 3, 0.01)), t0)
	// The host restarted: its counters start again at zero, 40 since.
	c.add(observed(traffic("n1", 1, "acme/shop", 40, 4, 1, 0.01)), t0.Add(time.Second))
	p := last(t, c.lbs["acme/shop"])
	if !near(p.RPS, 44) || !near(p.Errors, 4.0/44) {
		t.Errorf("after a restart = %+v, want the new counts as the delta (44 req/s, 4/44 errors), never a negative or wrapped rate", p)
	}
	// Then normal deltas again.
	c.add(observed(traffic("n1", 2, "acme/shop", 60, 4, 1, 0.01)), t0.Add(2*time.Second))
	if p := last(t, c.lbs["acme/shop"]); !near(p.RPS, 20) || p.Errors != 0 {
		t.Errorf("after the restart's baseline = %+v, want 20 req/s, no errors", p)
	}
}

func TestChartMissingHost(t *testing.T) {
	c := newCharter(chartPoints)
	c.add(observed(traffic("n1", 0, "acme/shop", 0, 0, 0, 0), traffic("n2", 0, "acme/shop", 0, 0, 0, 0)), t0)
	// n2 does not answer: the point has n1 alone.
	c.add(observed(traffic("n1", 1, "acme/shop", 10, 0, 0, 0), unreachable("n2")), t0.Add(time.Second))
	if p := last(t, c.lbs["acme/shop"]); !near(p.RPS, 10) || p.Hosts != 1 {
		t.Errorf("with n2 missing = %+v, want 10 req/s from 1 host", p)
	}
	if len(c.hosts["n2"]) != 1 {
		t.Errorf("n2 has points %v; want only the one of its first answer (none while unreachable)", c.hosts["n2"])
	}
	// n2 answers again: its rate is the average over the 3 s since its last answer.
	c.add(observed(traffic("n1", 3, "acme/shop", 30, 0, 0, 0), traffic("n2", 3, "acme/shop", 90, 0, 0, 0)), t0.Add(3*time.Second))
	if p := last(t, c.lbs["acme/shop"]); !near(p.RPS, 10+30) || p.Hosts != 2 {
		t.Errorf("n2 back = %+v, want 10 (n1) + 30 (n2's 90 over 3 s) req/s from 2 hosts", p)
	}
	// A host gone from the cluster loses its series.
	c.add(observed(traffic("n1", 4, "acme/shop", 40, 0, 0, 0)), t0.Add(4*time.Second))
	if _, ok := c.hosts["n2"]; ok {
		t.Error("n2 left the cluster but still has a series")
	}
	if _, ok := c.prev["n2"]; ok {
		t.Error("n2 left the cluster but its counters are kept")
	}
}

func TestChartBounds(t *testing.T) {
	c := newCharter(5)
	var hosts []*pb.HostObservation
	for i := range maxChartedLBs + 3 {
		h := traffic("n1", 0, "", 0, 0, 0, 0)
		h.Traffic[0].LoadBalancer = "t/lb" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		hosts = append(hosts, h)
	}
	merged := &pb.HostObservation{NodeId: "n1", Reachable: true}
	for _, h := range hosts {
		merged.Traffic = append(merged.Traffic, h.Traffic...)
	}
	for i := range 8 {
		merged.Time = timestamppb.New(t0.Add(time.Duration(i) * time.Second))
		for _, tr := range merged.Traffic {
			tr.Requests["2xx"] += 1
		}
		c.add(observed(merged), t0.Add(time.Duration(i)*time.Second))
	}
	if len(c.lbs) != maxChartedLBs || c.omit != 3 {
		t.Errorf("charted %d load balancers, omitted %d; want %d and 3", len(c.lbs), c.omit, maxChartedLBs)
	}
	for id, ps := range c.lbs {
		if len(ps) != 5 {
			t.Fatalf("%s has %d points, want the bound 5", id, len(ps))
		}
	}
	// A stream gets only the points after its last one, and every series.
	all := c.since(time.Time{})
	newest := all.latest(time.Time{})
	if !newest.Equal(t0.Add(7 * time.Second)) {
		t.Errorf("latest = %v", newest)
	}
	next := c.since(newest)
	if len(next.LBs) != maxChartedLBs || len(next.LBs["t/lbaa"]) != 0 {
		t.Errorf("since the newest: %d series, %d points in t/lbaa; want every series, no point", len(next.LBs), len(next.LBs["t/lbaa"]))
	}
	// A load balancer no host reports any more is dropped.
	merged.Traffic = merged.Traffic[:1]
	merged.Time = timestamppb.New(t0.Add(9 * time.Second))
	c.add(observed(merged), t0.Add(9*time.Second))
	if len(c.lbs) != 1 || c.omit != 0 {
		t.Errorf("after deletions: %d series, %d omitted; want 1 and 0", len(c.lbs), c.omit)
	}
}

func TestChartNewLBAndLoneHostDown(t *testing.T) {
	c := newCharter(chartPoints)
	idle := &pb.HostObservation{NodeId: "n1", Reachable: true, Time: timestamppb.New(t0)}
	c.add(observed(idle), t0)
	if ps, ok := c.hosts["n1"]; !ok || len(ps) != 1 || ps[0].RPS != 0 {
		t.Fatalf("a host without traffic charts zero: %v", ps)
	}
	// The load balancer's first requests on a host seen before count from zero.
	c.add(observed(traffic("n1", 2, "acme/shop", 30, 0, 1, 0.01)), t0.Add(2*time.Second))
	if p := last(t, c.lbs["acme/shop"]); !near(p.RPS, 15) {
		t.Errorf("first traffic of a new load balancer = %+v, want 15 req/s (30 over 2 s)", p)
	}
	// Its only host stops answering: the series stays, with no new point.
	c.add(observed(unreachable("n1")), t0.Add(3*time.Second))
	if ps, ok := c.lbs["acme/shop"]; !ok || len(ps) != 1 {
		t.Errorf("with its only host unreachable the series is %v (present %v); want the one point kept", ps, ok)
	}
	if ps := c.hosts["n1"]; len(ps) != 2 {
		t.Errorf("unreachable host's series = %v, want its 2 points kept", ps)
	}
}

// withLatency adds a latency histogram (bounds 10 ms, 100 ms, 1 s, then
// above) to the first traffic entry of h.
func withLatency(h *pb.HostObservation, counts ...uint64) *pb.HostObservation {
	h.Traffic[0].LatencyBounds = []float64{0.01, 0.1, 1}
	h.Traffic[0].LatencyCounts = counts
	return h
}

func TestChartP99FromBuckets(t *testing.T) {
	c := newCharter(chartPoints)
	// Since start, n1 had 1,000 slow requests (up to 1 s): its own p99 is 1 s.
	c.add(observed(withLatency(traffic("n1", 0, "acme/shop", 1000, 0, 0, 1), 0, 0, 1000, 0),
		withLatency(traffic("n2", 0, "acme/shop", 0, 0, 0, 0), 0, 0, 0, 0)), t0)
	// In this interval: n1 99 fast (up to 10 ms), n2 1 up to 100 ms.
	c.add(observed(withLatency(traffic("n1", 1, "acme/shop", 1099, 0, 0, 1), 99, 0, 1000, 0),
		withLatency(traffic("n2", 1, "acme/shop", 1, 0, 0, 0.1), 0, 1, 0, 0)), t0.Add(time.Second))
	if p := last(t, c.lbs["acme/shop"]); p.P99 != 0.01 {
		t.Errorf("p99 of the interval = %v, want 0.01 (99 of 100 requests up to 10 ms), not the hosts' since-start values", p.P99)
	}
	// Next interval: n2 alone, 10 requests, 1 of them above every bound.
	c.add(observed(withLatency(traffic("n1", 2, "acme/shop", 1099, 0, 0, 1), 99, 0, 1000, 0),
		withLatency(traffic("n2", 2, "acme/shop", 11, 0, 0, 1), 9, 1, 0, 1)), t0.Add(2*time.Second))
	if p := last(t, c.lbs["acme/shop"]); p.P99 != 1 {
		t.Errorf("p99 = %v, want 1 (the last bound: one of 10 above every bound)", p.P99)
	}
	// n2 restarted: its histogram starts again.
	c.add(observed(withLatency(traffic("n1", 3, "acme/shop", 1099, 0, 0, 1), 99, 0, 1000, 0),
		withLatency(traffic("n2", 3, "acme/shop", 5, 0, 0, 0.1), 0, 5, 0, 0)), t0.Add(3*time.Second))
	if p := last(t, c.lbs["acme/shop"]); p.P99 != 0.1 || !near(p.RPS, 5) {
		t.Errorf("after n2's restart = %+v, want p99 0.1 and 5 req/s from its new counters", p)
	}
	// No request in the interval: no latency to show.
	c.add(observed(withLatency(traffic("n1", 4, "acme/shop", 1099, 0, 0, 1), 99, 0, 1000, 0),
		withLatency(traffic("n2", 4, "acme/shop", 5, 0, 0, 0.1), 0, 5, 0, 0)), t0.Add(4*time.Second))
	if p := last(t, c.lbs["acme/shop"]); p.P99 != 0 {
		t.Errorf("p99 without requests = %v, want 0", p.P99)
	}
}

// TestChartL4Traffic: a TCP load balancer's connections per second and
// bytes per second each way are charted (summed over hosts), and a host's
// chart carries its CPU and memory.
func TestChartL4Traffic(t *testing.T) {
	t.Parallel()
	l4 := func(node string, sec float64, conns, in, out uint64) *pb.HostObservation {
		h := traffic(node, sec, "acme/db", conns, 0, 2, 0.001)
		tr := h.Traffic[0]
		tr.Connections, tr.BytesIn, tr.BytesOut = conns, in, out
		h.Resources = &pb.HostResources{Cpu: 0.25, MemoryBytes: 64 << 20}
		return h
	}
	c := newCharter(chartPoints)
	c.add(observed(l4("n1", 0, 10, 1000, 5000), l4("n2", 0, 0, 0, 0)), t0)
	// In 2 s: n1 took 20 connections, 4 MB in, 8 MB out; n2 10, 2 MB, 2 MB.
	c.add(observed(l4("n1", 2, 30, 4_001_000, 8_005_000), l4("n2", 2, 10, 2_000_000, 2_000_000)), t0.Add(2*time.Second))
	p := last(t, c.lbs["acme/db"])
	if !near(p.CPS, 15) || !near(p.BytesIn, 3_000_000) || !near(p.BytesOut, 5_000_000) {
		t.Errorf("lb point = %+v, want 15 conn/s, 3 MB/s in, 5 MB/s out", p)
	}
	if h := last(t, c.hosts["n1"]); !near(h.CPS, 10) || h.CPU != 0.25 || h.Memory != 64<<20 {
		t.Errorf("host n1 point = %+v, want 10 conn/s, CPU 0.25, 64 MiB", h)
	}
}
