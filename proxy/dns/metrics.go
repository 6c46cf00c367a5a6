package dns

import (
	"github.com/prometheus/client_golang/prometheus"

	mdns "github.com/miekg/dns"
)

var (
	descQueries    = prometheus.NewDesc("teapot_lb_dns_queries_total", "DNS queries this host received.", nil, nil)
	descResponses  = prometheus.NewDesc("teapot_lb_dns_responses_total", "DNS responses this host sent, by rcode.", []string{"rcode"}, nil)
	descLimited    = prometheus.NewDesc("teapot_lb_dns_rate_limited_total", "UDP responses over --dns-responses-per-second: dropped, or sent truncated (slipped).", []string{"action"}, nil)
	descOverBudget = prometheus.NewDesc("teapot_lb_dns_over_budget_total", "Queries for a tenant's names over --dns-queries-per-tenant, not answered.", nil, nil)
	descNames      = prometheus.NewDesc("teapot_lb_dns_names", "Names (exact and wildcard) the DNS table holds.", nil, nil)
	descTransfers  = prometheus.NewDesc("teapot_lb_dns_transfers_total", "Zone transfers to --dns-secondaries, by outcome: full (AXFR, or IXFR from a serial the journal no longer holds), incremental (IXFR), refused (not a secondary's address or key).", []string{"outcome"}, nil)
	descNotifies   = prometheus.NewDesc("teapot_lb_dns_notifies_total", "NOTIFY messages --dns-secondaries acknowledged.", nil, nil)
	descSignatures = prometheus.NewDesc("teapot_lb_dns_signatures_total", "RRSIGs of --dns-dnssec answers, by source: signed (made now), cached.", []string{"source"}, nil)
	descUnsigned   = prometheus.NewDesc("teapot_lb_dns_unsigned_total", "Answers with DO to a signed zone that could not be signed, by reason: over-budget (--dns-signatures-per-tenant spent: UDP not answered, TCP SERVFAIL), no-key (the zone's key not loaded yet: SERVFAIL).", []string{"reason"}, nil)
	descPushed     = prometheus.NewDesc("teapot_lb_dns_push_records_total", "Records this host deleted and added on a --dns-push zone's primary by RFC 2136 update.", []string{"zone"}, nil)
	descPushFailed = prometheus.NewDesc("teapot_lb_dns_push_failures_total", "Pushes of a --dns-push zone that failed (the primary refused or did not answer); retried with backoff.", []string{"zone"}, nil)
	descPushActive = prometheus.NewDesc("teapot_lb_dns_push_active", "1 while this host pushes the --dns-push zone (it leads the cluster).", []string{"zone"}, nil)
	descPushOK     = prometheus.NewDesc("teapot_lb_dns_push_last_success_timestamp_seconds", "When a push of the --dns-push zone last succeeded (0: never, on this host).", []string{"zone"}, nil)
	descChalWaits  = prometheus.NewDesc("teapot_lb_dns_challenge_waits_total", "ACME DNS-01 records this host waited for every host to apply before the CA was told, by outcome: applied (every host that answers had), timed-out (some had not after the bound; the CA was told all the same).", []string{"outcome"}, nil)
	descRevision   = prometheus.NewDesc("teapot_lb_dns_revision", "State revision of the DNS table (the zones' SOA serial without --dns-secondaries).", nil, nil)
)

// Collectors exports the server's counters to Prometheus (none when the
// server is off).
func (s *Server) Collectors() []prometheus.Collector {
	if s == nil {
		return nil
	}
	return []prometheus.Collector{collector{s}}
}

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueries, descResponses, descLimited, descOverBudget, descNames, descRevision, descTransfers, descNotifies, descSignatures, descUnsigned, descPushed, descPushFailed, descPushActive, descPushOK, descChalWaits} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := &c.s.stats
	ch <- prometheus.MustNewConstMetric(descQueries, prometheus.CounterValue, float64(st.Queries.Load()))
	for rc := range st.Rcodes {
		if n := st.Rcodes[rc].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(descResponses, prometheus.CounterValue, float64(n), mdns.RcodeToString[rc])
		}
	}
	ch <- prometheus.MustNewConstMetric(descLimited, prometheus.CounterValue, float64(st.Dropped.Load()), "dropped")
	ch <- prometheus.MustNewConstMetric(descLimited, prometheus.CounterValue, float64(st.Slipped.Load()), "slipped")
	ch <- prometheus.MustNewConstMetric(descOverBudget, prometheus.CounterValue, float64(st.OverBudget.Load()))
	if c.s.cfg.Cluster != nil {
		ch <- prometheus.MustNewConstMetric(descChalWaits, prometheus.CounterValue, float64(c.s.chalSpread.Load()), "applied")
		ch <- prometheus.MustNewConstMetric(descChalWaits, prometheus.CounterValue, float64(c.s.chalLagged.Load()), "timed-out")
	}
	if x := c.s.xfr; x != nil {
		inc := x.stats.Incremental.Load()
		ch <- prometheus.MustNewConstMetric(descTransfers, prometheus.CounterValue, float64(x.stats.Transfers.Load()-inc), "full")
		ch <- prometheus.MustNewConstMetric(descTransfers, prometheus.CounterValue, float64(inc), "incremental")
		ch <- prometheus.MustNewConstMetric(descTransfers, prometheus.CounterValue, float64(x.stats.Refused.Load()), "refused")
		ch <- prometheus.MustNewConstMetric(descNotifies, prometheus.CounterValue, float64(x.stats.Notified.Load()))
	}
	if sg := c.s.sec; sg != nil {
		ch <- prometheus.MustNewConstMetric(descSignatures, prometheus.CounterValue, float64(sg.stats.Signed.Load()), "signed")
		ch <- prometheus.MustNewConstMetric(descSignatures, prometheus.CounterValue, float64(sg.stats.Cached.Load()), "cached")
		ch <- prometheus.MustNewConstMetric(descUnsigned, prometheus.CounterValue, float64(sg.stats.OverBudget.Load()), "over-budget")
		ch <- prometheus.MustNewConstMetric(descUnsigned, prometheus.CounterValue, float64(sg.stats.NoKey.Load()), "no-key")
	}
	for _, st := range c.s.PushStatus() {
		active, ok := 0.0, 0.0
		if st.Active {
			active = 1
		}
		if !st.LastSuccess.IsZero() {
			ok = float64(st.LastSuccess.UnixMilli()) / 1000
		}
		ch <- prometheus.MustNewConstMetric(descPushed, prometheus.CounterValue, float64(st.Pushed), st.Zone)
		ch <- prometheus.MustNewConstMetric(descPushFailed, prometheus.CounterValue, float64(st.Failures), st.Zone)
		ch <- prometheus.MustNewConstMetric(descPushActive, prometheus.GaugeValue, active, st.Zone)
		ch <- prometheus.MustNewConstMetric(descPushOK, prometheus.GaugeValue, ok, st.Zone)
	}
	t := c.s.table.Load()
	ch <- prometheus.MustNewConstMetric(descNames, prometheus.GaugeValue, float64(len(t.names)+len(t.wild)))
	ch <- prometheus.MustNewConstMetric(descRevision, prometheus.GaugeValue, float64(t.revision))
}
