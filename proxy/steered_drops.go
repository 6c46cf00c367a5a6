package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// steeredDrops counts the datagrams a tenant's steered UDP sockets
// (listen-sockets: tenant) read and dropped: sent to an address that is
// not, or no longer, steered to the socket, or is now another tenant's
// (notSteered); or, for an HTTP/3 port, past the queue of datagrams
// quic-go has not taken yet (queueFull).
type steeredDrops struct {
	notSteered, queueFull atomic.Int64
}

// steeredDropsOf returns tenant's counters, made on first use (a few
// bytes a tenant that has steered UDP sockets).
func (p *Proxy) steeredDropsOf(tenant string) *steeredDrops {
	if v, ok := p.steeredDrops.Load(tenant); ok {
		return v.(*steeredDrops)
	}
	v, _ := p.steeredDrops.LoadOrStore(tenant, new(steeredDrops))
	return v.(*steeredDrops)
}

var steeredDropsDesc = prometheus.NewDesc("teapot_lb_steered_datagrams_dropped_total",
	"Datagrams a tenant's steered UDP socket (listen-sockets: tenant) read and dropped on this host, by reason: not-steered (sent to an address not, or no longer, steered to it, or now another tenant's), queue-full (an HTTP/3 port's queue of datagrams quic-go has not taken, h3SteeredQueue, was full).",
	[]string{"tenant", "reason"}, nil)

// collectSteeredDrops exports every tenant's steered drops.
func (p *Proxy) collectSteeredDrops(ch chan<- prometheus.Metric) {
	p.steeredDrops.Range(func(k, v any) bool {
		t, d := k.(string), v.(*steeredDrops)
		ch <- prometheus.MustNewConstMetric(steeredDropsDesc, prometheus.CounterValue, float64(d.notSteered.Load()), t, "not-steered")
		ch <- prometheus.MustNewConstMetric(steeredDropsDesc, prometheus.CounterValue, float64(d.queueFull.Load()), t, "queue-full")
		return true
	})
}
