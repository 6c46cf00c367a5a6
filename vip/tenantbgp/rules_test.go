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
	}, "lb1")
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
	}, "lb1")
	got := w.judge(w.tenants["kube"], netip.MustParsePrefix("10.244.5.0/24"), netip.MustParseAddr("10.244.0.2"), nil)
	if got != ReasonVIP+" inside" {
		t.Errorf("a prefix over a VIP pool's range: %q", got)
	}
}

func TestCompilePeerConflict(t *testing.T) {
	t.Parallel()
	w := testWorld()
	if w.peers[peerKey{addr: netip.MustParseAddr("192.0.2.60")}] != "kube" || w.peers[peerKey{addr: netip.MustParseAddr("10.99.0.1")}] != "other" {
		t.Fatalf("peers %v", w.peers)
	}
	if len(w.conflicts) != 1 || w.conflicts[0].tenant != "other" || w.conflicts[0].owner != "kube" {
		t.Fatalf("conflicts %+v", w.conflicts)
	}
	if _, ok := w.tenants["plain"]; ok {
		t.Error("a tenant without bgp has rules")
	}
}

// attachedWorld has two attached tenants with the same networks and
// speaker address, a tenant of the host's table whose networks cover
// the host's own 10.0.0.1, and a pool in tenant a's attachment.
func attachedWorld() *world {
	att := func(name string, vni uint32) *pb.Tenant {
		return &pb.Tenant{Name: name, Networks: []string{"10.0.0.0/24", "10.0.1.0/24"},
			Attachment: &pb.TenantAttachment{Vxlan: &pb.AttachmentVXLAN{Vni: vni, Remotes: []string{"203.0.113.2"}}, Hosts: map[string]string{"lb1": "10.0.0.2/24"}},
			Bgp:        &pb.TenantBGP{Asn: 64600, Peers: []string{"10.0.0.10"}}}
	}
	elsewhere := att("far", 300)
	elsewhere.Attachment.Hosts = map[string]string{"lb2": "10.0.0.2/24"}
	gw := att("g", 400)
	gw.Attachment.Gateway = "10.0.0.1"
	gw.Bgp.Peers = []string{"10.0.0.11"}
	return compile([]*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "public", Cidrs: []string{"10.0.1.0/28"}}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "a-private", Attachment: "a", Cidrs: []string{"10.0.1.100/32"}}}},
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "g-bgp", Attachment: "g", Mode: "bgp", Cidrs: []string{"10.0.1.200/32"}}}},
		{Kind: &pb.Object_Tenant{Tenant: att("a", 100)}},
		{Kind: &pb.Object_Tenant{Tenant: att("b", 200)}},
		{Kind: &pb.Object_Tenant{Tenant: elsewhere}},
		{Kind: &pb.Object_Tenant{Tenant: gw}},
	}, "lb1")
}

// An attached tenant's routes go to its namespace: two attached tenants
// with the same networks each have their session with the same speaker
// address and may each have the same route; what counts as this host's
// address is its address in the attachment, and the VIP pools that
// count are those of the tenant's attachment.
func TestJudgeAttached(t *testing.T) {
	t.Parallel()
	w := attachedWorld()
	speaker := netip.MustParseAddr("10.0.0.10")
	for _, name := range []string{"a", "b"} {
		if got := w.peers[peerKey{space: name, addr: speaker}]; got != name {
			t.Errorf("the speaker in %s's space belongs to %q", name, got)
		}
	}
	if len(w.conflicts) != 0 {
		t.Errorf("attached tenants' equal speakers conflict: %+v", w.conflicts)
	}
	if !w.unlisted["far"] || len(w.peers) != 3 {
		t.Errorf("a tenant attached on another host only has sessions here: peers %v, unlisted %v", w.peers, w.unlisted)
	}
	host := []netip.Addr{netip.MustParseAddr("10.0.0.1")} // the host's own table overlaps the tenants'
	for _, tc := range []struct {
		tenant, prefix, nh, want string
	}{
		{"a", "10.0.1.0/24", "10.0.0.10", "overlaps VIP pool a-private"},
		{"b", "10.0.1.0/24", "10.0.0.10", ""}, // a's pool is in a's space; public is the host's
		{"b", "10.0.1.0/25", "10.0.0.10", ""},
		{"a", "10.0.0.0/25", "10.0.0.10", ReasonHostAddress}, // covers 10.0.0.2, the host's in the attachment
		{"b", "10.0.0.128/25", "10.0.0.10", ""},              // covers the host table's 10.0.0.1 only
		{"b", "10.0.1.0/24", "10.0.0.2", ReasonNextHopHost},  // the host in the attachment
		{"b", "10.0.1.0/24", "10.0.0.1", ""},                 // an address of the host's own table
		{"b", "10.0.2.0/24", "10.0.0.10", ReasonOutside},
		{"b", "10.0.0.0/24", "10.0.0.10", ReasonAttachmentRoute},       // the attachment's segment
		{"g", "10.0.1.0/24", "10.0.0.10", ReasonAttachmentRoute},       // g's attachment routes it through its gateway
		{"g", "10.0.1.0/25", "10.0.0.10", ""},                          // more specific: beside the gateway's
		{"g", "10.0.1.200/32", "10.0.0.11", "overlaps VIP pool g-bgp"}, // the VIP announced to g's speaker, sent back
		{"b", "10.0.1.200/32", "10.0.0.10", ""},                        // g's VIP is not b's
	} {
		got := w.judge(w.tenants[tc.tenant], netip.MustParsePrefix(tc.prefix), netip.MustParseAddr(tc.nh), host)
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %s via %s: %q, want %q", tc.tenant, tc.prefix, tc.nh, got, tc.want)
		}
	}
	// A tenant of the host's table with the same networks is judged
	// against the host's table: the attached tenants' networks are not
	// in it.
	plain := &tenantRules{name: "plain", nets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}, maxLen: [2]int{32, 128}}
	if got := w.judge(plain, netip.MustParsePrefix("10.0.1.128/25"), netip.MustParseAddr("10.0.0.10"), nil); got != "" {
		t.Errorf("a tenant of the host's table over attached tenants' networks: %q", got)
	}
	if got := w.judge(plain, netip.MustParsePrefix("10.0.1.0/28"), netip.MustParseAddr("10.0.0.10"), nil); !strings.HasPrefix(got, ReasonVIP+" public") {
		t.Errorf("a tenant of the host's table over the host's pool: %q", got)
	}
}
