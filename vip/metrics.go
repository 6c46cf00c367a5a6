package vip

import (
	"bufio"
	"io"
	"strconv"
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
// to Prometheus. It is a metricsserver.TextWriter: a host announcing
// 100,000 VIPs has a series for each, and a scrape writes them from the
// published list instead of building a metric (and a copy of each VIP)
// per series.
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
		ch <- prometheus.MustNewConstMetric(descVIPHeld, prometheus.GaugeValue, held(v.State), v.Address, v.Mode)
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

// held is the teapot_lb_vip_held value of a VIP in state.
func held(state string) float64 {
	if state == "holding" || state == "announcing" {
		return 1
	}
	return 0
}

// WriteText writes what Collect collects in the Prometheus text format
// (version 0.0.4). The VIPs come from the list published last, which is
// never modified once published, so they are read without a copy.
func (c vipCollector) WriteText(w io.Writer) error {
	m := c.m
	m.mu.Lock()
	vips, peers := m.pub.vips, m.pub.peers
	m.mu.Unlock()
	bw := bufio.NewWriterSize(w, 32<<10)
	header := func(name, help, typ string) {
		bw.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
	}
	value := func(v float64) {
		bw.Write(strconv.AppendFloat(bw.AvailableBuffer(), v, 'g', -1, 64))
		bw.WriteByte('\n')
	}
	// Label values here are addresses, modes and fixed words: nothing to
	// escape.
	if len(vips) > 0 {
		header("teapot_lb_vip_held", "1 when this host holds (arp) or announces (bgp) the VIP, else 0.", "gauge")
		for _, v := range vips {
			bw.WriteString(`teapot_lb_vip_held{vip="`)
			bw.WriteString(v.Address)
			bw.WriteString(`",mode="`)
			bw.WriteString(v.Mode)
			bw.WriteString(`"} `)
			value(held(v.State))
		}
	}
	mv := &m.moves
	header("teapot_lb_vip_moves_total", "VIPs this host took or announced (direction=take) and released or withdrew (direction=release).", "counter")
	bw.WriteString(`teapot_lb_vip_moves_total{direction="release"} `)
	value(float64(mv.released.Load()))
	bw.WriteString(`teapot_lb_vip_moves_total{direction="take"} `)
	value(float64(mv.taken.Load()))
	last := 0.0
	if ns := mv.last.Load(); ns != 0 {
		last = float64(ns) / 1e9
	}
	header("teapot_lb_vip_last_move_timestamp_seconds", "Unix time of this host's last VIP move (0 before the first); time() minus it is the time since.", "gauge")
	bw.WriteString("teapot_lb_vip_last_move_timestamp_seconds ")
	value(last)
	alive := 0
	for _, p := range peers {
		if p.alive {
			alive++
		}
	}
	header("teapot_lb_vip_peers", "LB hosts the failure detector expects heartbeats from.", "gauge")
	bw.WriteString("teapot_lb_vip_peers ")
	value(float64(len(peers)))
	header("teapot_lb_vip_peers_alive", "LB hosts the failure detector hears from now.", "gauge")
	bw.WriteString("teapot_lb_vip_peers_alive ")
	value(float64(alive))
	return bw.Flush()
}
