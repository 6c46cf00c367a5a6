package consensus

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// raftMetrics are the counters the Node keeps for Collector.
type raftMetrics struct {
	leaderChanges atomic.Int64
	apply         prometheus.Histogram
	readBarrier   prometheus.Histogram

	mu sync.Mutex
	// failing holds the voters whose heartbeats from this host, as
	// leader, fail, with the time of the last failure.
	failing map[raft.ServerID]time.Time
}

func newRaftMetrics() *raftMetrics {
	return &raftMetrics{failing: map[raft.ServerID]time.Time{}, apply: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "teapot_lb_raft_apply_duration_seconds",
		Help:    "Time for this host, as leader, to commit one batched command through Raft.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}), readBarrier: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "teapot_lb_read_barrier_seconds",
		Help:    "Time a linearizable read (admin Get, List, Backup) waited on this host before it could read its state: the leader's read index and the apply up to it.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})}
}

// observeLeaders counts leader changes seen by this host until the node
// stops.
func (n *Node) observeLeaders() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.ResumedHeartbeatObservation, raft.FailedHeartbeatObservation:
			return true
		}
		return false
	})
	n.observe(obs)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.unobserve(obs)
		for {
			select {
			case <-n.stop:
				return
			case o := <-ch:
				// A host that stopped or came back may run another
				// release now: what the hosts said of their levels is
				// asked again.
				n.features.epoch.Add(1)
				switch d := o.Data.(type) {
				case raft.LeaderObservation:
					n.metrics.leaderChanged()
					if d.LeaderID != "" {
						n.metrics.leaderChanges.Add(1)
					}
				case raft.FailedHeartbeatObservation:
					n.metrics.peerFailed(d.PeerID)
				case raft.ResumedHeartbeatObservation:
					n.metrics.peerResumed(d.PeerID)
					n.raftLog.peerRecovered(string(d.PeerID), n.peerAddr(d.PeerID))
				}
			}
		}
	}()
}

// Collector exports this host's view of Raft to Prometheus: whether it
// leads, term, indexes, leader changes, apply latency, the voters (and on
// the leader those reachable), and each tenant's quotas and their usage.
func (n *Node) Collector() prometheus.Collector { return raftCollector{n} }

type raftCollector struct{ n *Node }

var (
	descLeader        = prometheus.NewDesc("teapot_lb_raft_leader", "1 when this host is the Raft leader, else 0.", nil, nil)
	descHasLeader     = prometheus.NewDesc("teapot_lb_raft_has_leader", "1 when this host knows a leader, else 0.", nil, nil)
	descTerm          = prometheus.NewDesc("teapot_lb_raft_term", "Current Raft term.", nil, nil)
	descCommit        = prometheus.NewDesc("teapot_lb_raft_commit_index", "Highest Raft log index known committed.", nil, nil)
	descApplied       = prometheus.NewDesc("teapot_lb_raft_applied_index", "Highest Raft log index applied to this host's state.", nil, nil)
	descLastContact   = prometheus.NewDesc("teapot_lb_raft_last_contact_seconds", "Seconds since this follower last heard the leader (0 on the leader).", nil, nil)
	descLeaderChanges = prometheus.NewDesc("teapot_lb_raft_leader_changes_total", "Leader elections this host has observed.", nil, nil)
	descRevision      = prometheus.NewDesc("teapot_lb_state_revision", "Revision of the replicated state this host has applied.", nil, nil)
)

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descHasLeader, descTerm, descCommit, descApplied, descLastContact, descLeaderChanges, descRevision,
		descQuotaUsed, descQuotaLimit, descVoters, descReachable} {
		ch <- d
	}
	c.n.metrics.apply.Describe(ch)
	c.n.metrics.readBarrier.Describe(ch)
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.n.r()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	leader := 0.0
	if r.State() == raft.Leader {
		leader = 1
	}
	gauge(descLeader, leader)
	has := 0.0
	if addr, _ := r.LeaderWithID(); addr != "" {
		has = 1
	}
	gauge(descHasLeader, has)
	gauge(descTerm, float64(r.CurrentTerm()))
	gauge(descCommit, float64(r.CommitIndex()))
	gauge(descApplied, float64(r.AppliedIndex()))
	contact := 0.0
	if leader == 0 {
		if t := r.LastContact(); !t.IsZero() {
			contact = time.Since(t).Seconds()
		}
	}
	gauge(descLastContact, contact)
	ch <- prometheus.MustNewConstMetric(descLeaderChanges, prometheus.CounterValue, float64(c.n.metrics.leaderChanges.Load()))
	gauge(descRevision, float64(c.n.Revision()))
	c.n.metrics.apply.Collect(ch)
	c.n.metrics.readBarrier.Collect(ch)
	c.n.collectVoters(ch, leader == 1)
	c.n.collectQuotas(ch)
}

// peerAddr returns the Raft address of a server, "" if unknown.
func (n *Node) peerAddr(id raft.ServerID) string {
	f := n.r().GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return string(s.Address)
		}
	}
	return ""
}
