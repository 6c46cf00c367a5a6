package tenantsync_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestDualStackOverTheStream: the welcome tells the agent the cluster's
// feature level; a dual-stack load balancer written over the stream gets
// a VIP of each family in its ack and in the next welcome; a required
// family the pool lacks is refused with a reason naming vip.families.
func TestDualStackOverTheStream(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acme := h.open(t, "acme")
	if got := acme.welcome.GetFeatureLevel(); got != api.FeatureLevel {
		t.Fatalf("welcome feature level %d, want %d", got, api.FeatureLevel)
	}
	need := tcpLB("svc-shop-need", &pb.VIPRequest{Pool: "public", Families: []string{"ipv4", "ipv6"}}, "10.20.0.11:30080")
	ack := acme.change(upsert(need))
	if e := result(t, ack, "svc-shop-need").GetError(); !strings.Contains(e, "vip.families: VIP pool public has no IPv6 addresses") {
		t.Fatalf("require without IPv6 in the pool: %q", e)
	}
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28", "2001:db8:10::/124"}, Mode: "static"}),
	}}, false); err != nil {
		t.Fatal(err)
	}
	dual := tcpLB("svc-shop-dual", &pb.VIPRequest{Pool: "public", Families: []string{"ipv6", "ipv4"}}, "10.20.0.11:30080")
	ack = acme.change(upsert(dual))
	r := result(t, ack, "svc-shop-dual")
	if r.GetError() != "" || r.GetAddress() != "2001:db8:10::1" || !slices.Equal(r.GetAddresses(), []string{"2001:db8:10::1", "192.0.2.1"}) {
		t.Fatalf("ack %v; want both VIPs, IPv6 first", r)
	}
	again := h.open(t, "acme")
	for _, o := range again.welcome.GetObjects() {
		if o.GetName() == "svc-shop-dual" && slices.Equal(o.GetAddresses(), r.GetAddresses()) {
			return
		}
	}
	t.Fatalf("welcome %v; want svc-shop-dual with both VIPs", again.welcome.GetObjects())
}
