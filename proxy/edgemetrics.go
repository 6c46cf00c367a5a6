package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/proxy/ratelimit"
)

var (
	wafRequestsDesc = prometheus.NewDesc("teapot_lb_waf_requests_total",
		"Requests to routes with a WAF on this host, by verdict: passed, blocked (403, block mode), detected (rejected by the rules and served, detect mode), over-budget (429: the tenant's quotas.wafCpuMillicores spent, not inspected).",
		[]string{"tenant", "verdict"}, nil)
	wafBuildsDesc = prometheus.NewDesc("teapot_lb_waf_rule_builds_total",
		"Engines of the tenant's own WAF rules (routes[].waf.rules) on this host: built, and deferred (the tenant's quotas.wafCpuMillicores could not pay for the build when its snapshot was compiled: built later, its routes answering 503 meanwhile).",
		[]string{"tenant", "outcome"}, nil)
	wafBuildCPUDesc = prometheus.NewDesc("teapot_lb_waf_build_cpu_seconds_total",
		"CPU time the builds of the tenant's WAF engines (its own rules, and a Core Rule Set's first load in the process) were charged to its quotas.wafCpuMillicores on this host.",
		[]string{"tenant"}, nil)
	rateKeysDesc = prometheus.NewDesc("teapot_lb_rate_limit_keys",
		"Client keys the tenant's rate limits track on this host now (bounded by quotas.rateLimitKeys).",
		[]string{"tenant"}, nil)
	rateRefusedDesc = prometheus.NewDesc("teapot_lb_rate_limited_total",
		"Requests and connections refused over a rate limit on this host, by cause: limit (over the client's or the route's rate), full (a new client while the tenant's key table is full).",
		[]string{"tenant", "cause"}, nil)
	rateSharedDesc = prometheus.NewDesc("teapot_lb_rate_limit_shared_keys_total",
		"Keys of the tenant's per-client and per-header rate limits this host sent to its peers (at most ratelimit.ShareCap, quotas.rateLimitKeys/160, each 50 ms).",
		[]string{"tenant"}, nil)
	rateUnsharedDesc = prometheus.NewDesc("teapot_lb_rate_limit_unshared_total",
		"Arrivals of the tenant's hot rate-limit keys counted on this host alone, because the keys it may share each 50 ms were spent.",
		[]string{"tenant"}, nil)
)

// edgeCollector exports the tenants' WAF and rate-limit counts.
type edgeCollector struct{ p *Proxy }

// EdgeCollector returns the Prometheus collector of the tenants' WAF
// verdicts and rate-limit tables on this host.
func (p *Proxy) EdgeCollector() prometheus.Collector { return edgeCollector{p} }

var _ prometheus.Collector = edgeCollector{}

func (c edgeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- wafRequestsDesc
	ch <- wafBuildsDesc
	ch <- wafBuildCPUDesc
	ch <- rateKeysDesc
	ch <- rateRefusedDesc
	ch <- rateSharedDesc
	ch <- rateUnsharedDesc
}

func (c edgeCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.wafBudgets.Range(func(k, v any) bool {
		t, b := k.(string), v.(*wafBudget)
		blocked, detected := b.blocked.Load(), b.detected.Load()
		for verdict, n := range map[string]int64{
			"passed": b.inspected.Load() - blocked - detected, "blocked": blocked, "detected": detected, "over-budget": b.refused.Load(),
		} {
			ch <- prometheus.MustNewConstMetric(wafRequestsDesc, prometheus.CounterValue, float64(max(n, 0)), t, verdict)
		}
		ch <- prometheus.MustNewConstMetric(wafBuildsDesc, prometheus.CounterValue, float64(b.built.Load()), t, "built")
		ch <- prometheus.MustNewConstMetric(wafBuildsDesc, prometheus.CounterValue, float64(b.deferred.Load()), t, "deferred")
		ch <- prometheus.MustNewConstMetric(wafBuildCPUDesc, prometheus.CounterValue, float64(b.buildCPU.Load())/1e9, t)
		return true
	})
	c.p.rateTables.Range(func(k, v any) bool {
		t, s := k.(string), v.(*ratelimit.Table).Stats()
		ch <- prometheus.MustNewConstMetric(rateKeysDesc, prometheus.GaugeValue, float64(s.Keys), t)
		ch <- prometheus.MustNewConstMetric(rateRefusedDesc, prometheus.CounterValue, float64(s.Refused-s.Full), t, "limit")
		ch <- prometheus.MustNewConstMetric(rateRefusedDesc, prometheus.CounterValue, float64(s.Full), t, "full")
		ch <- prometheus.MustNewConstMetric(rateSharedDesc, prometheus.CounterValue, float64(s.Shared), t)
		ch <- prometheus.MustNewConstMetric(rateUnsharedDesc, prometheus.CounterValue, float64(s.Unshared), t)
		return true
	})
}
