package cpubudget

import "github.com/prometheus/client_golang/prometheus"

var (
	descHostCPU = prometheus.NewDesc("teapot_lb_tenant_cpu_seconds_total",
		"CPU time charged to a tenant's host CPU budget on this host (quotas.cpuMillicores): what was measured where it was spent (signatures, regexes, the WAF) and its share of the rest by the work it brought in.", []string{"tenant"}, nil)
	descHostBudget = prometheus.NewDesc("teapot_lb_tenant_cpu_budget_cores",
		"A tenant's host CPU budget on this host, in cores (quotas.cpuMillicores, else serve --cpu-per-tenant, else a quarter of the host's CPUs).", []string{"tenant"}, nil)
	descThrottled = prometheus.NewDesc("teapot_lb_tenant_cpu_throttled_seconds_total",
		"Time a tenant was in debt of its host CPU budget on this host: its requests, connections, handshakes and checks waited meanwhile.", []string{"tenant"}, nil)
	descThrottles = prometheus.NewDesc("teapot_lb_tenant_cpu_throttles_total",
		"Times a tenant went into debt of its host CPU budget on this host.", []string{"tenant"}, nil)
)

// Collector exports every tenant's host CPU budget and its use; series
// are bounded by the tenants.
func (b *Budgets) Collector() prometheus.Collector { return collector{b} }

type collector struct{ b *Budgets }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHostCPU, descHostBudget, descThrottled, descThrottles} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.b.mu.Lock()
	ts := make([]*Tenant, 0, len(c.b.tenants))
	for _, t := range c.b.tenants {
		ts = append(ts, t)
	}
	c.b.mu.Unlock()
	for _, t := range ts {
		s := t.HostStat()
		ch <- prometheus.MustNewConstMetric(descHostCPU, prometheus.CounterValue, s.Spent.Seconds(), t.name)
		ch <- prometheus.MustNewConstMetric(descHostBudget, prometheus.GaugeValue, float64(s.Millicores)/1000, t.name)
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, s.Throttled.Seconds(), t.name)
		ch <- prometheus.MustNewConstMetric(descThrottles, prometheus.CounterValue, float64(s.Throttles), t.name)
	}
}
