package tenantsync_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestAnOutdatedStreamIsCountedAndReported: a change the fence refuses is
// counted as outdated, not as a change the cluster could not write, and
// the host records an event naming the tenant and the load balancer
// written since, so that the operator sees why the agent reconnected.
func TestAnOutdatedStreamIsCountedAndReported(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	var mu sync.Mutex
	var events []*pb.Event
	h := startHost(t, tenantsync.Config{Events: func(e *pb.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}})
	h.seed(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.ts.Collector())
	vip := &pb.VIPRequest{Pool: "public"}
	old := h.open(t, "acme")
	if r := result(t, old.change(upsert(tcpLB("svc-ns-a", vip, "10.20.0.1:80"))), "svc-ns-a"); r.GetError() != "" {
		t.Fatalf("create: %s", r.GetError())
	}
	newer := h.open(t, "acme")
	if r := result(t, newer.change(upsert(tcpLB("svc-ns-a", vip, "10.20.0.3:80"))), "svc-ns-a"); r.GetError() != "" {
		t.Fatalf("the newer stream's write: %s", r.GetError())
	}
	expectEnd(t, old, upsert(tcpLB("svc-ns-a", vip, "10.20.0.2:80")))

	want := `# HELP teapot_lb_tenant_sync_changes_total Changes agents sent to this host (result=applied; failed: the cluster could not be written; outdated: a load balancer it writes was written by another stream or the operator since the stream read it, so nothing was written and the stream ended).
# TYPE teapot_lb_tenant_sync_changes_total counter
teapot_lb_tenant_sync_changes_total{result="applied",tenant="acme"} 2
teapot_lb_tenant_sync_changes_total{result="failed",tenant="acme"} 0
teapot_lb_tenant_sync_changes_total{result="outdated",tenant="acme"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "teapot_lb_tenant_sync_changes_total"); err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, e := range events {
		if e.GetType() == observe.EventTenantOutdated {
			got = append(got, e.GetTenant()+": "+e.GetMessage())
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "acme: stream of tenant acme (agent ") || !strings.Contains(got[0], "acme/svc-ns-a changed since it was read") {
		t.Errorf("tenant-outdated events %q, want one naming acme/svc-ns-a", got)
	}
}
