package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestWriteAttachmentPools: explain tenant lists the pools in the
// tenant's attachment (not another tenant's, not the hosts' own), and for
// each VIP of theirs what every host reports: the holder and those that
// released it, with the reason; a pool with no VIP reported says so.
func TestWriteAttachmentPools(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pool := func(name, tenant, cidr string) *pb.Object {
		return &pb.Object{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: name, Cidrs: []string{cidr}, Mode: "arp", Attachment: tenant}}}
	}
	pools := []*pb.Object{pool("a-private", "a", "10.0.0.96/28"), pool("a-empty", "a", "10.0.1.0/28"), pool("b-private", "b", "10.0.0.96/28"), pool("public", "", "192.0.2.0/28")}
	hosts := []*pb.HostObservation{
		{NodeId: "n1", Reachable: true, Vips: []*pb.VIPHolding{{Address: "10.0.0.100", Mode: "arp", State: "holding", Since: timestamppb.New(now.Add(-time.Minute)), Reason: "ranks first"}}},
		{NodeId: "n2", Reachable: true, Vips: []*pb.VIPHolding{{Address: "10.0.0.100", Mode: "arp", State: "released",
			Reason: "tenant a's attachment, which carries this VIP, is not up on this host (no namespace teapot-att-a)"},
			{Address: "192.0.2.1", Mode: "arp", State: "holding"}}},
	}
	var b strings.Builder
	writeAttachmentPools(&b, now, &pb.Tenant{Name: "a"}, pools, hosts)
	out := b.String()
	for _, want := range []string{"VIP pools in the attachment (announced and served inside namespace teapot-att-a)", "a-private (10.0.0.96/28, arp)",
		"10.0.0.100   n1     holding", "10.0.0.100   n2     released", "no namespace teapot-att-a", "a-empty (10.0.1.0/28, arp)", "no host reports a VIP of this pool"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	for _, not := range []string{"b-private", "public", "192.0.2.1"} {
		if strings.Contains(out, not) {
			t.Errorf("%q in\n%s", not, out)
		}
	}
	b.Reset()
	writeAttachmentPools(&b, now, &pb.Tenant{Name: "c"}, pools, hosts)
	if b.Len() != 0 {
		t.Errorf("a tenant without pools in its attachment: %q", b.String())
	}
}

// TestPoolUseCountsItsTenantOnly: a pool in a tenant's attachment counts
// the addresses of that tenant's load balancers only, though another
// attached tenant holds the same address from its own pool.
func TestPoolUseCountsItsTenantOnly(t *testing.T) {
	t.Parallel()
	p := &pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.96/28"}, Mode: "arp", Attachment: "a"}
	lb := func(tenant, pool, addr string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "web", Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool}, Status: &pb.LoadBalancerStatus{Address: addr}}
	}
	if n := used(p, []*pb.LoadBalancer{lb("a", "a-private", "10.0.0.100"), lb("b", "", "10.0.0.101"), lb("b", "a-private", "10.0.0.102")}); n != 1 {
		t.Fatalf("used = %d, want 1 (a's address only)", n)
	}
}
