package metrics

import (
	"net/netip"
	"sync/atomic"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// Code classes of HTTP responses; class 0 counts requests that got no
// response (the client left first).
const codeClasses = 6

// codeClass maps a status to its class: 1 for 1xx … 5 for 5xx, 0 for none.
func codeClass(status int) int {
	if c := status / 100; c >= 1 && c <= 5 {
		return c
	}
	return 0
}

// ClassNames are the label values of the code classes, by class.
var ClassNames = [codeClasses]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

type httpKey struct{ lb, listener string }

type httpCounters struct {
	byClass                [codeClasses]atomic.Int64
	reqBytes, respBytes    atomic.Int64
	retries, retriesDenied atomic.Int64
	latency, upstream      Histogram
}

type httpMemberKey struct {
	lb, pool string
	addr     netip.AddrPort
}

type httpMemberCounters struct {
	requests, failures atomic.Int64
	// latency is the upstream time of the member's requests.
	latency Histogram
}

// ReasonTenantBodies is the reason ConnRefused counts an HTTP/2 stream
// under, on its listener, that was reset as its tenant's buffered HTTP/2
// bodies on this host reached their bound (l7.MaxTenantH2Bodies: request
// bodies its members have not read, responses its clients have not
// taken), the requests that end with l7.OutcomeBodyLimit.
const ReasonTenantBodies = "tenant-bodies"

// Request implements l7.Metrics: it counts one finished HTTP request per
// listener (by code class, body bytes, total and upstream latency) and
// per member (requests, and failures: 5xx answers and upstream errors).
// A request reset at its tenant's body bound is counted as a refusal too
// (ReasonTenantBodies). It allocates nothing once a listener's and a
// member's counters exist.
func (m *Memory) Request(s l7.RequestStats) {
	if s.Outcome == l7.OutcomeBodyLimit {
		m.ConnRefused(s.LB, s.Listener, ReasonTenantBodies)
	}
	c := m.http.get(httpKey{s.LB, s.Listener})
	c.byClass[codeClass(s.Status)].Add(1)
	c.reqBytes.Add(s.RequestBytes)
	c.respBytes.Add(s.ResponseBytes)
	if s.Retries > 0 {
		c.retries.Add(int64(s.Retries))
	}
	if s.RetriesDenied > 0 {
		c.retriesDenied.Add(int64(s.RetriesDenied))
	}
	c.latency.Observe(s.Duration)
	if s.Upstream > 0 {
		c.upstream.Observe(s.Upstream)
	}
	if s.Member.IsValid() {
		mc := m.httpMembers.get(httpMemberKey{s.LB, s.Pool, s.Member})
		mc.requests.Add(1)
		if s.Upstream > 0 {
			mc.latency.Observe(s.Upstream)
		}
		if s.Status >= 500 || s.Outcome == l7.OutcomeUpstreamError || s.Outcome == l7.OutcomeUpstreamTimeout {
			mc.failures.Add(1)
		}
	}
}

// Conn implements l7.Metrics; connections are counted by the listener
// (ConnOpened, ConnClosed).
func (m *Memory) Conn(*l7.ConnInfo, bool) {}

var _ l7.Metrics = (*Memory)(nil)

// HTTPStats are one HTTP listener's request counters.
type HTTPStats struct {
	LB, Listener string
	// ByClass counts requests by ClassNames.
	ByClass                     [codeClasses]int64
	RequestBytes, ResponseBytes int64
	// Retries and RetriesDenied count attempts sent again by a route's
	// retry, and those the tenant's retry budget refused.
	Retries, RetriesDenied int64
	Latency, Upstream      HistogramValues
}

// HTTPMemberStats are one member's request counters as the L7 engine saw
// them.
type HTTPMemberStats struct {
	LB, Pool           string
	Member             netip.AddrPort
	Requests, Failures int64
	// Latency is the upstream time of the member's requests.
	Latency HistogramValues
}

// HTTP returns the HTTP counters, unsorted.
func (m *Memory) HTTP() ([]HTTPStats, []HTTPMemberStats) {
	var hs []HTTPStats
	m.http.each(func(k httpKey, c *httpCounters) {
		s := HTTPStats{LB: k.lb, Listener: k.listener, RequestBytes: c.reqBytes.Load(), ResponseBytes: c.respBytes.Load(),
			Retries: c.retries.Load(), RetriesDenied: c.retriesDenied.Load(),
			Latency: c.latency.values(), Upstream: c.upstream.values()}
		for i := range c.byClass {
			s.ByClass[i] = c.byClass[i].Load()
		}
		hs = append(hs, s)
	})
	var ms []HTTPMemberStats
	m.httpMembers.each(func(k httpMemberKey, c *httpMemberCounters) {
		ms = append(ms, HTTPMemberStats{LB: k.lb, Pool: k.pool, Member: k.addr, Requests: c.requests.Load(), Failures: c.failures.Load(), Latency: c.latency.values()})
	})
	return hs, ms
}
