package consensus

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// gather returns the values of one host's Raft collector by name and
// label values ("name{v1,v2}").
func gather(t testing.TB, n *Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if len(m.GetLabel()) > 0 {
				key += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						key += ","
					}
					key += l.GetValue()
				}
				key += "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

// TestQuotaSeries: each tenant of the state has its tenant-wide quotas
// and its usage of them, which follow its writes.
func TestQuotaSeries(t *testing.T) {
	t.Parallel()
	h := startHost(t, Config{NodeID: "n1"})
	small := tenant("small", "public")
	small.GetTenant().Quotas = &pb.Quotas{LoadBalancers: 5}
	apply(t, h.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), small)
	apply(t, h.node, lb("acme", "shop", "public"), lb("acme", "cart", "public"))
	got := gather(t, h.node)
	for key, want := range map[string]float64{
		"teapot_lb_tenant_quota_used{load_balancers,acme}":   2,
		"teapot_lb_tenant_quota_used{members,acme}":          2,
		"teapot_lb_tenant_quota_used{load_balancers,small}":  0,
		"teapot_lb_tenant_quota_limit{load_balancers,acme}":  100,
		"teapot_lb_tenant_quota_limit{load_balancers,small}": 5,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if got["teapot_lb_tenant_quota_used{stored_bytes,acme}"] <= 0 {
		t.Errorf("acme stores nothing: %v", got["teapot_lb_tenant_quota_used{stored_bytes,acme}"])
	}
	if got["teapot_lb_raft_voters"] != 1 || got["teapot_lb_raft_voters_reachable"] != 1 {
		t.Errorf("one host: voters %v, reachable %v; want 1 and 1", got["teapot_lb_raft_voters"], got["teapot_lb_raft_voters_reachable"])
	}
}

// TestVotersReachable: the leader counts a voter whose heartbeats fail as
// unreachable, and again as reachable once it is back.
func TestVotersReachable(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	leader := leaderOf(t, hosts)
	wait := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := gather(t, leader.node)
			if got["teapot_lb_raft_voters"] == 3 && got["teapot_lb_raft_voters_reachable"] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("voters %v, reachable %v; want 3 and %v", got["teapot_lb_raft_voters"], got["teapot_lb_raft_voters_reachable"], want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait(3)
	for _, h := range hosts {
		if h != leader {
			if v, ok := gather(t, h.node)["teapot_lb_raft_voters_reachable"]; ok {
				t.Errorf("follower %s exports voters_reachable %v; only the leader knows", h.cfg.NodeID, v)
			}
			h.stop()
			break
		}
	}
	wait(2)
}
