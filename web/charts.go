package web

import (
	"maps"
	"math"
	"slices"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of the live charts.
const (
	// chartPoints is the history kept per series (5 minutes at the
	// default 1 s interval).
	chartPoints = 300
	// maxChartedLBs bounds the load balancers charted (the first by
	// tenant/name); the others are counted in Charts.Omitted.
	maxChartedLBs = 100
	// maxChartedHosts bounds the hosts charted.
	maxChartedHosts = 64
)

// Point is one sample of a chart: rates over the interval since the
// previous sample of each host.
type Point struct {
	Time time.Time `json:"t"`
	// RPS is requests per second (L4: connects per second).
	RPS float64 `json:"rps"`
	// Errors is the share of requests answered 5xx (L4: failed connects),
	// 0..1; 0 when there were no requests.
	Errors float64 `json:"err"`
	// P99 is the 99th percentile latency of the interval in seconds (the
	// upper bound of its bucket), from the hosts' latency histograms; from
	// a host that sends none, the p99 it reports since it started.
	P99 float64 `json:"p99"`
	// Active is the connections open at the sample.
	Active int64 `json:"active"`
	// Hosts is how many hosts contributed to the point.
	Hosts int `json:"hosts"`
	// CPS is connections (TCP) or flows (UDP) accepted per second;
	// BytesIn and BytesOut the bytes per second from and to clients.
	CPS      float64 `json:"cps"`
	BytesIn  float64 `json:"bin"`
	BytesOut float64 `json:"bout"`
	// CPU (CPU seconds per second) and Memory (resident bytes) of the
	// host process: host series only, 0 when the host does not say.
	CPU    float64 `json:"cpu,omitempty"`
	Memory uint64  `json:"mem,omitempty"`
}

// Charts is the history of every series: per load balancer
// ("tenant/name") and per host.
type Charts struct {
	LBs   map[string][]Point `json:"lbs"`
	Hosts map[string][]Point `json:"hosts"`
	// Omitted is how many load balancers are not charted (over the bound).
	Omitted int `json:"omitted,omitempty"`
}

// counters is one host's counters for one load balancer at one time.
type counters struct {
	at       time.Time
	requests uint64
	errors   uint64
	// conns, bytesIn and bytesOut count connections accepted and bytes
	// from and to clients.
	conns, bytesIn, bytesOut uint64
	p99                      float64
	active                   int64
	// bounds and buckets are the latency histogram, when the host sends it.
	bounds  []float64
	buckets []uint64
}

// sample is one series' contribution from one host over one interval.
type sample struct {
	requests, errors         uint64
	conns, bytesIn, bytesOut uint64
	seconds                  float64
	p99                      float64
	active                   int64
	// bounds and buckets are the latency histogram of the interval (nil
	// when the host sends none).
	bounds  []float64
	buckets []uint64
}

// charter turns successive observations into chart points. It keeps the
// previous counters per host and load balancer.
type charter struct {
	prev map[string]map[string]counters // host -> lb -> counters
	// seen is the time of each host's last observation.
	seen   map[string]time.Time
	lbs    map[string][]Point
	hosts  map[string][]Point
	omit   int
	points int
}

func newCharter(points int) *charter {
	return &charter{prev: map[string]map[string]counters{}, seen: map[string]time.Time{}, lbs: map[string][]Point{}, hosts: map[string][]Point{}, points: points}
}

func trafficCounters(tr *pb.TrafficObservation, at time.Time) counters {
	c := counters{at: at, p99: tr.GetP99Seconds(), active: tr.GetActiveConnections(),
		conns: tr.GetConnections(), bytesIn: tr.GetBytesIn(), bytesOut: tr.GetBytesOut()}
	if b, n := tr.GetLatencyBounds(), tr.GetLatencyCounts(); len(b) > 0 && len(n) == len(b)+1 {
		c.bounds, c.buckets = b, n
	}
	for _, n := range tr.GetRequests() {
		c.requests += n
	}
	c.errors = tr.GetRequests()["5xx"]
	return c
}

// delta is what happened between prev and cur. A counter that went down
// means the host restarted (its counters start at zero): everything it
// counts now happened since, as Prometheus' rate() assumes.
func delta(prev, cur counters) (sample, bool) {
	secs := cur.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		return sample{}, false
	}
	s := sample{seconds: secs, p99: cur.p99, active: cur.active}
	reset := cur.requests < prev.requests || cur.errors < prev.errors ||
		cur.conns < prev.conns || cur.bytesIn < prev.bytesIn || cur.bytesOut < prev.bytesOut
	sameBuckets := cur.buckets != nil && slices.Equal(cur.bounds, prev.bounds)
	if sameBuckets {
		for i := range cur.buckets {
			reset = reset || cur.buckets[i] < prev.buckets[i]
		}
	}
	if reset {
		s.requests, s.errors = cur.requests, cur.errors
		s.conns, s.bytesIn, s.bytesOut = cur.conns, cur.bytesIn, cur.bytesOut
	} else {
		s.requests, s.errors = cur.requests-prev.requests, cur.errors-prev.errors
		s.conns, s.bytesIn, s.bytesOut = cur.conns-prev.conns, cur.bytesIn-prev.bytesIn, cur.bytesOut-prev.bytesOut
	}
	switch {
	case cur.buckets == nil:
	case reset || prev.buckets == nil:
		s.bounds, s.buckets = cur.bounds, cur.buckets
	case sameBuckets:
		s.bounds, s.buckets = cur.bounds, make([]uint64, len(cur.buckets))
		for i := range cur.buckets {
			s.buckets[i] = cur.buckets[i] - prev.buckets[i]
		}
	}
	return s, true
}

// add records one observation of every host at now. A host that did not
// answer, or that does not report a load balancer, adds nothing to its
// points; its previous counters are kept, so when it answers again its
// rate is the average over the whole gap.
func (c *charter) add(obs *pb.ObserveResponse, now time.Time) {
	lbSamples := map[string][]sample{}
	hostSamples := map[string][]sample{}
	hostRes := map[string]*pb.HostResources{}
	present := map[string]bool{}
	reached := map[string]bool{}
	for _, h := range obs.GetHosts() {
		id := h.GetNodeId()
		present[id] = true
		if !h.GetReachable() {
			continue
		}
		reached[id] = true
		hostRes[id] = h.GetResources()
		at := now
		if h.GetTime() != nil {
			at = h.GetTime().AsTime()
		}
		prev, seen := c.prev[id], c.seen[id]
		next := map[string]counters{}
		for _, tr := range h.GetTraffic() {
			lb := tr.GetLoadBalancer()
			cur := trafficCounters(tr, at)
			next[lb] = cur
			p, ok := prev[lb]
			switch {
			case !ok && seen.IsZero():
				// The host's first observation: a baseline.
				continue
			case !ok:
				// New on a host seen before: its counters began at zero
				// after that observation.
				p = counters{at: seen}
			}
			s, ok := delta(p, cur)
			if !ok {
				next[lb] = p
				continue
			}
			lbSamples[lb] = append(lbSamples[lb], s)
			hostSamples[id] = append(hostSamples[id], s)
		}
		c.prev[id] = next
		if at.After(seen) {
			c.seen[id] = at
		}
	}
	// Forget hosts that left the cluster's answer altogether.
	for id := range c.prev {
		if !present[id] {
			delete(c.prev, id)
			delete(c.seen, id)
		}
	}

	// The load balancers charted: those any host reports, or reported
	// before it stopped answering.
	known := map[string]bool{}
	for _, m := range c.prev {
		for lb := range m {
			known[lb] = true
		}
	}
	ids := slices.Sorted(maps.Keys(known))
	c.omit = max(0, len(ids)-maxChartedLBs)
	ids = ids[:min(len(ids), maxChartedLBs)]
	keep := map[string]bool{}
	for _, lb := range ids {
		keep[lb] = true
		if ss, ok := lbSamples[lb]; ok {
			c.lbs[lb] = appendPoint(c.lbs[lb], combine(ss, now), c.points)
		} else if _, ok := c.lbs[lb]; !ok {
			c.lbs[lb] = []Point{}
		}
	}
	for lb := range c.lbs {
		if !keep[lb] {
			delete(c.lbs, lb)
		}
	}
	// Every host that answered gets a point (zero without traffic); one
	// that did not keeps its series with a gap.
	hosts := slices.Sorted(maps.Keys(present))
	hosts = hosts[:min(len(hosts), maxChartedHosts)]
	keepHost := map[string]bool{}
	for _, id := range hosts {
		keepHost[id] = true
		if reached[id] {
			p := hostPoint(hostSamples[id], now)
			p.CPU, p.Memory = hostRes[id].GetCpu(), hostRes[id].GetMemoryBytes()
			c.hosts[id] = appendPoint(c.hosts[id], p, c.points)
		} else if _, ok := c.hosts[id]; !ok {
			c.hosts[id] = []Point{}
		}
	}
	for id := range c.hosts {
		if !keepHost[id] {
			delete(c.hosts, id)
		}
	}
}

// combine is one load balancer's point from each host's sample: rates
// add up, active connections add up; the p99 is that of the hosts'
// latency histograms of the interval added together, or, from hosts that
// send no histogram, the highest p99 they report.
func combine(ss []sample, now time.Time) Point {
	p := Point{Time: now, Hosts: len(ss)}
	var req, errs float64
	var bounds []float64
	var buckets []uint64
	for _, s := range ss {
		req += float64(s.requests) / s.seconds
		errs += float64(s.errors) / s.seconds
		p.CPS += float64(s.conns) / s.seconds
		p.BytesIn += float64(s.bytesIn) / s.seconds
		p.BytesOut += float64(s.bytesOut) / s.seconds
		p.Active += s.active
		switch {
		case s.buckets != nil && buckets == nil:
			bounds, buckets = s.bounds, slices.Clone(s.buckets)
		case s.buckets != nil && slices.Equal(bounds, s.bounds):
			for i := range buckets {
				buckets[i] += s.buckets[i]
			}
		default:
			p.P99 = max(p.P99, s.p99)
		}
	}
	if buckets != nil {
		p.P99 = max(p.P99, quantile(bounds, buckets, 0.99))
	}
	p.RPS = req
	if req > 0 {
		p.Errors = errs / req
	}
	return p
}

// hostPoint is one host's point from its load balancers' samples.
func hostPoint(ss []sample, now time.Time) Point {
	p := combine(ss, now)
	p.Hosts = 1
	return p
}

func appendPoint(ps []Point, p Point, n int) []Point {
	ps = append(ps, p)
	if len(ps) > n {
		ps = append([]Point(nil), ps[len(ps)-n:]...)
	}
	return ps
}

// since copies the charts with only the points after t (all of them for
// a zero t). Every charted series is present, possibly empty, so a
// browser can drop the series that are gone.
func (c *charter) since(t time.Time) *Charts {
	out := &Charts{LBs: map[string][]Point{}, Hosts: map[string][]Point{}, Omitted: c.omit}
	cp := func(dst map[string][]Point, src map[string][]Point) {
		for id, ps := range src {
			i := len(ps)
			for i > 0 && ps[i-1].Time.After(t) {
				i--
			}
			dst[id] = append([]Point{}, ps[i:]...)
		}
	}
	cp(out.LBs, c.lbs)
	cp(out.Hosts, c.hosts)
	return out
}

// latest is the newest point's time in c, or t if none is newer.
func (c *Charts) latest(t time.Time) time.Time {
	for _, m := range []map[string][]Point{c.LBs, c.Hosts} {
		for _, ps := range m {
			if n := len(ps); n > 0 && ps[n-1].Time.After(t) {
				t = ps[n-1].Time
			}
		}
	}
	return t
}

// quantile is the upper bound of the bucket holding quantile q (the last
// bound for the bucket above every bound), 0 without samples.
func quantile(bounds []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total == 0 || len(bounds) == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range counts {
		seen += n
		if seen >= want {
			return bounds[min(i, len(bounds)-1)]
		}
	}
	return bounds[len(bounds)-1]
}
