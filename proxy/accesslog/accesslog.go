// Package accesslog writes the access logs of load balancers that turn
// them on: one JSON line per sampled HTTP request, rate-limited per load
// balancer, per tenant and for the whole host, so that a flood of
// requests cannot fill a disk or the journal, and one tenant's flood
// drops that tenant's lines, not its neighbours'.
package accesslog

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// Defaults of Config.
const (
	DefaultPerLB     = 100  // lines per second per load balancer
	DefaultPerTenant = 200  // lines per second per tenant
	DefaultPerHost   = 1000 // lines per second for the host
	// maxBuckets bounds the per-load-balancer and per-tenant limiters
	// kept.
	maxBuckets = 100000
)

// Config configures a Logger.
type Config struct {
	// Next receives every request's counters first (the metrics).
	Next l7.Metrics
	// Out receives the lines; writes are serialised.
	Out io.Writer
	// PerLB and PerTenant bound the lines per second of a load balancer
	// and of a tenant (bursts: twice that). PerHost bounds the host's
	// lines in each second, but a tenant below its fair share of it
	// (PerHost over the tenants that logged in that second) is never
	// refused by it: so the host writes at most twice PerHost lines a
	// second, and no tenant's flood takes another's share.
	PerLB, PerTenant, PerHost float64
	// Now and Rand are for tests.
	Now  func() time.Time
	Rand func() float64
}

// Logger is an l7.Metrics that passes every request to Next and writes the
// sampled requests of load balancers with an access log to Out.
type Logger struct {
	cfg Config

	mu      sync.Mutex
	perLB   map[string]*bucket
	dropped map[string]int64 // by load balancer, since its last line
	tenants map[string]*tenantLog
	enc     *json.Encoder

	// The host's second: its start (Unix seconds), the lines written in
	// it and the tenants that logged in it.
	second       int64
	hostLines    float64
	activeTenant float64
}

// tenantLog is a tenant's budget and counters.
type tenantLog struct {
	bucket
	second  int64   // the host second of lines
	lines   float64 // lines written in that second
	dropped int64   // lines dropped, in all
}

var _ l7.Metrics = (*Logger)(nil)

// New returns a Logger.
func New(cfg Config) *Logger {
	if cfg.Next == nil {
		cfg.Next = l7.NopMetrics{}
	}
	if cfg.PerLB <= 0 {
		cfg.PerLB = DefaultPerLB
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = DefaultPerTenant
	}
	if cfg.PerHost <= 0 {
		cfg.PerHost = DefaultPerHost
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Logger{cfg: cfg, perLB: map[string]*bucket{}, dropped: map[string]int64{}, tenants: map[string]*tenantLog{},
		enc: json.NewEncoder(cfg.Out)}
}

// Dropped returns the lines dropped by the rate limits, in all, by tenant.
func (l *Logger) Dropped() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.tenants))
	for name, t := range l.tenants {
		if t.dropped > 0 {
			out[name] = t.dropped
		}
	}
	return out
}

// admit charges a line of tenant t and load balancer b at now against the
// budgets, and reports whether it may be written. l.mu held.
func (l *Logger) admit(t *tenantLog, b *bucket, now time.Time) bool {
	if sec := now.Unix(); sec != l.second {
		l.second, l.hostLines, l.activeTenant = sec, 0, 0
	}
	if t.second != l.second {
		t.second, t.lines = l.second, 0
		l.activeTenant++
	}
	// The host's bound first, without taking tokens: a line it refuses
	// must not spend the tenant's budget.
	if l.hostLines >= l.cfg.PerHost && t.lines >= l.cfg.PerHost/l.activeTenant {
		return false
	}
	if !b.ready(now) || !t.ready(now) {
		return false
	}
	b.tokens--
	t.tokens--
	l.hostLines++
	t.lines++
	return true
}

// Line is one access-log entry.
type Line struct {
	Time      string  `json:"time"`
	Tenant    string  `json:"tenant"`
	LB        string  `json:"lb"`
	Listener  string  `json:"listener"`
	Client    string  `json:"client"`
	Host      string  `json:"host"`
	Method    string  `json:"method"`
	Path      string  `json:"path"`
	Protocol  string  `json:"protocol"`
	Status    int     `json:"status"`
	Outcome   string  `json:"outcome"`
	BytesIn   int64   `json:"bytes_in"`
	BytesOut  int64   `json:"bytes_out"`
	Route     string  `json:"route,omitempty"`
	Upstream  string  `json:"upstream,omitempty"`
	Duration  float64 `json:"duration_seconds"`
	UpstreamD float64 `json:"upstream_seconds"`
	RequestID string  `json:"request_id,omitempty"`
	// WAFRules are the ids of the WAF rules the request matched (a
	// blocked request, or one detect mode served).
	WAFRules string `json:"waf_rules,omitempty"`
	// Dropped counts this load balancer's lines left out by the rate
	// limit since its previous line.
	Dropped int64 `json:"dropped,omitempty"`
}

var outcomes = map[l7.Outcome]string{
	l7.OutcomeOK: "ok", l7.OutcomeClientError: "client-error", l7.OutcomeNoRoute: "no-route",
	l7.OutcomeRedirect: "redirect", l7.OutcomeLocal: "local", l7.OutcomeNoMember: "no-member",
	l7.OutcomeUpstreamError: "upstream-error", l7.OutcomeUpstreamTimeout: "upstream-timeout", l7.OutcomeAborted: "aborted",
	l7.OutcomeMemberLimit: "member-limit", l7.OutcomeMemberTLS: "member-tls", l7.OutcomeInspectLimit: "inspect-limit",
	l7.OutcomeBodyLimit: "body-limit",
}

// Request implements l7.Metrics.
func (l *Logger) Request(s l7.RequestStats) {
	l.cfg.Next.Request(s)
	if s.AccessLog <= 0 || (s.AccessLog < 1 && l.cfg.Rand() >= s.AccessLog) {
		return
	}
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.perLB[s.LB]
	if b == nil {
		if len(l.perLB) >= maxBuckets {
			clear(l.perLB)
			clear(l.dropped)
		}
		b = &bucket{rate: l.cfg.PerLB, burst: 2 * l.cfg.PerLB, tokens: 2 * l.cfg.PerLB, last: now}
		l.perLB[s.LB] = b
	}
	t := l.tenants[s.Tenant]
	if t == nil {
		if len(l.tenants) >= maxBuckets {
			clear(l.tenants)
		}
		t = &tenantLog{bucket: bucket{rate: l.cfg.PerTenant, burst: 2 * l.cfg.PerTenant, tokens: 2 * l.cfg.PerTenant, last: now}}
		l.tenants[s.Tenant] = t
	}
	if !l.admit(t, b, now) {
		l.dropped[s.LB]++
		t.dropped++
		return
	}
	line := Line{
		Time: now.UTC().Format(time.RFC3339Nano), Tenant: s.Tenant, LB: s.LB, Listener: s.Listener,
		Host: s.Host, Method: s.Method, Path: s.Path, Protocol: "HTTP/1.1", Status: s.Status, Outcome: outcomes[s.Outcome],
		BytesIn: s.RequestBytes, BytesOut: s.ResponseBytes, Route: s.Route,
		Duration: s.Duration.Seconds(), UpstreamD: s.Upstream.Seconds(), RequestID: s.RequestID, WAFRules: s.Inspected, Dropped: l.dropped[s.LB],
	}
	switch {
	case s.HTTP2:
		line.Protocol = "HTTP/2"
	case s.HTTP3:
		line.Protocol = "HTTP/3"
	}
	if s.Client.IsValid() {
		line.Client = s.Client.String()
	}
	if s.Member.IsValid() {
		line.Upstream = s.Member.String()
	}
	delete(l.dropped, s.LB)
	_ = l.enc.Encode(&line)
}

// Conn implements l7.Metrics.
func (l *Logger) Conn(info *l7.ConnInfo, open bool) { l.cfg.Next.Conn(info, open) }

// bucket is a token bucket.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

// ready refills the bucket at now and reports whether it holds a token.
func (b *bucket) ready(now time.Time) bool {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	return b.tokens >= 1
}
