package metrics

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Other is the label value that series beyond a cap are folded into.
const Other = "_other"

// Default caps on the series one tenant can create.
const (
	DefaultMaxLBsPerTenant = 50
	DefaultMaxMembersPerLB = 64
)

// Member is one member of one pool as the host sees it.
type Member struct {
	LB, Pool  string
	Addr      netip.AddrPort
	Healthy   bool
	Ejections int64
}

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	// MaxLBsPerTenant bounds the load balancers of one tenant that get
	// their own series; the others (after sorting by name) are summed
	// into lb="TENANT/_other", listener="_other".
	MaxLBsPerTenant int
	// MaxMembersPerLB bounds the members of one load balancer that get
	// their own series; the others are summed into member="_other".
	MaxMembersPerLB int
	// Members calls each for every member in service, with its health;
	// nil exports no member health.
	Members func(each func(Member))
	// Served returns the load balancers in service; the counters of the
	// others are forgotten at each scrape (see Memory.Retain). nil keeps
	// everything.
	Served func() map[string]bool
}

// Collector exports a Memory to Prometheus. It reads the counters when
// scraped, so the data plane never calls Prometheus.
type Collector struct {
	m   *Memory
	cfg CollectorConfig
}

// NewCollector returns a Collector of m.
func NewCollector(m *Memory, cfg CollectorConfig) *Collector {
	if cfg.MaxLBsPerTenant <= 0 {
		cfg.MaxLBsPerTenant = DefaultMaxLBsPerTenant
	}
	if cfg.MaxMembersPerLB <= 0 {
		cfg.MaxMembersPerLB = DefaultMaxMembersPerLB
	}
	return &Collector{m: m, cfg: cfg}
}

var _ prometheus.Collector = (*Collector)(nil)

// family is one metric family the collector exports.
type family struct {
	name, help, typ string
	labels          []string
	desc            *prometheus.Desc
}

func newFamily(name, typ, help string, labels ...string) *family {
	name = "teapot_lb_" + name
	return &family{name: name, help: help, typ: typ, labels: labels, desc: prometheus.NewDesc(name, help, labels, nil)}
}

var (
	lbLabels     = []string{"tenant", "lb", "listener"}
	memberLabels = []string{"tenant", "lb", "member"}
	poolLabels   = []string{"tenant", "lb", "pool", "member"}

	famConns      = newFamily("connections_total", "counter", "Connections (UDP: flows) accepted by a listener.", lbLabels...)
	famActive     = newFamily("connections_active", "gauge", "Connections (UDP: flows) open now.", lbLabels...)
	famRefused    = newFamily("connections_refused_total", "counter", "Connections or flows turned away, by reason (no-member, listener-limit, tenant-limit, host-limit, not-tls).", append(lbLabels, "reason")...)
	famConnDur    = newFamily("connection_duration_seconds", "histogram", "Lifetime of finished connections and flows.", lbLabels...)
	famBytesIn    = newFamily("received_bytes_total", "counter", "Bytes received from clients (HTTP listeners: request bodies).", lbLabels...)
	famBytesOut   = newFamily("sent_bytes_total", "counter", "Bytes sent to clients (HTTP listeners: response bodies).", lbLabels...)
	famRequests   = newFamily("http_requests_total", "counter", "HTTP requests finished, by response code class (none: the client left before a response).", append(lbLabels, "code_class")...)
	famReqDur     = newFamily("http_request_duration_seconds", "histogram", "Time from a complete request head to the end of the response.", lbLabels...)
	famUpDur      = newFamily("http_upstream_duration_seconds", "histogram", "Time from the first attempt to reach a member to its response head.", lbLabels...)
	famMemberReq  = newFamily("member_requests_total", "counter", "Requests (L7) and connects (L4) sent to a member.", memberLabels...)
	famMemberFail = newFamily("member_failures_total", "counter", "Requests or connects to a member that failed (5xx, connect failure or timeout).", memberLabels...)
	famMemberUp   = newFamily("member_up", "gauge", "1 when the member may receive traffic (its check passes and it is not ejected), else 0.", poolLabels...)
	famMemberEj   = newFamily("member_ejections_total", "counter", "Passive ejections of a member after consecutive connect failures.", poolLabels...)

	families = []*family{famConns, famActive, famRefused, famConnDur, famBytesIn, famBytesOut,
		famRequests, famReqDur, famUpDur, famMemberReq, famMemberFail, famMemberUp, famMemberEj}
)

// refusedReasons are the reasons of proxy.Metrics.ConnRefused.
var refusedReasons = []string{"no-member", "listener-limit", "tenant-limit", "host-limit", "not-tls"}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range families {
		ch <- f.desc
	}
}

// tenantOf returns the tenant of "tenant/name".
func tenantOf(lb string) string {
	t, _, _ := strings.Cut(lb, "/")
	return t
}

// folder maps load balancers and members to their label values under the
// caps.
type folder struct {
	lbs map[string]bool // kept
	// members are the kept members of each load balancer, sorted.
	members map[string][]netip.AddrPort
}

// lbAddr is a member's address in a load balancer.
type lbAddr struct {
	lb   string
	addr netip.AddrPort
}

func compareLBAddr(a, b lbAddr) int {
	if c := strings.Compare(a.lb, b.lb); c != 0 {
		return c
	}
	return a.addr.Compare(b.addr)
}

// newFolder keeps the first maxLBs load balancers of each tenant and the
// first maxMembers members of each, by name and address. members is
// sorted in place.
func newFolder(maxLBs, maxMembers int, lbs []string, members []lbAddr) *folder {
	f := &folder{lbs: map[string]bool{}, members: map[string][]netip.AddrPort{}}
	slices.SortFunc(members, compareLBAddr)
	members = slices.Compact(members)
	for i, m := range members {
		if i == 0 || members[i-1].lb != m.lb {
			lbs = append(lbs, m.lb)
		}
	}
	slices.Sort(lbs)
	lbs = slices.Compact(lbs)
	perTenant := map[string]int{}
	for _, lb := range lbs {
		t := tenantOf(lb)
		if perTenant[t] < maxLBs {
			perTenant[t]++
			f.lbs[lb] = true
		}
	}
	// One array holds every load balancer's kept members.
	kept := make([]netip.AddrPort, 0, len(members))
	for i := 0; i < len(members); {
		lb, from := members[i].lb, len(kept)
		for ; i < len(members) && members[i].lb == lb; i++ {
			if len(kept)-from < maxMembers {
				kept = append(kept, members[i].addr)
			}
		}
		f.members[lb] = kept[from:len(kept):len(kept)]
	}
	return f
}

// lb returns the label values tenant, lb, listener.
func (f *folder) lb(lb, listener string) [3]string {
	if f.lbs[lb] {
		return [3]string{tenantOf(lb), lb, listener}
	}
	t := tenantOf(lb)
	return [3]string{t, t + "/" + Other, Other}
}

// member returns the label values tenant, lb, member.
func (f *folder) member(lb string, addr netip.AddrPort) [3]string {
	l := f.lb(lb, "")
	if _, kept := slices.BinarySearchFunc(f.members[lb], addr, netip.AddrPort.Compare); l[1] != lb || !kept {
		return [3]string{l[0], l[1], Other}
	}
	return [3]string{l[0], l[1], addr.String()}
}

type listenerSums struct {
	opened, closed, bytesIn, bytesOut int64
	refused                           map[string]int64
	duration, latency, upstream       HistogramValues
	byClass                           [codeClasses]int64
	http                              bool
}

type memberSums struct{ requests, failures int64 }

type poolSums struct {
	up, ejections int64
}

// poolRow is one series of member_up and member_ejections_total.
type poolRow struct {
	k [4]string // tenant, lb, pool, member
	s poolSums
}

// sums is one scrape's counters, folded under the caps and summed by
// their label values, with the keys of each map in label order.
type sums struct {
	ls    map[[3]string]*listenerSums
	lkeys [][3]string
	ms    map[[3]string]*memberSums
	mkeys [][3]string
	// pools are in label order, one row per series: there is a row for
	// every member in service, so they are a slice, sorted, and not a map.
	pools []poolRow
}

// sum reads the counters and folds them under the caps.
func (c *Collector) sum() *sums {
	if c.cfg.Served != nil {
		live := c.cfg.Served()
		c.m.Retain(func(lb string) bool { return live[lb] })
	}
	rep := c.m.Report()
	hs, hms := c.m.HTTP()
	var members []Member
	if c.cfg.Members != nil {
		// Counted first, so that the list is allocated once: a host has a
		// member for each of 100,000s of pool members.
		n := 0
		c.cfg.Members(func(Member) { n++ })
		members = make([]Member, 0, n+n/8)
		c.cfg.Members(func(m Member) { members = append(members, m) })
	}
	lbs := make([]string, 0, len(rep.Listeners)+len(hs))
	addrs := make([]lbAddr, 0, len(rep.Members)+len(hms)+len(members))
	for _, l := range rep.Listeners {
		lbs = append(lbs, l.LB)
	}
	for _, h := range hs {
		lbs = append(lbs, h.LB)
	}
	for _, m := range rep.Members {
		if a, err := netip.ParseAddrPort(m.Name); err == nil {
			addrs = append(addrs, lbAddr{m.LB, a})
		} else {
			lbs = append(lbs, m.LB)
		}
	}
	for _, m := range hms {
		addrs = append(addrs, lbAddr{m.LB, m.Member})
	}
	for _, m := range members {
		addrs = append(addrs, lbAddr{m.LB, m.Addr})
	}
	f := newFolder(c.cfg.MaxLBsPerTenant, c.cfg.MaxMembersPerLB, lbs, addrs)

	out := &sums{ls: map[[3]string]*listenerSums{}, ms: map[[3]string]*memberSums{}}
	ls := out.ls
	get := func(k [3]string) *listenerSums {
		s := ls[k]
		if s == nil {
			s = &listenerSums{refused: map[string]int64{}}
			ls[k] = s
		}
		return s
	}
	for _, l := range rep.Listeners {
		s := get(f.lb(l.LB, l.Listener))
		s.opened += l.Opened
		s.closed += l.Closed
		s.bytesIn += l.BytesIn
		s.bytesOut += l.BytesOut
		for r, n := range l.Refused {
			s.refused[r] += n
		}
		s.duration = s.duration.add(l.Duration)
	}
	for _, h := range hs {
		s := get(f.lb(h.LB, h.Listener))
		s.http = true
		s.bytesIn += h.RequestBytes
		s.bytesOut += h.ResponseBytes
		for i, n := range h.ByClass {
			s.byClass[i] += n
		}
		s.latency = s.latency.add(h.Latency)
		s.upstream = s.upstream.add(h.Upstream)
	}
	for _, s := range ls {
		for _, r := range refusedReasons {
			if _, ok := s.refused[r]; !ok {
				s.refused[r] = 0 // known reasons start at 0, so that rate() sees the first
			}
		}
	}
	out.lkeys = sortedKeys(ls)

	ms := out.ms
	mget := func(k [3]string) *memberSums {
		s := ms[k]
		if s == nil {
			s = &memberSums{}
			ms[k] = s
		}
		return s
	}
	for _, m := range rep.Members {
		a, err := netip.ParseAddrPort(m.Name)
		if err != nil {
			continue
		}
		s := mget(f.member(m.LB, a))
		for code, n := range m.ByStatus {
			s.requests += n
			if code >= 500 {
				s.failures += n
			}
		}
	}
	for _, m := range hms {
		s := mget(f.member(m.LB, m.Member))
		s.requests += m.Requests
		s.failures += m.Failures
	}
	out.mkeys = sortedKeys(ms)

	rows := make([]poolRow, 0, len(members))
	for _, m := range members {
		l := f.member(m.LB, m.Addr)
		r := poolRow{k: [4]string{l[0], l[1], m.Pool, l[2]}, s: poolSums{ejections: m.Ejections}}
		if l[1] != m.LB {
			r.k[2] = Other
		}
		if m.Healthy {
			r.s.up = 1
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b poolRow) int { return compareKeys(a.k, b.k) })
	// Members folded into one series are summed into its first row, in
	// place.
	out.pools = rows[:0]
	for _, r := range rows {
		if n := len(out.pools); n > 0 && out.pools[n-1].k == r.k {
			out.pools[n-1].s.up += r.s.up
			out.pools[n-1].s.ejections += r.s.ejections
			continue
		}
		out.pools = append(out.pools, r)
	}
	return out
}

// upValue is the value of member_up for a pool's key: 1 when the member may
// receive traffic; for the folded members, how many may.
func (s poolSums) upValue(member string) float64 {
	if member == Other {
		return float64(s.up)
	}
	if s.up > 0 {
		return 1
	}
	return 0
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	a := c.sum()
	for _, k := range a.lkeys {
		s := a.ls[k]
		l := k[:]
		ch <- prometheus.MustNewConstMetric(famConns.desc, prometheus.CounterValue, float64(s.opened), l...)
		ch <- prometheus.MustNewConstMetric(famActive.desc, prometheus.GaugeValue, float64(max(0, s.opened-s.closed)), l...)
		for _, r := range sortedKeys(s.refused) {
			ch <- prometheus.MustNewConstMetric(famRefused.desc, prometheus.CounterValue, float64(s.refused[r]), append(l, r)...)
		}
		ch <- constHistogram(famConnDur.desc, s.duration, l)
		ch <- prometheus.MustNewConstMetric(famBytesIn.desc, prometheus.CounterValue, float64(s.bytesIn), l...)
		ch <- prometheus.MustNewConstMetric(famBytesOut.desc, prometheus.CounterValue, float64(s.bytesOut), l...)
		if s.http {
			for i, n := range s.byClass {
				ch <- prometheus.MustNewConstMetric(famRequests.desc, prometheus.CounterValue, float64(n), append(l, ClassNames[i])...)
			}
			ch <- constHistogram(famReqDur.desc, s.latency, l)
			ch <- constHistogram(famUpDur.desc, s.upstream, l)
		}
	}
	for _, k := range a.mkeys {
		ch <- prometheus.MustNewConstMetric(famMemberReq.desc, prometheus.CounterValue, float64(a.ms[k].requests), k[:]...)
		ch <- prometheus.MustNewConstMetric(famMemberFail.desc, prometheus.CounterValue, float64(a.ms[k].failures), k[:]...)
	}
	for _, r := range a.pools {
		ch <- prometheus.MustNewConstMetric(famMemberUp.desc, prometheus.GaugeValue, r.s.upValue(r.k[3]), r.k[:]...)
		ch <- prometheus.MustNewConstMetric(famMemberEj.desc, prometheus.CounterValue, float64(r.s.ejections), r.k[:]...)
	}
}

func sortedKeys[K string | [3]string | [4]string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys[K])
	return keys
}

// compareKeys orders keys by their label values in turn, without joining
// them: a scrape sorts one key per member, so it must not allocate per
// comparison.
func compareKeys[K string | [3]string | [4]string](a, b K) int {
	switch x := any(a).(type) {
	case string:
		return strings.Compare(x, any(b).(string))
	case [3]string:
		y := any(b).([3]string)
		return slices.Compare(x[:], y[:])
	case [4]string:
		y := any(b).([4]string)
		return slices.Compare(x[:], y[:])
	}
	panic("unreachable")
}

// add returns the sum of two histograms.
func (h HistogramValues) add(o HistogramValues) HistogramValues {
	out := HistogramValues{Count: h.Count + o.Count, Sum: h.Sum + o.Sum, Counts: make([]uint64, len(Buckets)+1)}
	for i := range out.Counts {
		if i < len(h.Counts) {
			out.Counts[i] += h.Counts[i]
		}
		if i < len(o.Counts) {
			out.Counts[i] += o.Counts[i]
		}
	}
	return out
}

func constHistogram(d *prometheus.Desc, h HistogramValues, labels []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(Buckets))
	var cum uint64
	for i, b := range Buckets {
		if i < len(h.Counts) {
			cum += h.Counts[i]
		}
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}
