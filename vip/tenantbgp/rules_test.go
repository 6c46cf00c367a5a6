package tenantbgp

import (
	"net/netip"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func testWorld() *world {
	return compile([]*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/28"}}}},
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "kube", Networks: []string{"192.0.2.60/32", "10.244.0.0/16", "2001:db8:244::/48"},
			Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"192.0.2.60"}, MaxPrefixLength: 28, MaxPrefixLength6: 64}}}},
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "other", Networks: []string{"10.99.0.0/16", "10.244.200.0/24"},
			Bgp: &pb.TenantBGP{Asn: 64700, Peers: []string{"10.99.0.1", "192.0.2.60"}}}}},
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "plain", Networks: []string{"198.51.100.0/24"}}}},
	})
}

func TestJudge(t *testing.T) {
	t.Parallel()
	w := testWorld()
	kube := w.tenants["kube"]
	host := []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("10.244.9.1")}
	nh := netip.MustParseAddr("192.0.2.60")
	for _, tc := range []struct {
		prefix, nh, want string
	}{
		{"10.244.1.0/24", "", ""},
		{"10.244.1.0/28", "", ""},
		{"2001:db8:244:1::/64", "", ""}, // next hop below: IPv4, inside the networks
		{"0.0.0.0/0", "", ReasonDefault},
		{"::/0", "", ReasonDefault},
		{"10.99.0.0/16", "", ReasonOutside},
		{"10.0.0.0/8", "", ReasonOutside}, // covers the networks but is not inside them
		{"192.0.2.11/32", "", ReasonOutside},
		{"10.244.1.16/30", "", ReasonTooSpecific},
		{"2001:db8:244:1:8000::/65", "", ReasonTooSpecific},
		{"10.244.9.0/24", "", ReasonHostAddress},
		{"10.244.200.0/25", "", ReasonOtherTenant + " other"},
		{"10.244.1.0/24", "192.0.2.11", ReasonNextHopHost},
		{"10.244.1.0/24", "192.0.2.99", ReasonNextHop},
		{"10.244.1.0/24", "0.0.0.0", ReasonNoNextHop},
	} {
		hop := nh
		if tc.nh != "" {
			hop = netip.MustParseAddr(tc.nh)
		}
		got := w.judge(kube, netip.MustParsePrefix(tc.prefix), hop, host)
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s via %s: %q, want %q", tc.prefix, hop, got, tc.want)
		}
	}
}

func TestJudgeVIPPool(t *testing.T) {
	t.Parallel()
	w := compile([]*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "inside", Cidrs: []string{"10.244.5.10-10.244.5.20"}}}},
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "kube", Networks: []string{"10.244.0.0/16"}, Bgp: &pb.TenantBGP{Asn: 1, Peers: []string{"10.244.0.2"}}}}},
	})
	got := w.judge(w.tenants["kube"], netip.MustParsePrefix("10.244.5.0/24"), netip.MustParseAddr("10.244.0.2"), nil)
	if got != ReasonVIP+" inside" {
		t.Errorf("a prefix over a VIP pool's range: %q", got)
	}
}

func TestCompilePeerConflict(t *testing.T) {
	t.Parallel()
	w := testWorld()
	if w.peers[netip.MustParseAddr("192.0.2.60")] != "kube" || w.peers[netip.MustParseAddr("10.99.0.1")] != "other" {
		t.Fatalf("peers %v", w.peers)
	}
	if len(w.conflicts) != 1 || w.conflicts[0].tenant != "other" || w.conflicts[0].owner != "kube" {
		t.Fatalf("conflicts %+v", w.conflicts)
	}
	if _, ok := w.tenants["plain"]; ok {
		t.Error("a tenant without bgp has rules")
	}
}
