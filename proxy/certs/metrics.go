package certs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descCerts      = prometheus.NewDesc("teapot_lb_certificates", "Certificate objects in the cluster's state, by state (valid, pending, failed, refused).", []string{"state"}, nil)
	descExpiry     = prometheus.NewDesc("teapot_lb_certificate_expiry_seconds", "Seconds until a certificate expires (negative once expired).", []string{"tenant", "name", "source"}, nil)
	descNotAfter   = prometheus.NewDesc("teapot_lb_certificate_not_after_timestamp_seconds", "Unix time at which a certificate expires; time() subtracted from it is the time left.", []string{"tenant", "name", "source"}, nil)
	descIssueFails = prometheus.NewDesc("teapot_lb_acme_issue_failures_total", "Failed attempts of this host to obtain or renew an ACME certificate.", nil, nil)
	descHandshakes = prometheus.NewDesc("teapot_lb_tls_handshake_failures_total", "TLS handshakes with clients that failed on this host.", nil, nil)
	descSigned     = prometheus.NewDesc("teapot_lb_tls_signatures_total", "TLS signatures made on this host for a tenant: full handshakes of its https listeners and client certificates of its HTTPS health checks.", []string{"tenant"}, nil)
	descSignCPU    = prometheus.NewDesc("teapot_lb_tls_signature_cpu_seconds_total", "CPU time charged to a tenant's TLS budget on this host (--tls-cpu-per-tenant): its signatures, and the key exchange of each ClientHello its listeners admitted.", []string{"tenant"}, nil)
	descRefused    = prometheus.NewDesc("teapot_lb_tls_handshakes_refused_total", "TLS handshakes of a tenant's listeners refused on this host (at the ClientHello or the signature) because its TLS CPU budget was spent.", []string{"tenant"}, nil)
	descChallenges = prometheus.NewDesc("teapot_lb_acme_challenges_total", "ACME challenges this host presented for a tenant's names, by type (http-01, tls-alpn-01, dns-01) and outcome: valid, invalid (the CA found it invalid), unfinished (the order ended before the CA's verdict).", []string{"tenant", "type", "outcome"}, nil)
	descDelayed    = prometheus.NewDesc("teapot_lb_health_checks_delayed_total", "HTTPS health checks of a tenant delayed on this host because its signature CPU budget was spent.", []string{"tenant"}, nil)
)

// Collector exports the certificates, ACME failures and the tenants'
// signature budgets to Prometheus. Certificate series are bounded by the
// tenants' name budgets, budget series by the tenants.
func (m *Manager) Collector() prometheus.Collector { return certCollector{m} }

type certCollector struct{ m *Manager }

func (c certCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCerts, descExpiry, descNotAfter, descIssueFails, descHandshakes, descSigned, descSignCPU, descRefused, descDelayed, descChallenges} {
		ch <- d
	}
}

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[string]int{StateValid: 0, StatePending: 0, StateFailed: 0, StateRefused: 0}
	now := time.Now()
	if d := c.m.latest.Load(); d != nil {
		for _, cert := range d.status {
			states[cert.GetState()]++
			if na := cert.GetNotAfter(); na != nil && !na.AsTime().IsZero() {
				ch <- prometheus.MustNewConstMetric(descExpiry, prometheus.GaugeValue, na.AsTime().Sub(now).Seconds(),
					cert.GetTenant(), cert.GetName(), cert.GetSource())
				ch <- prometheus.MustNewConstMetric(descNotAfter, prometheus.GaugeValue, float64(na.AsTime().Unix()),
					cert.GetTenant(), cert.GetName(), cert.GetSource())
			}
		}
	}
	for s, n := range states {
		if s == "" {
			s = "unknown"
		}
		ch <- prometheus.MustNewConstMetric(descCerts, prometheus.GaugeValue, float64(n), s)
	}
	ch <- prometheus.MustNewConstMetric(descIssueFails, prometheus.CounterValue, float64(c.m.issueFailures.Load()))
	ch <- prometheus.MustNewConstMetric(descHandshakes, prometheus.CounterValue, float64(c.m.FailedHandshakes()))
	if c.m.iss != nil {
		for k, n := range c.m.iss.chal.snapshot() {
			ch <- prometheus.MustNewConstMetric(descChallenges, prometheus.CounterValue, float64(n), k.tenant, k.typ, k.outcome)
		}
	}
	for _, st := range c.m.cpu.Stats() {
		ch <- prometheus.MustNewConstMetric(descSigned, prometheus.CounterValue, float64(st.Signed), st.Tenant)
		ch <- prometheus.MustNewConstMetric(descSignCPU, prometheus.CounterValue, st.Spent.Seconds(), st.Tenant)
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.Refused), st.Tenant)
		ch <- prometheus.MustNewConstMetric(descDelayed, prometheus.CounterValue, float64(st.Delayed), st.Tenant)
	}
}
