package metrics

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

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
	// records are the member records of the last scrape, for the next one
	// (nil while a scrape holds them). A scrape of 1,000,000 members
	// would otherwise allocate 40 MiB of them; kept, they cost the
	// collector nothing to mark (they hold no pointers).
	records atomic.Pointer[[]poolMember]
}

// takeRecords returns an empty slice of member records with room for n:
// the last scrape's when they fit and are not more than twice too large.
func (c *Collector) takeRecords(n int) []poolMember {
	if p := c.records.Swap(nil); p != nil && cap(*p) >= n && cap(*p) <= 2*n {
		return (*p)[:0]
	}
	return make([]poolMember, 0, n)
}

// keepRecords hands a scrape's member records to the next scrape; the
// scrape must not read them afterwards.
func (c *Collector) keepRecords(a *sums) {
	if a.pools.members != nil {
		rs := a.pools.members[:0]
		c.records.Store(&rs)
	}
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
	poolLabels   = []string{"tenant", "lb", "pool", "member"}
	memberLabels = poolLabels

	famConns      = newFamily("connections_total", "counter", "Connections (UDP: flows) accepted by a listener.", lbLabels...)
	famActive     = newFamily("connections_active", "gauge", "Connections (UDP: flows) open now.", lbLabels...)
	famRefused    = newFamily("connections_refused_total", "counter", "Connections, flows or HTTP/2 streams turned away, by reason (no-member, listener-limit, tenant-limit, host-limit, not-tls, tenant-streams, source, rate-limit, client-source; HTTP/2 streams reset at the tenant's bound on buffered bodies, tenant-bodies; and for HTTP/3 listeners connection IDs not issued, connection-ids, stateless resets not sent, stateless-reset, and receive windows not grown, tenant-window).", append(lbLabels, "reason")...)
	famConnDur    = newFamily("connection_duration_seconds", "histogram", "Lifetime of finished connections and flows.", lbLabels...)
	famBytesIn    = newFamily("received_bytes_total", "counter", "Bytes received from clients (HTTP listeners: request bodies).", lbLabels...)
	famBytesOut   = newFamily("sent_bytes_total", "counter", "Bytes sent to clients (HTTP listeners: response bodies).", lbLabels...)
	famUDPDropped = newFamily("udp_reply_dropped_bytes_total", "counter", "Bytes of member replies a UDP listener dropped: over the reply budget of a flow whose client sent too little (anti-reflection).", lbLabels...)
	famRequests   = newFamily("http_requests_total", "counter", "HTTP requests finished, by response code class (none: the client left before a response).", append(lbLabels, "code_class")...)
	famReqDur     = newFamily("http_request_duration_seconds", "histogram", "Time from a complete request head to the end of the response.", lbLabels...)
	famUpDur      = newFamily("http_upstream_duration_seconds", "histogram", "Time from the first attempt to reach a member to its response head.", lbLabels...)
	famRetries    = newFamily("http_retries_total", "counter", "Attempts of HTTP requests sent again by their route's retry (result retried), and failed attempts not sent again because the tenant's retry budget was spent (result budget_spent).", append(lbLabels, "result")...)
	famMemberReq  = newFamily("member_requests_total", "counter", "Requests (L7) and connects (L4) sent to a member of a pool.", memberLabels...)
	famMemberFail = newFamily("member_failures_total", "counter", "Requests or connects to a member of a pool that failed (5xx, connect failure or timeout).", memberLabels...)
	famMemberUp   = newFamily("member_up", "gauge", "1 when the member may receive traffic (its check passes and it is not ejected), else 0.", poolLabels...)
	famMemberEj   = newFamily("member_ejections_total", "counter", "Passive ejections of a member after consecutive connect failures.", poolLabels...)

	families = []*family{famConns, famActive, famRefused, famConnDur, famBytesIn, famBytesOut, famUDPDropped,
		famRequests, famReqDur, famUpDur, famRetries, famMemberReq, famMemberFail, famMemberUp, famMemberEj}
)

// refusedReasons are the reasons of proxy.Metrics.ConnRefused.
var refusedReasons = []string{"no-member", "listener-limit", "tenant-limit", "host-limit", "not-tls", "tenant-streams", "source", "rate-limit"}

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

type listenerSums struct {
	opened, closed, bytesIn, bytesOut int64
	udpDropped                        int64
	refused                           map[string]int64
	duration, latency, upstream       HistogramValues
	byClass                           [codeClasses]int64
	retries, retriesDenied            int64
	http                              bool
}

type memberSums struct{ requests, failures int64 }

// sums is one scrape's counters, folded under the caps and summed by
// their label values, with the keys of each map in label order.
type sums struct {
	ls    map[[3]string]*listenerSums
	lkeys [][3]string
	ms    map[[4]string]*memberSums
	mkeys [][4]string
	// pools has a record for every member in service, so it is a slice,
	// sorted, and not a map.
	pools poolTable
}

// sum reads the counters and folds them under the caps.
func (c *Collector) sum() *sums {
	if c.cfg.Served != nil {
		live := c.cfg.Served()
		c.m.Retain(func(lb string) bool { return live[lb] })
	}
	rep := c.m.Report()
	hs, hms := c.m.HTTP()
	// Members are counted first, so that their list is allocated once: a
	// host has 100,000s of them. They come pool by pool, so the changes
	// of load balancer from one to the next count the load balancers (or
	// a few more).
	n, lbs, last := 0, 0, ""
	if c.cfg.Members != nil {
		c.cfg.Members(func(m Member) {
			if n++; n == 1 || m.LB != last {
				lbs, last = lbs+1, m.LB
			}
		})
	}
	f := newFolder(lbs)
	var members []poolMember
	if c.cfg.Members != nil {
		members = c.takeRecords(n + n/64)
		c.cfg.Members(func(m Member) { members = append(members, f.poolMember(m)) })
	}
	addrs := make([]lbAddr, 0, len(rep.Members)+len(hms))
	for _, l := range rep.Listeners {
		f.lbOf(l.LB)
	}
	for _, h := range hs {
		f.lbOf(h.LB)
	}
	for _, m := range rep.Members {
		i := f.lbOf(m.LB)
		if a, err := netip.ParseAddrPort(m.Name); err == nil {
			addrs = append(addrs, lbAddr{f.key(a), i})
		}
	}
	for _, m := range hms {
		addrs = append(addrs, lbAddr{f.key(m.Member), f.lbOf(m.LB)})
	}
	f.fold(c.cfg.MaxLBsPerTenant, c.cfg.MaxMembersPerLB, members, addrs)

	out := &sums{ls: map[[3]string]*listenerSums{}, ms: map[[4]string]*memberSums{}, pools: poolTable{f, members}}
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
		s.udpDropped += l.UDPReplyDropped
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
		s.retries += h.Retries
		s.retriesDenied += h.RetriesDenied
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
	mget := func(k [4]string) *memberSums {
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
		s := mget(f.member(m.LB, m.Pool, a))
		for code, n := range m.ByStatus {
			s.requests += n
			if code >= 500 {
				s.failures += n
			}
		}
	}
	for _, m := range hms {
		s := mget(f.member(m.LB, m.Pool, m.Member))
		s.requests += m.Requests
		s.failures += m.Failures
	}
	out.mkeys = sortedKeys(ms)
	return out
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	a := c.sum()
	defer c.keepRecords(a)
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
		if s.udpDropped > 0 {
			ch <- prometheus.MustNewConstMetric(famUDPDropped.desc, prometheus.CounterValue, float64(s.udpDropped), l...)
		}
		if s.http {
			for i, n := range s.byClass {
				ch <- prometheus.MustNewConstMetric(famRequests.desc, prometheus.CounterValue, float64(n), append(l, ClassNames[i])...)
			}
			ch <- constHistogram(famReqDur.desc, s.latency, l)
			ch <- constHistogram(famUpDur.desc, s.upstream, l)
			ch <- prometheus.MustNewConstMetric(famRetries.desc, prometheus.CounterValue, float64(s.retries), append(l, "retried")...)
			ch <- prometheus.MustNewConstMetric(famRetries.desc, prometheus.CounterValue, float64(s.retriesDenied), append(l, "budget_spent")...)
		}
	}
	for _, k := range a.mkeys {
		ch <- prometheus.MustNewConstMetric(famMemberReq.desc, prometheus.CounterValue, float64(a.ms[k].requests), k[:]...)
		ch <- prometheus.MustNewConstMetric(famMemberFail.desc, prometheus.CounterValue, float64(a.ms[k].failures), k[:]...)
	}
	a.pools.each(func(r poolRow) {
		l := []string{r.tenant, r.lb, r.pool, r.member()}
		ch <- prometheus.MustNewConstMetric(famMemberUp.desc, prometheus.GaugeValue, r.upValue(), l...)
		ch <- prometheus.MustNewConstMetric(famMemberEj.desc, prometheus.CounterValue, float64(r.ejections), l...)
	})
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
// them: a scrape sorts one key per member with counters, so it must not
// allocate per comparison.
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
