package api

import (
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// attached returns tenant name with network 10.0.0.0/24 attached over vni.
func attached(name string, vni uint32) *pb.Tenant {
	return &pb.Tenant{
		Name: name, Domains: []string{name + ".example"}, Networks: []string{"10.0.0.0/24"}, Pools: []string{"public"},
		Attachment: &pb.TenantAttachment{
			Vxlan: &pb.AttachmentVXLAN{Vni: vni, Remotes: []string{"192.0.2.7"}},
			Hosts: map[string]string{"lb1": "10.0.0.2/24"},
		},
	}
}

func TestValidateTenantAttachment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*pb.Tenant)
		want   expect
	}{
		{"valid", func(*pb.Tenant) {}, pass()},
		{"no vxlan", func(t *pb.Tenant) { t.Attachment.Vxlan = nil }, bad("attachment.vxlan", "is required")},
		{"no vni", func(t *pb.Tenant) { t.Attachment.Vxlan.Vni = 0 }, bad("attachment.vxlan.vni", "is required")},
		{"vni too big", func(t *pb.Tenant) { t.Attachment.Vxlan.Vni = 1 << 24 }, bad("attachment.vxlan.vni", "16777216 is over the largest VNI, 16777215")},
		{"vni of another tenant", func(t *pb.Tenant) { t.Attachment.Vxlan.Vni = 200 }, clash("attachment.vxlan.vni", "VNI 200 is the attachment of tenant b")},
		{"no remotes", func(t *pb.Tenant) { t.Attachment.Vxlan.Remotes = nil }, bad("attachment.vxlan.remotes", "is empty")},
		{"too many remotes", func(t *pb.Tenant) {
			t.Attachment.Vxlan.Remotes = strings.Split(strings.Repeat("192.0.2.9,", 17), ",")[:17]
		}, bad("attachment.vxlan.remotes", "has 17 entries; at most 16")},
		{"remote not an address", func(t *pb.Tenant) { t.Attachment.Vxlan.Remotes = []string{"vtep"} }, bad("attachment.vxlan.remotes[0]", `"vtep" is not an IP address`)},
		{"multicast remote", func(t *pb.Tenant) { t.Attachment.Vxlan.Remotes = []string{"239.1.1.1"} }, bad("attachment.vxlan.remotes[0]", "not a unicast address")},
		{"duplicate remote", func(t *pb.Tenant) { t.Attachment.Vxlan.Remotes = []string{"192.0.2.7", "192.0.2.7"} }, bad("attachment.vxlan.remotes[1]", "already listed as remotes[0]")},
		{"port", func(t *pb.Tenant) { t.Attachment.Vxlan.Port = 70000 }, bad("attachment.vxlan.port", "70000 is not a UDP port")},
		{"underlay", func(t *pb.Tenant) { t.Attachment.Vxlan.Underlay = "a-very-long-interface" }, bad("attachment.vxlan.underlay", "at most 15")},
		{"host key not a node id", func(t *pb.Tenant) { t.Attachment.Hosts["LB 2"] = "10.0.0.3/24" }, bad("attachment.hosts", "has a key that is not a node id")},
		{"no hosts", func(t *pb.Tenant) { t.Attachment.Hosts = nil }, bad("attachment.hosts", "is empty")},
		{"host not a prefix", func(t *pb.Tenant) { t.Attachment.Hosts["lb1"] = "10.0.0.2" }, bad("attachment.hosts.lb1", "not an address with its prefix length")},
		{"host outside networks", func(t *pb.Tenant) { t.Attachment.Hosts["lb1"] = "10.9.0.2/24" }, bad("attachment.hosts.lb1", "outside the tenant's networks")},
		{"host is the network", func(t *pb.Tenant) { t.Attachment.Hosts["lb1"] = "10.0.0.0/24" }, bad("attachment.hosts.lb1", "the network's own address; give the host's address in it (like 10.0.0.1)")},
		{"two hosts one address", func(t *pb.Tenant) { t.Attachment.Hosts["lb2"] = "10.0.0.2/24" }, bad("attachment.hosts.lb2", "10.0.0.2 is already the address of host lb1")},
		{"gateway off the prefix", func(t *pb.Tenant) { t.Attachment.Gateway = "10.0.1.1" }, bad("attachment.gateway", "not on the prefix of any host's address")},
		{"gateway", func(t *pb.Tenant) { t.Attachment.Gateway = "10.0.0.1" }, pass()},
		{"mtu", func(t *pb.Tenant) { t.Attachment.Mtu = 100 }, bad("attachment.mtu", "100 is out of range; give 1280 to 9000 (0: 1450)")},
		{"bgp", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 65001, Peers: []string{"10.0.0.9"}} }, pass()},
		{"bgp reannounce", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 65001, Peers: []string{"10.0.0.9"}, Reannounce: true, Community: "64512:1"}
		}, bad("bgp.reannounce", "cannot be used with attachment: the tenant's routes live in its own address space")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := attached("a", 100)
			tt.change(a)
			check(t, ValidateTenant(a, catalogtest.New(publicPool(), attached("b", 200))), tt.want)
		})
	}
}

// Two tenants may own the same network only when both are attached; the
// refusal says so.
func TestValidateTenantOverlapNeedsBothAttached(t *testing.T) {
	t.Parallel()
	b := attached("b", 200)
	a := attached("a", 100)
	check(t, ValidateTenant(a, catalogtest.New(publicPool(), b)), pass())

	plain := attached("a", 100)
	plain.Attachment = nil
	check(t, ValidateTenant(plain, catalogtest.New(publicPool(), b)),
		clash("networks[0]", "network 10.0.0.0/24 overlaps 10.0.0.0/24 of tenant b; tenants share addresses only when both are attached through a namespace of their own (attachment), so attach both or narrow one of them"))

	bPlain := attached("b", 200)
	bPlain.Attachment = nil
	check(t, ValidateTenant(a, catalogtest.New(publicPool(), bPlain)), clash("networks[0]", "overlaps 10.0.0.0/24 of tenant b"))

	// Detaching one of two attached tenants that share a network is
	// refused: the overlap stored was allowed by the attachments.
	c := catalogtest.New(publicPool(), a, b)
	c.Put(plain)
	check(t, ValidateTenant(plain, stateView{Catalog: c, prior: catalogtest.New(publicPool(), a, b)}), clash("networks[0]", "overlaps 10.0.0.0/24 of tenant b"))

	if got := NetworkOverlaps(catalogtest.New(a, b)); len(got) != 0 {
		t.Fatalf("attached tenants' overlap is listed: %q", got)
	}
	if got := NetworkOverlaps(catalogtest.New(plain, b)); len(got) != 1 {
		t.Fatalf("overlap with an unattached tenant: %q, want one", got)
	}
}

// An attachment needs feature level 6: a host of an earlier release would
// dial the tenant's members from its own routing table.
func TestTenantAttachmentFeatureLevel(t *testing.T) {
	t.Parallel()
	obj := &pb.Object{Kind: &pb.Object_Tenant{Tenant: attached("a", 100)}}
	uses := FeaturesUsed(obj)
	if len(uses) != 1 || uses[0].Feature != FeatureTenantAttachment || !strings.HasSuffix(uses[0].Field, ": attachment") || LevelNeeded(uses) != 6 {
		t.Fatalf("FeaturesUsed %v (level %d); want attachment at level 6", uses, LevelNeeded(uses))
	}
}

// BGP sessions of an attached tenant need feature level 7: a host of an
// earlier release would dial its speakers from its own routing table.
func TestTenantBGPAttachedFeatureLevel(t *testing.T) {
	t.Parallel()
	tn := attached("a", 100)
	tn.Bgp = &pb.TenantBGP{Asn: 65001, Peers: []string{"10.0.0.9"}}
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_Tenant{Tenant: tn}})
	if LevelNeeded(uses) != 7 || uses[len(uses)-1].Feature != FeatureTenantBGPAttached {
		t.Fatalf("FeaturesUsed %v (level %d); want bgp with attachment at level 7", uses, LevelNeeded(uses))
	}
}

// attachment.hosts names LB hosts by node id: an id that is no host of
// the cluster is refused (no host would ever read it), naming the hosts
// there are; one the stored attachment already names (a host removed
// since) is kept, so that the tenant's other changes go through.
func TestValidateTenantAttachmentUnknownNode(t *testing.T) {
	t.Parallel()
	node := func(id string) *pb.Node { return &pb.Node{Id: id} }
	a := attached("a", 100)
	check(t, ValidateTenant(a, catalogtest.New(publicPool(), node("lb1"), node("lb2"))), pass())

	a.Attachment.Hosts["lb9"] = "10.0.0.9/24"
	check(t, ValidateTenant(a, catalogtest.New(publicPool(), node("lb1"), node("lb2"))),
		bad("attachment.hosts.lb9", "lb9 is not a host of the cluster (its hosts: lb1, lb2); key each address by a node id that cluster status lists"))

	many := []any{publicPool()}
	for _, id := range []string{"lb1", "lb2", "lb3", "lb4", "lb5", "lb6", "lb7"} {
		many = append(many, node(id))
	}
	check(t, ValidateTenant(a, catalogtest.New(many...)), bad("attachment.hosts.lb9", "(its hosts: lb1, lb2, lb3, lb4, lb5 and 2 more)"))

	// lb9 was a host when the attachment was stored; it left since.
	stored := attached("a", 100)
	stored.Attachment.Hosts["lb9"] = "10.0.0.9/24"
	changed := attached("a", 100)
	changed.Attachment.Hosts["lb9"] = "10.0.0.9/24"
	changed.Domains = append(changed.Domains, "a.test")
	c := catalogtest.New(publicPool(), node("lb1"), changed)
	check(t, ValidateTenant(changed, stateView{Catalog: c, prior: catalogtest.New(publicPool(), node("lb1"), stored)}), pass())
}

// An attachment's VXLAN socket holds its UDP port on every address of
// each host: a port of the hosts' own UDP services or of a load
// balancer's UDP listener is refused for it, and a UDP listener (or
// HTTP/3) on an attachment's port is refused for a load balancer.
func TestVXLANPortHeldOnEveryAddress(t *testing.T) {
	t.Parallel()
	lb1 := &pb.Node{Id: "lb1", HeartbeatAddr: "192.0.2.101:7946", Services: []*pb.NodeService{{Name: ServiceRateShare, Addr: "192.0.2.101:7947"}}}
	withPort := func(p uint32) *pb.Tenant {
		a := attached("a", 100)
		a.Attachment.Vxlan.Port = p
		return a
	}
	check(t, ValidateTenant(withPort(0), catalogtest.New(publicPool(), lb1)), pass())
	check(t, ValidateTenant(withPort(7946), catalogtest.New(publicPool(), lb1)),
		clash("attachment.vxlan.port", "7946 is the UDP port of host lb1's heartbeat; the tunnel's socket holds its port on every address of each host, so give another (0: 4789)"))
	check(t, ValidateTenant(withPort(7947), catalogtest.New(publicPool(), lb1)), clash("attachment.vxlan.port", "7947 is the UDP port of host lb1's rate-share"))

	dns := withAddr(udpLB("dns", "", 4789), "198.51.100.1")
	check(t, ValidateTenant(withPort(0), catalogtest.New(publicPool(), sharedPool(), lb1, acmeTenant(), dns)),
		clash("attachment.vxlan.port", "4789/udp is the port of listeners[0] of LoadBalancer acme/dns; the tunnel's socket would hold it on every address of each host, so give another (0: 4789) or move that listener"))
	check(t, ValidateTenant(withPort(4790), catalogtest.New(publicPool(), sharedPool(), lb1, acmeTenant(), dns)), pass())

	// A load balancer's UDP port that an attachment holds.
	c := catalogtest.New(publicPool(), sharedPool(), acmeTenant(), withPort(0))
	check(t, ValidateLoadBalancer(udpLB("dns", "", 4789), c), clash("listeners[0].port", "UDP port 4789 is held on the LB hosts by a tenant network attachment's VXLAN tunnel, on every address; use another port"))
	check(t, ValidateLoadBalancer(udpLB("dns", "", 4790), c), pass())
	h3 := shopLB()
	h3.Listeners[0].Port, h3.Listeners[0].Http3 = 4789, true
	check(t, ValidateLoadBalancer(h3, c), clash("listeners[0].http3", "HTTP/3 serves UDP port 4789, which a tenant network attachment's VXLAN tunnel holds"))
	h3.Listeners[0].Http3 = false
	check(t, ValidateLoadBalancer(h3, c), pass())
}
