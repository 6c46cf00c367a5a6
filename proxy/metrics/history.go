package metrics

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of the history ring.
const (
	// HistoryInterval is the resolution of the ring. Samples are taken on
	// multiples of it in Unix time, so the points of every host line up.
	HistoryInterval = 10 * time.Second
	// HistoryPoints is the points kept per series: one hour.
	HistoryPoints = 360
	// MaxHistoryLBs bounds the load balancers the ring keeps a series for
	// (the first to carry traffic; the others are counted as omitted
	// until a series is freed by a load balancer that goes away).
	MaxHistoryLBs = 256
	// MaxMemberTraffic bounds the members reported per load balancer (the
	// busiest of the last interval).
	MaxMemberTraffic = 64
)

// histPoint is one interval of one series. It is kept small: the ring
// holds up to (MaxHistoryLBs+1) × HistoryPoints of them.
type histPoint struct {
	unix                int64
	rps, errShare, p99  float32
	cps, bytesIn, bytes float32
	cpu                 float32
	active              int32
	memory              uint64
}

// HistoryMaxBytes is the most the ring's points take.
const HistoryMaxBytes = (MaxHistoryLBs + 1) * HistoryPoints * int(unsafe.Sizeof(histPoint{}))

// ring is a series of at most HistoryPoints points, oldest first.
type ring struct {
	pts  []histPoint
	next int // where the next point goes once full
}

func (r *ring) add(p histPoint) {
	if r.pts == nil {
		r.pts = make([]histPoint, 0, HistoryPoints)
	}
	if len(r.pts) < HistoryPoints {
		r.pts = append(r.pts, p)
		return
	}
	r.pts[r.next] = p
	r.next = (r.next + 1) % HistoryPoints
}

// each calls f for every point, oldest first.
func (r *ring) each(f func(histPoint)) {
	for i := range r.pts {
		f(r.pts[(r.next+i)%len(r.pts)])
	}
}

// prevLB is one load balancer's counters at the last sample.
type prevLB struct {
	requests, errors, conns, bytesIn, bytesOut uint64
	latency                                    []uint64
}

type memberKey3 struct{ lb, pool, addr string }

type prevMember struct {
	requests, errors uint64
	latency          []uint64
}

// History samples a Memory every HistoryInterval into a bounded ring per
// load balancer and one for the host (all its load balancers together,
// with the process's CPU and memory), and keeps the last interval's
// rates of every member. It is an observe.Source: it adds the members'
// rates to the traffic Memory.Observe reported, the host's resources,
// and, when asked, the ring.
type History struct {
	m    *Memory
	proc *procReader

	mu      sync.Mutex
	host    ring
	lbs     map[string]*ring
	omitted int
	prev    map[string]prevLB
	prevM   map[memberKey3]prevMember
	// lastLB is every load balancer's last point, ringed or not.
	lastLB    map[string]histPoint
	members   map[string][]*pb.MemberTraffic // lb -> busiest first, at most MaxMemberTraffic
	memberOut map[string]int                 // lb -> members left out
	last      time.Time
}

// NewHistory returns the history of m. Call Run to sample it.
func NewHistory(m *Memory) *History {
	return &History{m: m, proc: newProcReader(), lbs: map[string]*ring{}, prev: map[string]prevLB{},
		prevM: map[memberKey3]prevMember{}, lastLB: map[string]histPoint{}, members: map[string][]*pb.MemberTraffic{}, memberOut: map[string]int{}}
}

// Run samples every HistoryInterval, on its multiples, until ctx ends.
func (h *History) Run(ctx context.Context) {
	h.Sample(time.Now())
	for {
		now := time.Now()
		wait := now.Truncate(HistoryInterval).Add(HistoryInterval).Sub(now)
		select {
		case <-ctx.Done():
			return
		case t := <-time.After(wait):
			h.Sample(t.Truncate(time.Second))
		}
	}
}

// delta is cur-prev, or cur when the counter went down (it was reset).
func delta(cur, prev uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func deltas(cur, prev []uint64) []uint64 {
	if len(cur) != numBuckets {
		return nil
	}
	out := make([]uint64, len(cur))
	for i := range cur {
		if i < len(prev) && len(prev) == len(cur) {
			out[i] = delta(cur[i], prev[i])
		} else {
			out[i] = cur[i]
		}
	}
	return out
}

func p99Of(counts []uint64) float64 {
	var v HistogramValues
	v.Counts = counts
	for _, n := range counts {
		v.Count += n
	}
	if len(counts) != len(Buckets)+1 {
		return 0
	}
	return Quantile(v, 0.99).Seconds()
}

// Sample takes one sample at now: the rates since the previous one. The
// first sample is a baseline and adds no point.
func (h *History) Sample(now time.Time) {
	byLB := h.m.Totals()
	members := h.m.memberTotals()
	cpu, mem := h.proc.sample(now)
	h.mu.Lock()
	defer h.mu.Unlock()
	secs := now.Sub(h.last).Seconds()
	first := h.last.IsZero() || secs <= 0
	h.last = now

	var hostPt histPoint
	hostPt.unix = now.Unix()
	hostPt.cpu, hostPt.memory = float32(cpu), mem
	var hostErrors float64
	var hostLatency []uint64
	next := make(map[string]prevLB, len(byLB))
	for lb, a := range byLB {
		cur := prevLB{conns: a.t.Connections, bytesIn: a.t.BytesIn, bytesOut: a.t.BytesOut, latency: a.latency.Counts}
		for _, n := range a.t.Requests {
			cur.requests += n
		}
		cur.errors = a.t.Requests["5xx"]
		next[lb] = cur
		if first {
			continue
		}
		p := h.prev[lb] // a load balancer new since: its counters started at zero
		req := float64(delta(cur.requests, p.requests))
		errs := float64(delta(cur.errors, p.errors))
		lat := deltas(cur.latency, p.latency)
		pt := histPoint{unix: now.Unix(), rps: float32(req / secs),
			cps: float32(float64(delta(cur.conns, p.conns)) / secs), bytesIn: float32(float64(delta(cur.bytesIn, p.bytesIn)) / secs),
			bytes: float32(float64(delta(cur.bytesOut, p.bytesOut)) / secs), active: int32(a.t.ActiveConnections), p99: float32(p99Of(lat))}
		if req > 0 {
			pt.errShare = float32(errs / req)
		}
		h.lastLB[lb] = pt
		hostPt.rps += pt.rps
		hostPt.cps += pt.cps
		hostPt.bytesIn += pt.bytesIn
		hostPt.bytes += pt.bytes
		hostPt.active += pt.active
		hostErrors += errs
		if lat != nil {
			if hostLatency == nil {
				hostLatency = make([]uint64, numBuckets)
			}
			for i := range lat {
				hostLatency[i] += lat[i]
			}
		}
		r := h.lbs[lb]
		if r == nil {
			if len(h.lbs) >= MaxHistoryLBs {
				continue
			}
			r = &ring{}
			h.lbs[lb] = r
		}
		r.add(pt)
	}
	// Forget load balancers gone from the counters (deleted).
	for lb := range h.lbs {
		if _, ok := byLB[lb]; !ok {
			delete(h.lbs, lb)
		}
	}
	for lb := range h.lastLB {
		if _, ok := byLB[lb]; !ok {
			delete(h.lastLB, lb)
		}
	}
	h.omitted = max(0, len(byLB)-len(h.lbs))
	h.prev = next
	if first {
		h.prevM = h.memberRates(members, nil, 0, now)
		return
	}
	if hostPt.rps > 0 {
		hostPt.errShare = float32(hostErrors / (float64(hostPt.rps) * secs))
	}
	hostPt.p99 = float32(p99Of(hostLatency))
	h.host.add(hostPt)
	h.prevM = h.memberRates(members, h.prevM, secs, now)
}

// memberRates computes the members' rates since prev (under h.mu) and
// returns their counters as the next prev.
func (h *History) memberRates(cur map[memberKey3]prevMember, prev map[memberKey3]prevMember, secs float64, now time.Time) map[memberKey3]prevMember {
	clear(h.members)
	clear(h.memberOut)
	if prev == nil {
		return cur
	}
	for k, c := range cur {
		p := prev[k]
		req := float64(delta(c.requests, p.requests))
		mt := &pb.MemberTraffic{Pool: k.pool, Address: k.addr, RequestsPerSecond: req / secs, Requests: c.requests, Errors: c.errors,
			P99Seconds: p99Of(deltas(c.latency, p.latency)), Time: timestamppb.New(now), IntervalSeconds: uint32(secs + 0.5)}
		if req > 0 {
			mt.ErrorShare = float64(delta(c.errors, p.errors)) / req
		}
		h.members[k.lb] = append(h.members[k.lb], mt)
	}
	for lb, ms := range h.members {
		slices.SortFunc(ms, func(a, b *pb.MemberTraffic) int {
			return cmp.Or(cmp.Compare(b.RequestsPerSecond, a.RequestsPerSecond), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Address, b.Address))
		})
		if len(ms) > MaxMemberTraffic {
			h.memberOut[lb] = len(ms) - MaxMemberTraffic
			h.members[lb] = slices.Clip(ms[:MaxMemberTraffic])
		}
	}
	return cur
}

// memberTotals is every member's counters: L7 requests and failures
// with their upstream latency, L4 connects (failed ones as errors) with
// their connect latency.
func (m *Memory) memberTotals() map[memberKey3]prevMember {
	out := map[memberKey3]prevMember{}
	_, hms := m.HTTP()
	for _, s := range hms {
		out[memberKey3{s.LB, s.Pool, s.Member.String()}] = prevMember{requests: uint64(s.Requests), errors: uint64(s.Failures), latency: s.Latency.Counts}
	}
	for _, s := range m.Report().Members {
		k := memberKey3{s.LB, s.Pool, s.Name}
		if _, ok := out[k]; ok {
			continue
		}
		var p prevMember
		for status, n := range s.ByStatus {
			p.requests += uint64(n)
			if status >= 500 {
				p.errors += uint64(n)
			}
		}
		p.latency = s.Latency.Counts
		out[k] = p
	}
	return out
}

// Totals is every load balancer's counters since the host started.
func (m *Memory) Totals() map[string]*lbTotals {
	return m.totals(func(string) bool { return true })
}

func (p histPoint) proto() *pb.HistoryPoint {
	return &pb.HistoryPoint{Time: timestamppb.New(time.Unix(p.unix, 0)), RequestsPerSecond: float64(p.rps), ErrorShare: float64(p.errShare),
		P99Seconds: float64(p.p99), ActiveConnections: int64(p.active), ConnectionsPerSecond: float64(p.cps),
		BytesInPerSecond: float64(p.bytesIn), BytesOutPerSecond: float64(p.bytes), Cpu: float64(p.cpu), MemoryBytes: p.memory}
}

func (r *ring) proto(lb string) *pb.HistorySeries {
	s := &pb.HistorySeries{LoadBalancer: lb, IntervalSeconds: uint32(HistoryInterval / time.Second), Points: make([]*pb.HistoryPoint, 0, len(r.pts))}
	r.each(func(p histPoint) { s.Points = append(s.Points, p.proto()) })
	return s
}

// bytes is what the ring's points take now.
func (h *History) bytes() int {
	n := cap(h.host.pts)
	for _, r := range h.lbs {
		n += cap(r.pts)
	}
	return n * int(unsafe.Sizeof(histPoint{}))
}

var _ observe.Source = (*History)(nil)

// Observe adds, to the traffic Memory.Observe reported, each load
// balancer's busiest members' rates of the last interval; the host's
// resources; and, when f asks for it, the ring: the host's series and

// when f selects more than one).
func (h *History) Observe(f observe.Filter, o *pb.HostObservation) {
	res := h.proc.resources()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range o.Traffic {
		t.Members = h.members[t.GetLoadBalancer()]
		t.MembersOmitted = uint32(h.memberOut[t.GetLoadBalancer()])
		if p, ok := h.lastLB[t.GetLoadBalancer()]; ok {
			t.Last = p.proto()
		}
	}
	if o.Resources == nil {
		o.Resources = &pb.HostResources{}
	}
	r := o.Resources
	r.Time, r.Cpu, r.Cpus, r.MemoryBytes, r.OpenDescriptors, r.DescriptorLimit, r.Goroutines =
		res.Time, res.Cpu, res.Cpus, res.MemoryBytes, res.OpenDescriptors, res.DescriptorLimit, res.Goroutines
	r.HistoryBytes, r.HistoryMaxBytes = uint64(h.bytes()), uint64(HistoryMaxBytes)
	if !f.History {
		return
	}
	o.History = append(o.History, h.host.proto(""))
	if r := h.lbs[f.LB]; r != nil && f.MatchLB(f.LB) {
		o.History = append(o.History, r.proto(f.LB))
	}
	o.HistoryOmitted = uint32(h.omitted)
}
