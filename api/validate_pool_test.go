package api

import (
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidatePool(t *testing.T) {
	tests := []struct {
		name string
		pool *pb.VIPPool
		want expect
	}{
		{"valid", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24", "2001:db8:99::/64"}, Mode: "bgp", Communities: []string{"65000:100", "0:65535"}}, pass()},
		{"range", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.10-203.0.113.20", "2001:db8:99::10 - 2001:db8:99::20"}, Mode: "static"}, pass()},
		{"name bad", &pb.VIPPool{Name: "-edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp"}, bad("name", "must be 1 to 63")},
		{"no cidrs", &pb.VIPPool{Name: "edge", Mode: "arp"}, bad("cidrs", "at least one CIDR or range is required")},
		{"cidr not canonical", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.7/24"}, Mode: "arp"}, bad("cidrs[0]", "203.0.113.7/24 is not in canonical form; use 203.0.113.0/24")},
		{"cidr garbage", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24", "lots"}, Mode: "arp"}, bad("cidrs[1]", `"lots" is not a CIDR or a range`)},
		{"single address", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.7"}, Mode: "arp"}, bad("cidrs[0]", "write it as 203.0.113.7/32")},
		{"range mixed families", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.1-2001:db8::1"}, Mode: "arp"}, bad("cidrs[0]", "different families")},
		{"range reversed", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.20-203.0.113.10"}, Mode: "arp"}, bad("cidrs[0]", "start 203.0.113.20 is after end 203.0.113.10")},
		{"range bad end", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.1-x"}, Mode: "arp"}, bad("cidrs[0]", `"x" is not an IP address`)},
		{"overlap inside pool", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24", "203.0.113.100-203.0.113.110"}, Mode: "arp"},
			bad("cidrs[1]", "203.0.113.100-203.0.113.110 overlaps cidrs[0] (203.0.113.0/24)")},
		{"adjacent inside pool", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/25", "203.0.113.128/25"}, Mode: "arp"}, pass()},
		{"overlap other pool", &pb.VIPPool{Name: "edge", Cidrs: []string{"192.0.2.8/29"}, Mode: "arp"},
			clash("cidrs[0]", "192.0.2.8/29 overlaps 192.0.2.0/28 of VIP pool public")},
		{"overlap other pool v6", &pb.VIPPool{Name: "edge", Cidrs: []string{"2001:db8:10::/48"}, Mode: "arp"},
			clash("cidrs[0]", "2001:db8:10::/48 overlaps 2001:db8:10::/124 of VIP pool public")},
		{"overlap other pool range", &pb.VIPPool{Name: "edge", Cidrs: []string{"198.51.100.7-198.51.100.9"}, Mode: "arp"},
			clash("cidrs[0]", "overlaps 198.51.100.0/29 of VIP pool shared")},
		{"withdrawWhenDown in bgp", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "bgp", WithdrawWhenDown: true}, pass()},
		{"withdrawWhenDown in arp", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", WithdrawWhenDown: true}, bad("withdrawWhenDown", "applies to bgp pools only (this pool is arp)")},
		{"withdrawWhenDown in static", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "static", WithdrawWhenDown: true}, bad("withdrawWhenDown", "use mode: bgp")},
		{"interface in arp", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Interface: "eth1"}, pass()},
		{"interface longest", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Interface: "vlan.private-01"}, pass()},
		{"interface too long", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Interface: "vlan.private-012"}, bad("interface", "is 16 bytes long; an interface name has at most 15")},
		{"interface slash", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Interface: "eth/1"}, bad("interface", "is not an interface name")},
		{"interface space", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Interface: "eth 1"}, bad("interface", "is not an interface name")},
		{"interface dot", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Interface: ".."}, bad("interface", "is not an interface name")},
		{"interface in bgp", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "bgp", Interface: "eth1"}, bad("interface", "applies to arp pools only (this pool is bgp)")},
		{"interface in static", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "static", Interface: "eth1"}, bad("interface", "use mode: arp")},
		{"mode missing", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}}, bad("mode", "required: arp, bgp or static")},
		{"mode bad", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "ospf"}, bad("mode", `"ospf" is not one of arp, bgp, static`)},
		{"tenants", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Tenants: []string{"acme", "other"}}, pass()},
		{"tenant unknown", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Tenants: []string{"acme", "nobody"}}, bad("tenants[1]", "tenant nobody does not exist")},
		{"tenant duplicate", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Tenants: []string{"acme", "acme"}}, bad("tenants[1]", "already listed")},
		{"community big", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "bgp", Communities: []string{"65536:1"}}, bad("communities[0]", "0 to 65535")},
		{"community shape", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "bgp", Communities: []string{"65000:1", "65000"}}, bad("communities[1]", "ASN:VALUE")},
		{"community sign", &pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.0/24"}, Mode: "bgp", Communities: []string{"+1:1"}}, bad("communities[0]", "ASN:VALUE")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, ValidatePool(tt.pool, baseCatalog()), tt.want)
		})
	}
}

func TestValidatePoolKeepsAddresses(t *testing.T) {
	byAddress := withAddr(udpLB("fixed", "", 54), "192.0.2.14")
	byAddress.Vip = &pb.VIPRequest{Address: "192.0.2.14"}
	tests := []struct {
		name string
		mut  func(p *pb.VIPPool)
		want expect
	}{
		{"unchanged", func(p *pb.VIPPool) {}, pass()},
		{"grow", func(p *pb.VIPPool) { p.Cidrs[0] = "192.0.2.0/27" }, pass()},
		{"shrink keeping addresses", func(p *pb.VIPPool) { p.Cidrs[0] = "192.0.2.1-192.0.2.14" }, pass()},
		{"shrink dropping address", func(p *pb.VIPPool) { p.Cidrs[0] = "192.0.2.0/29" },
			clash("cidrs", "LoadBalancer acme/fixed holds 192.0.2.14, which would fall outside the pool")},
		{"drop v6 entry", func(p *pb.VIPPool) { p.Cidrs = p.Cidrs[:1] },
			clash("cidrs", "LoadBalancer acme/shop holds 2001:db8:10::1")},
		{"restrict to other tenant", func(p *pb.VIPPool) { p.Tenants = []string{"other"} },
			clash("tenants", "LoadBalancer acme/fixed of tenant acme uses this pool; add acme to tenants")},
		{"restrict including tenant", func(p *pb.VIPPool) { p.Tenants = []string{"acme"} }, pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCatalog()
			shop := withAddr(shopLB(), "2001:db8:10::1")
			c.Put(shop, byAddress)
			p := publicPool()
			tt.mut(p)
			check(t, ValidatePool(p, c), tt.want)
		})
	}
	t.Run("stop sharing while shared", func(t *testing.T) {
		c := baseCatalog()
		c.Put(withAddr(udpLB("a", "k", 53), "198.51.100.1"), withAddr(udpLB("b", "k", 54), "198.51.100.1"))
		p := sharedPool()
		p.AllowShared = false
		check(t, ValidatePool(p, c), clash("allowShared", "LoadBalancer acme/a and LoadBalancer acme/b share 198.51.100.1"))
	})
}
