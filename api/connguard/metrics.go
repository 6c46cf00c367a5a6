package connguard

import "github.com/prometheus/client_golang/prometheus"

var (
	descAccepted = prometheus.NewDesc("teapot_lb_api_connections_accepted_total",
		"Connections the API port accepted (before any bound).", nil, nil)
	descRefused = prometheus.NewDesc("teapot_lb_api_connections_refused_total",
		"API port connections closed at a bound: source (per source), unauthenticated (total), evicted (made room for a lighter source), "+
			"handshake_timeout, anonymous_lifetime, authenticated (total), tenants (all tenants), tenant (one tenant).", []string{"reason"}, nil)
	descOpen = prometheus.NewDesc("teapot_lb_api_connections",
		"API port connections open: in their handshake, anonymous (through it without a client certificate), or by certificate role.", []string{"state"}, nil)
	descLimit = prometheus.NewDesc("teapot_lb_api_connection_limit",
		"Bounds of the API port's connections (derived from the descriptor limit).", []string{"bound"}, nil)
)

// Collector exports g's counts to Prometheus.
func (g *Guard) Collector() prometheus.Collector { return collector{g} }

type collector struct{ g *Guard }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAccepted, descRefused, descOpen, descLimit} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Stats()
	ch <- prometheus.MustNewConstMetric(descAccepted, prometheus.CounterValue, float64(st.Accepted))
	for _, r := range reasons {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.Refused[r]), r)
	}
	for _, o := range []struct {
		state string
		n     int
	}{{"handshake", st.Handshaking}, {"anonymous", st.Anonymous}, {"admin", st.Admin}, {"node", st.Node}, {"tenant", st.Tenants}} {
		ch <- prometheus.MustNewConstMetric(descOpen, prometheus.GaugeValue, float64(o.n), o.state)
	}
	l := c.g.lim
	for _, b := range []struct {
		bound string
		n     int
	}{{"unauthenticated", l.Unauthenticated}, {"per_source", l.PerSource}, {"authenticated", l.Authenticated}, {"tenants", l.Tenants}, {"per_tenant", l.PerTenant}} {
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(b.n), b.bound)
	}
}
