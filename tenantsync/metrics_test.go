package tenantsync_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestStreamGaugeForEveryTenant: every tenant of the state has
// teapot_lb_tenant_sync_streams, 0 until its agent connects, so that an
// alert on a tenant without a stream compares a value instead of missing
// a series.
func TestStreamGaugeForEveryTenant(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.ts.Collector())
	check := func(want string) {
		t.Helper()
		head := "# HELP teapot_lb_tenant_sync_streams Agent streams open on this host.\n# TYPE teapot_lb_tenant_sync_streams gauge\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(head+want), "teapot_lb_tenant_sync_streams"); err != nil {
			t.Error(err)
		}
	}
	check("teapot_lb_tenant_sync_streams{tenant=\"acme\"} 0\nteapot_lb_tenant_sync_streams{tenant=\"beta\"} 0\n")
	h.open(t, "acme")
	check("teapot_lb_tenant_sync_streams{tenant=\"acme\"} 1\nteapot_lb_tenant_sync_streams{tenant=\"beta\"} 0\n")
}
