package vip

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// moveCounters count this host's VIP moves for Collector.
type moveCounters struct {
	taken, released atomic.Int64
	last            atomic.Int64 // unix nanoseconds of the last move
}

func (c *moveCounters) note(take bool, now time.Time) {
	if take {
		c.taken.Add(1)
	} else {
		c.released.Add(1)
	}
	c.last.Store(now.UnixNano())
}

var (
	descVIPHeld     = prometheus.NewDesc("teapot_lb_vip_held", "1 when this host holds (arp) or announces (bgp) the VIP, else 0.", []string{"vip", "mode"}, nil)
	descVIPMoves    = prometheus.NewDesc("teapot_lb_vip_moves_total", "VIPs this host took or announced (direction=take) and released or withdrew (direction=release).", []string{"direction"}, nil)
	descVIPLastMove = prometheus.NewDesc("teapot_lb_vip_last_move_timestamp_seconds", "Unix time of this host's last VIP move (0 before the first); time() minus it is the time since.", nil, nil)
	descPeers       = prometheus.NewDesc("teapot_lb_vip_peers", "LB hosts the failure detector expects heartbeats from.", nil, nil)
	descPeersAlive  = prometheus.NewDesc("teapot_lb_vip_peers_alive", "LB hosts the failure detector hears from now.", nil, nil)
)

// Collector exports this host's VIPs, moves and failure-detector peers
// to Prometheus.
func (m *Manager) Collector() prometheus.Collector { return vipCollector{m} }

type vipCollector struct{ m *Manager }

func (c vipCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVIPHeld, descVIPMoves, descVIPLastMove, descPeers, descPeersAlive} {
		ch <- d
	}
}

func (c vipCollector) Collect(ch chan<- prometheus.Metric) {
	var ns pb.NodeStatus
	c.m.Describe(&ns)
	for _, v := range ns.Vips {
		held := 0.0
		if v.State == "holding" || v.State == "announcing" {
			held = 1
		}
		ch <- prometheus.MustNewConstMetric(descVIPHeld, prometheus.GaugeValue, held, v.Address, v.Mode)
	}
	mv := &c.m.moves
	ch <- prometheus.MustNewConstMetric(descVIPMoves, prometheus.CounterValue, float64(mv.taken.Load()), "take")
	ch <- prometheus.MustNewConstMetric(descVIPMoves, prometheus.CounterValue, float64(mv.released.Load()), "release")
	last := 0.0
	if ns := mv.last.Load(); ns != 0 {
		last = float64(ns) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(descVIPLastMove, prometheus.GaugeValue, last)
	alive := 0
	for _, p := range ns.Peers {
		if p.Alive {
			alive++
		}
	}
	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(len(ns.Peers)))
	ch <- prometheus.MustNewConstMetric(descPeersAlive, prometheus.GaugeValue, float64(alive))
}
