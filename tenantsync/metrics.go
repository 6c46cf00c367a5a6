package tenantsync

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// syncMetrics count the changes agents send to this host, per tenant.
type syncMetrics struct {
	mu      sync.Mutex
	changes map[string]*tenantCounts
	latency prometheus.Histogram
}

type tenantCounts struct {
	changes, objects, refused, failed, outdated int64
	// throttled and throttledFor count the changes that waited for the
	// write budget and the time they waited.
	throttled    int64
	throttledFor time.Duration
}

// counts returns tenant's counts; m.mu is held.
func (m *syncMetrics) counts(tenant string) *tenantCounts {
	c := m.changes[tenant]
	if c == nil {
		c = &tenantCounts{}
		m.changes[tenant] = c
	}
	return c
}

// throttled records that a change of tenant waits d for its write budget.
func (m *syncMetrics) throttled(tenant string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts(tenant)
	c.throttled++
	c.throttledFor += d
}

func newSyncMetrics() *syncMetrics {
	return &syncMetrics{changes: map[string]*tenantCounts{}, latency: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "teapot_lb_tenant_sync_apply_duration_seconds",
		Help:    "Time from an agent's change arriving on this host to its commit (or refusal), ack sent.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})}
}

// note records one change of tenant: the objects it named, those refused
// (results with an error), whether it could not be applied at all, and
// how long it took.
func (m *syncMetrics) note(tenant string, ack *pb.SyncAck, err error, d time.Duration) {
	m.latency.Observe(d.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts(tenant)
	c.changes++
	switch {
	case errors.Is(err, ErrOutdated):
		c.outdated++
		return
	case err != nil:
		c.failed++
		return
	}
	for _, r := range ack.GetResults() {
		c.objects++
		if r.GetError() != "" {
			c.refused++
		}
	}
}

var (
	descStreams = prometheus.NewDesc("teapot_lb_tenant_sync_streams", "Agent streams open on this host.", []string{"tenant"}, nil)
	descChanges = prometheus.NewDesc("teapot_lb_tenant_sync_changes_total", "Changes agents sent to this host (result=applied; failed: the cluster could not be written; outdated: a load balancer it writes was written by another stream or the operator since the stream read it, so nothing was written and the stream ended).", []string{"tenant", "result"}, nil)
	descObjects = prometheus.NewDesc("teapot_lb_tenant_sync_objects_total", "Objects (upserts and removals) in the changes applied.", []string{"tenant"}, nil)
	descRefused = prometheus.NewDesc("teapot_lb_tenant_sync_refusals_total", "Objects refused by validation, with the reason sent to the agent.", []string{"tenant"}, nil)
	// The write budget (quotas.writeBytesPerSecond).
	descThrottled    = prometheus.NewDesc("teapot_lb_tenant_sync_throttled_changes_total", "Changes that waited for the tenant's write budget on this host.", []string{"tenant"}, nil)
	descThrottledFor = prometheus.NewDesc("teapot_lb_tenant_sync_throttled_seconds_total", "Time changes waited for the tenant's write budget on this host.", []string{"tenant"}, nil)
)

// Collector exports the tenant streams and their changes to Prometheus.
// Tenants are created by the operator, so the tenant label is bounded:
// teapot_lb_tenant_sync_streams has a series for every tenant in the
// state (0 without a stream) and every tenant that sent a change.
func (s *Server) Collector() prometheus.Collector { return syncCollector{s} }

type syncCollector struct{ s *Server }

func (c syncCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStreams, descChanges, descObjects, descRefused, descThrottled, descThrottledFor} {
		ch <- d
	}
	c.s.metrics.latency.Describe(ch)
}

func (c syncCollector) Collect(ch chan<- prometheus.Metric) {
	streams := c.s.Streams()
	// Every tenant has the gauge, at 0 without a stream, so that an
	// alert on an agent that stopped streaming finds a value to compare.
	if c.s.cfg.Store != nil {
		objs, _ := c.s.cfg.Store.LocalList(api.KindTenant)
		for _, o := range objs {
			if t := o.GetTenant().GetName(); t != "" {
				if _, ok := streams[t]; !ok {
					streams[t] = 0
				}
			}
		}
	}
	m := c.s.metrics
	m.mu.Lock()
	for t := range m.changes {
		if _, ok := streams[t]; !ok {
			streams[t] = 0
		}
	}
	for t, n := range streams {
		ch <- prometheus.MustNewConstMetric(descStreams, prometheus.GaugeValue, float64(n), t)
	}
	for t, n := range m.changes {
		ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(n.changes-n.failed-n.outdated), t, "applied")
		ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(n.failed), t, "failed")
		ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(n.outdated), t, "outdated")
		ch <- prometheus.MustNewConstMetric(descObjects, prometheus.CounterValue, float64(n.objects), t)
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n.refused), t)
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, float64(n.throttled), t)
		ch <- prometheus.MustNewConstMetric(descThrottledFor, prometheus.CounterValue, n.throttledFor.Seconds(), t)
	}
	m.mu.Unlock()
	m.latency.Collect(ch)
}
