package tenantsync_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// A member is never a VIP of the cluster, even when the operator gave the
// tenant a network over a VIP pool, and a health check never probes an LB
// host's service port (no port oracle).
func TestMembersNeverTheClustersOwnAddresses(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wide := &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}, Networks: []string{"10.20.0.0/16", "192.0.2.0/24"}, Pools: []string{"public"}}
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(wide)}}, false); err != nil {
		t.Fatal(err)
	}
	acme := h.open(t, "acme")
	ack := acme.change(upsert(
		tcpLB("svc-x-vip", &pb.VIPRequest{Pool: "public"}, "192.0.2.3:80"),
		tcpLB("svc-x-net", &pb.VIPRequest{Pool: "public"}, "192.0.2.100:80"),
	))
	if e := result(t, ack, "svc-x-vip").GetError(); !strings.Contains(e, "virtual IP of this cluster") {
		t.Errorf("member inside the VIP pool: error %q, want it refused as a VIP", e)
	}
	if e := result(t, ack, "svc-x-net").GetError(); e != "" {
		t.Errorf("member in the tenant's network outside the VIP pool refused: %s", e)
	}

	apiAddr := netip.MustParseAddrPort(h.addr)
	beta := h.open(t, "beta")
	probe := tcpLB("svc-x-probe", &pb.VIPRequest{Pool: "public"}, netip.AddrPortFrom(apiAddr.Addr(), 9).String())
	probe.Pools["web"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Port: uint32(apiAddr.Port())}
	if e := result(t, beta.change(upsert(probe)), "svc-x-probe").GetError(); !strings.Contains(e, "healthCheck.port") {
		t.Errorf("health check on an LB host's API port: error %q, want it refused", e)
	}
}
