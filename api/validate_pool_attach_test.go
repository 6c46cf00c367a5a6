package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// attachedPool is an arp pool of 10.0.0.96/28 in tenant a's attachment.
func attachedPool() *pb.VIPPool {
	return &pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.96/28"}, Mode: "arp", Attachment: "a"}
}

func TestValidatePoolAttachment(t *testing.T) {
	t.Parallel()
	plain := &pb.Tenant{Name: "c", Domains: []string{"c.example"}, Networks: []string{"10.9.0.0/24"}, Pools: []string{"public"}}
	tests := []struct {
		name   string
		change func(*pb.VIPPool)
		want   expect
	}{
		{"valid", func(*pb.VIPPool) {}, pass()},
		{"tenants is the attachment's", func(p *pb.VIPPool) { p.Tenants = []string{"a"} }, pass()},
		{"range", func(p *pb.VIPPool) { p.Cidrs = []string{"10.0.0.100-10.0.0.110"} }, pass()},
		{"with interface", func(p *pb.VIPPool) { p.Interface = "eth1" }, bad("attachment", "not both; remove interface or attachment")},
		{"bgp, the tenant without bgp", func(p *pb.VIPPool) { p.Mode = "bgp" }, clash("mode", "tenant a has no bgp peers; give it bgp (tenant.bgp.peers) first, or use mode: arp")},
		{"static", func(p *pb.VIPPool) { p.Mode = "static" }, bad("attachment", "applies to arp and bgp pools only (this pool is static)")},
		{"other tenants", func(p *pb.VIPPool) { p.Tenants = []string{"b"} }, bad("tenants", "serves that tenant only; set tenants to [a]")},
		{"no such tenant", func(p *pb.VIPPool) { p.Attachment = "z" }, clash("attachment", "tenant z does not exist")},
		{"tenant not attached", func(p *pb.VIPPool) { p.Attachment = "c" }, clash("attachment", "tenant c has no attachment")},
		{"outside the networks", func(p *pb.VIPPool) { p.Cidrs = []string{"10.0.0.96/28", "10.0.1.0/28"} },
			bad("cidrs[1]", "10.0.1.0/28 is not inside tenant a's networks (10.0.0.0/24)")},
		{"straddles the networks", func(p *pb.VIPPool) { p.Cidrs = []string{"10.0.0.250-10.0.1.5"} }, bad("cidrs[0]", "is not inside tenant a's networks")},
		{"listed by another tenant", func(p *pb.VIPPool) { p.Name = "public" }, clash("attachment", "tenant b lists the pool in its pools")},
		{"holds a host's address", func(p *pb.VIPPool) { p.Cidrs = []string{"10.0.0.0/28"} }, bad("cidrs[0]", "holds 10.0.0.2, an LB host's address")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := attachedPool()
			tt.change(p)
			check(t, ValidatePool(p, catalogtest.New(publicPool(), attached("a", 100), attached("b", 200), plain)), tt.want)
		})
	}
}

// TestAttachmentPoolServesItsTenantOnly: only the tenant whose attachment
// holds a pool may list it and take addresses from it; the tenant cannot
// drop its attachment, narrow its networks off the pool or be deleted
// while the pool exists; the pool needs feature level 6.
func TestAttachmentPoolServesItsTenantOnly(t *testing.T) {
	t.Parallel()
	a, b := attached("a", 100), attached("b", 200)
	a.Pools = append(a.Pools, "a-private")
	c := catalogtest.New(publicPool(), attachedPool(), a, b)
	lb := func(tenant string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "web", Tenant: tenant, Vip: &pb.VIPRequest{Pool: "a-private"},
			Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
			Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.0.0.10:8080"}}}}}
	}
	check(t, ValidateLoadBalancer(lb("a"), c), pass())
	check(t, ValidateLoadBalancer(lb("b"), c), bad("vip.pool", "lives in tenant a's attachment and serves that tenant only"))

	b2 := attached("b", 200)
	b2.Pools = append(b2.Pools, "a-private")
	check(t, ValidateTenant(b2, c), bad("pools[1]", "VIP pool a-private lives in tenant a's attachment and serves that tenant only"))

	detached := attached("a", 100)
	detached.Pools, detached.Attachment = a.Pools, nil
	detached.Networks = []string{"10.7.0.0/24"}
	check(t, ValidateTenant(detached, c), clash("attachment", "VIP pool a-private lives in the tenant's attachment; delete that pool first"))
	narrowed := attached("a", 100)
	narrowed.Pools, narrowed.Networks = a.Pools, []string{"10.0.0.0/26"}
	narrowed.Attachment.Hosts["lb1"] = "10.0.0.2/26"
	check(t, ValidateTenant(narrowed, c), clash("networks", "VIP pool a-private (in the tenant's attachment) has 10.0.0.96/28, which would fall outside"))
	check(t, ValidateDelete(&pb.ObjectRef{Kind: KindTenant, Name: "a"}, c), clash("", "VIP pools a-private live in the tenant's attachment; delete them first"))

	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_VipPool{VipPool: attachedPool()}})
	if len(uses) != 1 || uses[0].Feature != FeaturePoolAttachment || uses[0].Field != "VIPPool a-private: attachment" || LevelNeeded(uses) != 6 {
		t.Fatalf("features used: %v", uses)
	}
}

// TestAttachmentPoolsOverlap: pools in different tenants' attachments may
// hold the same addresses (each tenant's network is a routing domain of
// its own), and each tenant's load balancer may take the same address
// from its own pool, by name, by address or allocated; a pool in an
// attachment still overlaps no pool of the host's network nor another of
// its own tenant.
func TestAttachmentPoolsOverlap(t *testing.T) {
	t.Parallel()
	a, b := attached("a", 100), attached("b", 200)
	a.Pools, b.Pools = []string{"a-private"}, []string{"b-private"}
	bPool := &pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.0.96/28"}, Mode: "arp", Attachment: "b"}
	c := catalogtest.New(publicPool(), attachedPool(), a, b)
	check(t, ValidatePool(bPool, c), pass())
	check(t, ValidatePool(&pb.VIPPool{Name: "a-second", Cidrs: []string{"10.0.0.100/32"}, Mode: "arp", Attachment: "a"}, c),
		clash("cidrs[0]", "10.0.0.100/32 overlaps 10.0.0.96/28 of VIP pool a-private"))
	check(t, ValidatePool(&pb.VIPPool{Name: "host", Cidrs: []string{"10.0.0.100/32"}, Mode: "arp"}, c),
		clash("cidrs[0]", "overlaps 10.0.0.96/28 of VIP pool a-private"))
	c.Put(bPool)

	lb := func(tenant, pool, addr string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "web", Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool, Address: addr},
			Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
			Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.0.0.10:8080"}}}}}
	}
	la := lb("a", "a-private", "")
	got, err := AllocateAddress(la, c)
	if err != nil || got.String() != "10.0.0.97" {
		t.Fatalf("a's address: %v, %v", got, err)
	}
	la.Status = &pb.LoadBalancerStatus{Address: got.String()}
	c.Put(la)
	// b takes the same address from its own pool: allocated, or asked for
	// by address alone (its own pool, not a's).
	for _, x := range []*pb.LoadBalancer{lb("b", "b-private", ""), lb("b", "", "10.0.0.97")} {
		check(t, ValidateLoadBalancer(x, c), pass())
		if got, err := AllocateAddress(x, c); err != nil || got.String() != "10.0.0.97" {
			t.Fatalf("b's address (pool %q): %v, %v; want 10.0.0.97 too", x.GetVip().GetPool(), got, err)
		}
	}
	// Within a's attachment the address is a's load balancer's.
	la2 := lb("a", "", "10.0.0.97")
	la2.Name = "other"
	if _, err := AllocateAddress(la2, c); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "address 10.0.0.97 is in use by LoadBalancer a/web") {
		t.Fatalf("a second load balancer of a on a's address: %v", err)
	}
}

// TestAttachmentPoolIsNoOtherTenantsVIP: another attached tenant with the
// same network may have a member on an address of a's private pool (its
// own network, which never reaches a's VIPs); a's own members may not.
func TestAttachmentPoolIsNoOtherTenantsVIP(t *testing.T) {
	t.Parallel()
	a, b := attached("a", 100), attached("b", 200)
	a.Pools, b.Pools = []string{"a-private", "public"}, []string{"public"}
	c := catalogtest.New(publicPool(), attachedPool(), a, b)
	lb := func(tenant, pool string) *pb.LoadBalancer {
		return &pb.LoadBalancer{Name: "web", Tenant: tenant, Vip: &pb.VIPRequest{Pool: pool},
			Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
			Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.0.0.100:8080"}}}}}
	}
	check(t, ValidateLoadBalancer(lb("b", "public"), c), pass())
	check(t, ValidateLoadBalancer(lb("a", "public"), c), bad("pools.web.members[0]", "10.0.0.100 is a virtual IP of this cluster"))
}

// TestValidateBGPPoolAttachment: a bgp pool in a tenant's attachment is
// valid when the tenant has bgp with a speaker, and the hosts' addresses in
// the attachment, of each family the pool has; the tenant cannot then drop
// its bgp while the pool exists; the pool needs feature level 7.
func TestValidateBGPPoolAttachment(t *testing.T) {
	t.Parallel()
	withBGP := func(peers ...string) *pb.Tenant {
		a := attached("a", 100)
		a.Networks = []string{"10.0.0.0/24", "10.0.1.0/24", "2001:db8::/64"}
		a.Bgp = &pb.TenantBGP{Asn: 64600, Peers: peers}
		return a
	}
	pool := func(cidrs ...string) *pb.VIPPool {
		return &pb.VIPPool{Name: "a-bgp", Cidrs: cidrs, Mode: "bgp", Attachment: "a", Communities: []string{"64600:7"}}
	}
	tests := []struct {
		name   string
		tenant *pb.Tenant
		pool   *pb.VIPPool
		want   expect
	}{
		{"valid", withBGP("10.0.0.10"), pool("10.0.1.96/28"), pass()},
		{"no speaker of the family", withBGP("10.0.0.10"), pool("10.0.1.96/28", "2001:db8::100/124"),
			clash("cidrs[1]", "2001:db8::100/124 is IPv6 and none of tenant a's speakers (bgp.peers) is")},
		{"no host address of the family", withBGP("10.0.0.10", "2001:db8::10"), pool("10.0.1.96/28", "2001:db8::100/124"),
			clash("cidrs[1]", "the hosts' addresses in tenant a's attachment are not, so none can be its next hop")},
		{"no peers", withBGP(), pool("10.0.1.96/28"), clash("mode", "tenant a has no bgp peers")},
		{"inside the attachment's segment", withBGP("10.0.0.10"), pool("10.0.1.96/28", "10.0.0.96/28"),
			clash("cidrs[1]", "10.0.0.96/28 overlaps 10.0.0.0/24, the segment of tenant a's attachment")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check(t, ValidatePool(tt.pool, catalogtest.New(publicPool(), tt.tenant, attached("b", 200))), tt.want)
		})
	}

	a := withBGP("10.0.0.10")
	a.Pools = append(a.Pools, "a-bgp")
	c := catalogtest.New(publicPool(), pool("10.0.1.96/28"), a, attached("b", 200))
	noBGP := withBGP("10.0.0.10")
	noBGP.Pools, noBGP.Bgp = a.Pools, nil
	check(t, ValidateTenant(noBGP, c), clash("bgp", "VIP pool a-bgp (a bgp pool in the tenant's attachment) is announced to the tenant's speakers, and this change would not let it be"))
	check(t, ValidateTenant(a, c), pass())
	wider := withBGP("10.0.0.10")
	wider.Pools, wider.Networks = a.Pools, []string{"10.0.0.0/23", "2001:db8::/64"}
	wider.Attachment.Hosts = map[string]string{"lb1": "10.0.0.2/23"}
	check(t, ValidateTenant(wider, c), clash("bgp", "10.0.1.96/28 overlaps 10.0.0.0/23, the segment of tenant a's attachment"))

	uses := FeaturesUsed(Wrap(pool("10.0.1.96/28")))
	if LevelNeeded(uses) != 7 || uses[len(uses)-1].Feature != FeaturePoolAttachmentBGP {
		t.Fatalf("uses %v (level %d), want %s at level 7", uses, LevelNeeded(uses), FeaturePoolAttachmentBGP)
	}
	if uses := FeaturesUsed(Wrap(attachedPool())); LevelNeeded(uses) != 6 {
		t.Fatalf("an arp pool in an attachment needs level %d, want 6", LevelNeeded(uses))
	}
}

// TestAttachmentPoolsOverlapAnnouncedAlike: pools in two tenants'
// attachments may share addresses only when announced alike (one host
// election and one announcement serve the address in both): a bgp pool
// over another tenant's arp pool, or with other communities or another
// withdrawWhenDown, is refused naming the other pool and the difference.
func TestAttachmentPoolsOverlapAnnouncedAlike(t *testing.T) {
	t.Parallel()
	tenant := func(name string, vni uint32) *pb.Tenant {
		x := attached(name, vni)
		x.Networks = []string{"10.0.0.0/24", "10.0.1.0/24"}
		x.Bgp = &pb.TenantBGP{Asn: 64600, Peers: []string{"10.0.0.10"}}
		x.Pools = []string{name + "-bgp"}
		return x
	}
	bgpPool := func(att string, comms ...string) *pb.VIPPool {
		return &pb.VIPPool{Name: att + "-bgp", Cidrs: []string{"10.0.1.96/28"}, Mode: "bgp", Attachment: att, Communities: comms}
	}
	c := catalogtest.New(publicPool(), bgpPool("a", "64600:7", "64600:8"), tenant("a", 100), tenant("b", 200))
	check(t, ValidatePool(bgpPool("b", "64600:8", "64600:7"), c), pass())
	check(t, ValidatePool(bgpPool("b", "64600:9"), c),
		clash("cidrs[0]", "overlaps 10.0.1.96/28 of VIP pool a-bgp in tenant a's attachment, with communities [64600:7, 64600:8] (this pool has [64600:9])"))
	wd := bgpPool("b", "64600:7", "64600:8")
	wd.WithdrawWhenDown = true
	check(t, ValidatePool(wd, c), clash("cidrs[0]", "of VIP pool a-bgp in tenant a's attachment, whose withdrawWhenDown is false"))
	arp := &pb.VIPPool{Name: "b-bgp", Cidrs: []string{"10.0.1.100/32"}, Mode: "arp", Attachment: "b"}
	check(t, ValidatePool(arp, c), clash("cidrs[0]", "10.0.1.100/32 overlaps 10.0.1.96/28 of VIP pool a-bgp in tenant a's attachment, which is bgp (this pool is arp)"))
}
