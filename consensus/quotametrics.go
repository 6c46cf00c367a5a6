package consensus

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api"
)

// Quota series: each tenant's usage of its tenant-wide quotas and the
// quotas themselves, from the state this host applied, so that an alert
// can say which tenant is at which bound before its next write is
// refused. Tenants are created by the operator, so the tenant label is
// bounded; resource takes the fixed values of quotaResources.
var (
	descQuotaUsed  = prometheus.NewDesc("teapot_lb_tenant_quota_used", "What a tenant uses of a tenant-wide quota (resource: load_balancers, addresses, listeners, routes, members, health_checks, stored_bytes).", []string{"tenant", "resource"}, nil)
	descQuotaLimit = prometheus.NewDesc("teapot_lb_tenant_quota_limit", "A tenant's tenant-wide quota (its default when the tenant leaves it unset).", []string{"tenant", "resource"}, nil)
	descVoters     = prometheus.NewDesc("teapot_lb_raft_voters", "Voters in the Raft configuration as this host knows it.", nil, nil)
	descReachable  = prometheus.NewDesc("teapot_lb_raft_voters_reachable", "Leader only: voters that answer its heartbeats, itself included.", nil, nil)
)

// quotaResources are the values of resource, in order.
var quotaResources = []string{"load_balancers", "addresses", "listeners", "routes", "members", "health_checks", "stored_bytes"}

// collectQuotas writes the quota series of every tenant in the state.
func (n *Node) collectQuotas(ch chan<- prometheus.Metric) {
	type row struct {
		tenant      string
		used, limit [7]float64
	}
	n.fsm.mu.RLock()
	tenants := n.fsm.st.list(api.KindTenant, "")
	rows := make([]row, 0, len(tenants))
	for _, o := range tenants {
		t := o.GetTenant()
		q := api.EffectiveQuotas(t)
		u := n.fsm.st.tenantUsage(t.GetName())
		rows = append(rows, row{tenant: t.GetName(),
			used: [7]float64{float64(u.LoadBalancers), float64(u.Addresses), float64(u.Listeners), float64(u.Routes),
				float64(u.Members), float64(u.HealthChecks), float64(u.StoredBytes)},
			limit: [7]float64{float64(q.GetLoadBalancers()), float64(q.GetAddresses()), float64(q.GetListeners()), float64(q.GetRoutes()),
				float64(q.GetMembers()), float64(q.GetHealthChecks()), float64(q.GetStoredBytes())}})
	}
	n.fsm.mu.RUnlock()
	for _, r := range rows {
		for i, res := range quotaResources {
			ch <- prometheus.MustNewConstMetric(descQuotaUsed, prometheus.GaugeValue, r.used[i], r.tenant, res)
			ch <- prometheus.MustNewConstMetric(descQuotaLimit, prometheus.GaugeValue, r.limit[i], r.tenant, res)
		}
	}
}

// peerFailureWindow: a voter whose heartbeats failed within it counts as
// unreachable. Raft retries a failing peer at least every half heartbeat
// timeout, so a peer still down fails again well within it; one whose
// recovery observation was dropped is back after it.
func (n *Node) peerFailureWindow() time.Duration {
	return max(10*time.Second, 8*n.cfg.HeartbeatTimeout)
}

// collectVoters writes the voters and, on the leader, those reachable.
func (n *Node) collectVoters(ch chan<- prometheus.Metric, leader bool) {
	f := n.r().GetConfiguration()
	if f.Error() != nil {
		return
	}
	voters, reachable := 0, 0
	now := time.Now()
	n.metrics.mu.Lock()
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if at, failing := n.metrics.failing[s.ID]; !failing || now.Sub(at) > n.peerFailureWindow() {
			reachable++
		}
	}
	n.metrics.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descVoters, prometheus.GaugeValue, float64(voters))
	if leader {
		ch <- prometheus.MustNewConstMetric(descReachable, prometheus.GaugeValue, float64(reachable))
	}
}

// peerFailed and peerResumed track the voters whose heartbeats fail, as
// the leader sees them; a new leader starts afresh.
func (m *raftMetrics) peerFailed(id raft.ServerID) {
	m.mu.Lock()
	m.failing[id] = time.Now()
	m.mu.Unlock()
}

func (m *raftMetrics) peerResumed(id raft.ServerID) {
	m.mu.Lock()
	delete(m.failing, id)
	m.mu.Unlock()
}

func (m *raftMetrics) leaderChanged() {
	m.mu.Lock()
	clear(m.failing)
	m.mu.Unlock()
}
