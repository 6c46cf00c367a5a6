package metrics

import (
	"slices"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var _ observe.Source = (*Memory)(nil)

// Observe adds per load balancer traffic counters to h for the load
// balancers f selects: requests by code class (L7 requests; for L4 the
// connects, 2xx connected and 5xx failed), active and total connections,
// bytes each way, and the 99th percentile of request (L7) or connect (L4)
// latency.
func (m *Memory) Observe(f observe.Filter, h *pb.HostObservation) {
	byLB := m.totals(f.MatchLB)
	lbs := make([]string, 0, len(byLB))
	for lb := range byLB {
		lbs = append(lbs, lb)
	}
	slices.Sort(lbs)
	for _, lb := range lbs {
		a := byLB[lb]
		a.t.P99Seconds = Quantile(a.latency, 0.99).Seconds()
		if a.latency.Counts != nil {
			a.t.LatencyBounds = make([]float64, len(Buckets))
			for i, b := range Buckets {
				a.t.LatencyBounds[i] = b.Seconds()
			}
			a.t.LatencyCounts = a.latency.Counts
		}
		h.Traffic = append(h.Traffic, a.t)
	}
}

// lbTotals is one load balancer's counters since the host started.
type lbTotals struct {
	t       *pb.TrafficObservation
	http    bool
	latency HistogramValues
}

// totals adds up the counters of the load balancers match selects.
func (m *Memory) totals(match func(lb string) bool) map[string]*lbTotals {
	byLB := map[string]*lbTotals{}
	get := func(lb string) *lbTotals {
		a := byLB[lb]
		if a == nil {
			a = &lbTotals{t: &pb.TrafficObservation{LoadBalancer: lb, Requests: map[string]uint64{}}}
			byLB[lb] = a
		}
		return a
	}
	r := m.Report()
	for _, l := range r.Listeners {
		if !match(l.LB) {
			continue
		}
		a := get(l.LB)
		a.t.Connections += uint64(l.Opened)
		a.t.ActiveConnections += l.Opened - l.Closed
		a.t.BytesIn += uint64(l.BytesIn)
		a.t.BytesOut += uint64(l.BytesOut)
	}
	hs, _ := m.HTTP()
	for _, s := range hs {
		if !match(s.LB) {
			continue
		}
		a := get(s.LB)
		a.http = true
		a.t.BytesIn += uint64(s.RequestBytes)
		a.t.BytesOut += uint64(s.ResponseBytes)
		for i, n := range s.ByClass {
			if i > 0 && n > 0 {
				a.t.Requests[ClassNames[i]] += uint64(n)
			}
		}
		a.latency = addHistograms(a.latency, s.Latency)
	}
	for _, s := range r.Members {
		if !match(s.LB) || get(s.LB).http {
			continue
		}
		a := get(s.LB)
		for status, n := range s.ByStatus {
			switch {
			case status == 0:
				a.t.Requests["2xx"] += uint64(n)
			case status >= 100 && status < 600:
				a.t.Requests[ClassNames[status/100]] += uint64(n)
			}
		}
		a.latency = addHistograms(a.latency, s.Latency)
	}
	return byLB
}

func addHistograms(a, b HistogramValues) HistogramValues {
	if a.Counts == nil {
		a.Counts = make([]uint64, len(b.Counts))
	}
	for i := range b.Counts {
		a.Counts[i] += b.Counts[i]
	}
	a.Count += b.Count
	a.Sum += b.Sum
	return a
}

// Quantile returns the upper bound of the bucket holding quantile q of h
// (the last bound for the unbounded bucket), 0 without samples.
func Quantile(h HistogramValues, q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	want := uint64(q*float64(h.Count) + 0.999999)
	var seen uint64
	for i, n := range h.Counts {
		seen += n
		if seen >= want {
			return Buckets[min(i, len(Buckets)-1)]
		}
	}
	return Buckets[len(Buckets)-1]
}
