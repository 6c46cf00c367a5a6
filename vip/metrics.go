package vip

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api/promtext"

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

// The reasons a heartbeat of a peer is refused for its process
// (Manager.refuseIncarnation), as the reason label says them.
const (
	refusedAnother = iota // another process while the one heard still sends
	refusedEarlier        // an earlier process than the latest taken
)

var refusalReasons = [2]string{refusedAnother: "another-process", refusedEarlier: "earlier-process"}

// refusalCounters count, by peer, the heartbeats refused for their
// process, for Collector. The loop counts (only heartbeats of cluster
// members reach it) and drops a peer's counts when the peer leaves the
// members; a scrape exports them for the members it publishes, so the
// peer label takes the members' ids and no other.
type refusalCounters struct {
	mu     sync.Mutex
	byPeer map[string][2]uint64
}

func (c *refusalCounters) note(id string, reason int) {
	c.mu.Lock()
	if c.byPeer == nil {
		c.byPeer = map[string][2]uint64{}
	}
	n := c.byPeer[id]
	n[reason]++
	c.byPeer[id] = n
	c.mu.Unlock()
}

// forget drops the counts of the peers not in members.
func (c *refusalCounters) forget(members map[string]member) {
	c.mu.Lock()
	for id := range c.byPeer {
		if _, ok := members[id]; !ok {
			delete(c.byPeer, id)
		}
	}
	c.mu.Unlock()
}

// of returns the counts of peer id.
func (c *refusalCounters) of(id string) [2]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPeer[id]
}

// The families the collector exports, with their help.
const (
	nameVIPHeld     = "teapot_lb_vip_held"
	helpVIPHeld     = "1 when this host holds (arp) or announces (bgp) the VIP, else 0."
	nameVIPMoves    = "teapot_lb_vip_moves_total"
	helpVIPMoves    = "VIPs this host took or announced (direction=take) and released or withdrew (direction=release)."
	nameVIPLastMove = "teapot_lb_vip_last_move_timestamp_seconds"
	helpVIPLastMove = "Unix time of this host's last VIP move (0 before the first); time() minus it is the time since."
	namePeers       = "teapot_lb_vip_peers"
	helpPeers       = "LB hosts the failure detector expects heartbeats from."
	namePeersAlive  = "teapot_lb_vip_peers_alive"
	helpPeersAlive  = "LB hosts the failure detector hears from now."
	nameRefused     = "teapot_lb_vip_heartbeats_refused_total"
	helpRefused     = "Heartbeats of the peer refused for their process: of another process while the one heard still sends (reason=another-process), or of an earlier process than the latest taken (reason=earlier-process); replayed, or two hosts with one node id."
)

var (
	vipHeldLabels   = []string{"vip", "mode"}
	vipMovesLabels  = []string{"direction"}
	refusedLabels   = []string{"peer", "reason"}
	descVIPHeld     = prometheus.NewDesc(nameVIPHeld, helpVIPHeld, vipHeldLabels, nil)
	descVIPMoves    = prometheus.NewDesc(nameVIPMoves, helpVIPMoves, vipMovesLabels, nil)
	descVIPLastMove = prometheus.NewDesc(nameVIPLastMove, helpVIPLastMove, nil, nil)
	descPeers       = prometheus.NewDesc(namePeers, helpPeers, nil, nil)
	descPeersAlive  = prometheus.NewDesc(namePeersAlive, helpPeersAlive, nil, nil)
	descRefused     = prometheus.NewDesc(nameRefused, helpRefused, refusedLabels, nil)
)

// Collector exports this host's VIPs, moves, failure-detector peers and
// the heartbeats it refused of each peer to Prometheus. It is a TextWriter of the metrics server
// (proxy/metricsserver): a host announcing 100,000 VIPs has a series for
// each, and a scrape writes them from the published list instead of
// building a metric (and a copy of each VIP) per series. The disabled manager's describes the metrics and exports
// none.
func (m *Manager) Collector() prometheus.Collector { return vipCollector{m} }

type vipCollector struct{ m *Manager }

func (c vipCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVIPHeld, descVIPMoves, descVIPLastMove, descPeers, descPeersAlive, descRefused} {
		ch <- d
	}
}

func (c vipCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m == nil {
		return
	}
	var ns pb.NodeStatus
	c.m.Describe(&ns)
	for _, v := range ns.Vips {
		ch <- prometheus.MustNewConstMetric(descVIPHeld, prometheus.GaugeValue, held(v.State), v.Address, v.Mode)
	}
	mv := &c.m.moves
	ch <- prometheus.MustNewConstMetric(descVIPMoves, prometheus.CounterValue, float64(mv.taken.Load()), "take")
	ch <- prometheus.MustNewConstMetric(descVIPMoves, prometheus.CounterValue, float64(mv.released.Load()), "release")
	ch <- prometheus.MustNewConstMetric(descVIPLastMove, prometheus.GaugeValue, lastMove(mv))
	alive := 0
	for _, p := range ns.Peers {
		if p.Alive {
			alive++
		}
	}
	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(len(ns.Peers)))
	ch <- prometheus.MustNewConstMetric(descPeersAlive, prometheus.GaugeValue, float64(alive))
	for _, p := range ns.Peers {
		n := c.m.refused.of(p.NodeId)
		for r, reason := range refusalReasons {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n[r]), p.NodeId, reason)
		}
	}
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
	if m == nil {
		return nil
	}
	m.mu.Lock()
	vips, peers := m.pub.vips, m.pub.peers
	m.mu.Unlock()
	t := promtext.NewText(w)
	t.Family(nameVIPHeld, helpVIPHeld, "gauge", len(vips))
	for _, v := range vips {
		t.Sample(nameVIPHeld, "", vipHeldLabels, []string{v.Address, v.Mode}, "", "", held(v.State))
	}
	mv := &m.moves
	t.Family(nameVIPMoves, helpVIPMoves, "counter", 2)
	t.Sample(nameVIPMoves, "", vipMovesLabels, []string{"release"}, "", "", float64(mv.released.Load()))
	t.Sample(nameVIPMoves, "", vipMovesLabels, []string{"take"}, "", "", float64(mv.taken.Load()))
	t.Family(nameVIPLastMove, helpVIPLastMove, "gauge", 1)
	t.Sample(nameVIPLastMove, "", nil, nil, "", "", lastMove(mv))
	alive := 0
	for _, p := range peers {
		if p.alive {
			alive++
		}
	}
	t.Family(namePeers, helpPeers, "gauge", 1)
	t.Sample(namePeers, "", nil, nil, "", "", float64(len(peers)))
	t.Family(namePeersAlive, helpPeersAlive, "gauge", 1)
	t.Sample(namePeersAlive, "", nil, nil, "", "", float64(alive))
	t.Family(nameRefused, helpRefused, "counter", len(peers)*len(refusalReasons))
	for _, p := range peers {
		n := m.refused.of(p.id)
		for r, reason := range refusalReasons {
			t.Sample(nameRefused, "", refusedLabels, []string{p.id, reason}, "", "", float64(n[r]))
		}
	}
	return t.Flush()
}

// lastMove is the teapot_lb_vip_last_move_timestamp_seconds value.
func lastMove(mv *moveCounters) float64 {
	if ns := mv.last.Load(); ns != 0 {
		return float64(ns) / 1e9
	}
	return 0
}
