package tenantbgp

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/vip/bfd"
)

var (
	descSessions = prometheus.NewDesc("teapot_lb_tenant_bgp_sessions_established",
		"Sessions this host has established with the tenant's BGP speakers; attachment names the namespace they are made from (empty: the host's own).", []string{"tenant", "attachment"}, nil)
	descRoutes = prometheus.NewDesc("teapot_lb_tenant_bgp_routes",
		"Routes the tenant's speakers announce to this host: installed (result=accepted) or dropped (result=dropped); attachment names the namespace whose table has them (empty: the host's own).", []string{"tenant", "result", "attachment"}, nil)
	descLimits = prometheus.NewDesc("teapot_lb_tenant_bgp_prefix_limit_total",
		"Sessions this host closed for announcing more than the tenant's bgp.maxPrefixes.", []string{"tenant"}, nil)
	descJudge = prometheus.NewDesc("teapot_lb_tenant_bgp_judge_seconds_total",
		"Time this host spent taking in, judging and installing the routes the tenant's speakers announced (its namespace's table, or its share of the host's).", []string{"tenant"}, nil)
	descUpdateLimits = prometheus.NewDesc("teapot_lb_tenant_bgp_update_limit_total",
		"Sessions this host closed for sending route changes (prefixes announced or withdrawn) or UPDATE messages faster than the tenant's bgp.maxUpdatesPerSecond.", []string{"tenant"}, nil)
	descBFDDowns = prometheus.NewDesc("teapot_lb_tenant_bgp_bfd_down_total",
		"BGP sessions this host reset because their BFD session (bgp.bfd) went down.", []string{"tenant"}, nil)
	descBFDDropped = prometheus.NewDesc("teapot_lb_tenant_bgp_bfd_dropped_total",
		"BFD packets this host read from the tenant's namespace and dropped: malformed (reason=invalid), from an address with no session (unknown-peer), with a TTL under 255 (ttl), with another session's discriminator (discriminator), or with the session's queue full (overflow).", []string{"tenant", "reason"}, nil)
	descBFDThrottled = prometheus.NewDesc("teapot_lb_tenant_bgp_bfd_throttled_total",
		"Times this host stopped reading the tenant's BFD socket because packets came faster than the tenant's sessions' intervals allow (the kernel drops what does not fit).", []string{"tenant"}, nil)
	descVIPsAnnounced = prometheus.NewDesc("teapot_lb_tenant_bgp_vips_announced",
		"VIPs of bgp pools in the tenant's attachment that this host announces to the tenant's speakers over its sessions from inside the attachment (named by attachment).", []string{"tenant", "attachment"}, nil)
	descBFDPackets = prometheus.NewDesc("teapot_lb_tenant_bgp_bfd_packets_total",
		"BFD packets this host took for the tenant's sessions (direction=received) and sent them (direction=sent).", []string{"tenant", "direction"}, nil)
)

// Collector exports, per tenant with BGP, its sessions with this host and
// the routes accepted and dropped.
func (r *Relay) Collector() prometheus.Collector { return relayCollector{r} }

type relayCollector struct{ r *Relay }

func (c relayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSessions
	ch <- descRoutes
	ch <- descLimits
	ch <- descUpdateLimits
	ch <- descJudge
	ch <- descBFDDowns
	ch <- descBFDDropped
	ch <- descBFDThrottled
	ch <- descBFDPackets
	ch <- descVIPsAnnounced
}

func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	if r == nil || r.srv == nil {
		return
	}
	r.bfdSt.mu.Lock()
	downs := maps.Clone(r.bfdSt.downs)
	stats := map[string]bfd.Stats{}
	for t := range r.bfdSt.eps {
		stats[t] = r.bfdSt.stats(t)
	}
	for t := range r.bfdSt.closed {
		stats[t] = r.bfdSt.stats(t)
	}
	r.bfdSt.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range sortedKeys(r.world.tenants) {
		o := r.obs[name]
		up := 0
		for _, s := range o.GetSessions() {
			if s.GetState() == "established" {
				up++
			}
		}
		att := namespaceOf(r.world.tenants[name].space)
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(up), name, att)
		ch <- prometheus.MustNewConstMetric(descRoutes, prometheus.GaugeValue, float64(o.GetAcceptedCount()), name, "accepted", att)
		ch <- prometheus.MustNewConstMetric(descRoutes, prometheus.GaugeValue, float64(o.GetDroppedCount()), name, "dropped", att)
		ch <- prometheus.MustNewConstMetric(descLimits, prometheus.CounterValue, float64(r.limits[name]), name)
		ch <- prometheus.MustNewConstMetric(descUpdateLimits, prometheus.CounterValue, float64(r.rateLimits[name]), name)
		ch <- prometheus.MustNewConstMetric(descJudge, prometheus.CounterValue, r.judgeTime[name].Seconds(), name)
		if att != "" {
			ch <- prometheus.MustNewConstMetric(descVIPsAnnounced, prometheus.GaugeValue, float64(len(o.GetAnnounced())), name, att)
		}
		if r.world.tenants[name].bgp.GetBfd() != nil {
			ch <- prometheus.MustNewConstMetric(descBFDDowns, prometheus.CounterValue, float64(downs[name]), name)
			st := stats[name]
			for _, d := range []struct {
				reason string
				n      uint64
			}{{"invalid", st.Invalid}, {"unknown-peer", st.UnknownPeer}, {"ttl", st.BadTTL}, {"discriminator", st.BadDisc}, {"overflow", st.Overflow}} {
				ch <- prometheus.MustNewConstMetric(descBFDDropped, prometheus.CounterValue, float64(d.n), name, d.reason)
			}
			ch <- prometheus.MustNewConstMetric(descBFDThrottled, prometheus.CounterValue, float64(st.Throttled), name)
			ch <- prometheus.MustNewConstMetric(descBFDPackets, prometheus.CounterValue, float64(st.Received), name, "received")
			ch <- prometheus.MustNewConstMetric(descBFDPackets, prometheus.CounterValue, float64(st.Sent), name, "sent")
		}
	}
}
