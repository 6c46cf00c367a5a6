package api

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateTenant(t *testing.T) {
	tests := []struct {
		name string
		mut  func(t *pb.Tenant)
		want expect
	}{
		{"valid", func(t *pb.Tenant) {}, pass()},
		{"quotas any", func(t *pb.Tenant) { t.Quotas = &pb.Quotas{LoadBalancers: 1, Addresses: 0, Certificates: 7} }, pass()},
		{"no domains networks or pools", func(t *pb.Tenant) { t.Domains, t.Networks, t.Pools = nil, nil, nil }, pass()},
		{"name bad", func(t *pb.Tenant) { t.Name = "acme corp" }, bad("name", `"acme corp" must be 1 to 63`)},
		{"name missing", func(t *pb.Tenant) { t.Name = "" }, bad("name", "required")},
		{"domain several", func(t *pb.Tenant) { t.Domains = append(t.Domains, "acme-shop.example", "xn--acme-9ra.example") }, pass()},
		{"domain wildcard", func(t *pb.Tenant) { t.Domains[0] = "*.acme.example" }, bad("domains[0]", "wildcards are not allowed; acme.example covers")},
		{"domain uppercase", func(t *pb.Tenant) { t.Domains[0] = "ACME.example" }, bad("domains[0]", "use acme.example")},
		{"domain trailing dot", func(t *pb.Tenant) { t.Domains[0] = "acme.example." }, bad("domains[0]", "remove the trailing dot")},
		{"domain bad label", func(t *pb.Tenant) { t.Domains[0] = "acme_corp.example" }, bad("domains[0]", "is not a DNS name")},
		{"domain empty label", func(t *pb.Tenant) { t.Domains[0] = "acme..example" }, bad("domains[0]", "is not a DNS name")},
		{"domain empty", func(t *pb.Tenant) { t.Domains[0] = "" }, bad("domains[0]", "empty")},
		{"domain duplicate", func(t *pb.Tenant) { t.Domains = append(t.Domains, "acme.example") }, bad("domains[1]", "already listed as domains[0]")},
		{"domain of other tenant", func(t *pb.Tenant) { t.Domains = append(t.Domains, "other.example") },
			clash("domains[1]", "domain other.example is owned by tenant other")},
		{"subdomain of other tenant", func(t *pb.Tenant) { t.Domains[0] = "shop.other.example" },
			clash("domains[0]", "domain shop.other.example is inside other.example, owned by tenant other")},
		{"parent of other tenant", func(t *pb.Tenant) { t.Domains[0] = "example" },
			clash("domains[0]", "domain example contains other.example, owned by tenant other")},
		{"sibling lookalike", func(t *pb.Tenant) { t.Domains[0] = "brother.example" }, pass()},
		{"network v6", func(t *pb.Tenant) { t.Networks = []string{"2001:db8:20::/48"} }, pass()},
		{"network not canonical", func(t *pb.Tenant) { t.Networks[0] = "10.20.0.1/16" }, bad("networks[0]", "10.20.0.1/16 is not in canonical form; use 10.20.0.0/16")},
		{"network v6 not canonical", func(t *pb.Tenant) { t.Networks[1] = "fd00:20::1/64" }, bad("networks[1]", "use fd00:20::/64")},
		{"network not cidr", func(t *pb.Tenant) { t.Networks[0] = "10.20.0.0" }, bad("networks[0]", "is not a CIDR")},
		{"network mapped", func(t *pb.Tenant) { t.Networks[0] = "::ffff:10.20.0.0/112" }, bad("networks[0]", "IPv4 form")},
		{"network duplicate", func(t *pb.Tenant) { t.Networks[1] = "10.20.0.0/16" }, bad("networks[1]", "already listed as networks[0]")},
		{"pool unknown", func(t *pb.Tenant) { t.Pools = []string{"private"} }, bad("pools[0]", "VIP pool private does not exist")},
		{"pool duplicate", func(t *pb.Tenant) { t.Pools = []string{"public", "public"} }, bad("pools[1]", "already listed as pools[0]")},
		{"pool name bad", func(t *pb.Tenant) { t.Pools = []string{"Public"} }, bad("pools[0]", `use "public"`)},
		{"bgp", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 64600, Peers: []string{"10.20.0.5", "fd00:20::5"}, Password: "s3cret", MaxPrefixes: MaxTenantBGPMaxPrefixes, MaxPrefixLength: 26, MaxPrefixLength6: 64}
		}, pass()},
		{"bgp no asn", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Peers: []string{"10.20.0.5"}} }, bad("bgp.asn", "required")},
		{"bgp no peers", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1} }, bad("bgp.peers", "is empty")},
		{"bgp peer outside", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.21.0.5"}} },
			bad("bgp.peers[0]", "10.21.0.5 is outside the tenant's networks")},
		{"bgp peer not an address", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.0/24"}} }, bad("bgp.peers[0]", "is not an IP address")},
		{"bgp peer zone", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"fd00:20::5%eth0"}} }, bad("bgp.peers[0]", "is not an IP address")},
		{"bgp peer duplicate", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5", "10.20.0.5"}} },
			bad("bgp.peers[1]", "already listed as bgp.peers[0]")},
		{"bgp too many peers", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1}
			for i := range MaxTenantBGPPeers + 1 {
				t.Bgp.Peers = append(t.Bgp.Peers, fmt.Sprintf("10.20.0.%d", i+1))
			}
		}, bad("bgp.peers", "at most 16")},
		{"bgp password long", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, Password: strings.Repeat("x", MaxBGPPasswordLen+1)}
		}, bad("bgp.password", "TCP MD5 takes at most 80")},
		{"bgp max prefixes", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixes: MaxTenantBGPMaxPrefixes + 1}
		},
			bad("bgp.maxPrefixes", "over the bound of 100000")},
		{"bgp update rate", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxUpdatesPerSecond: MaxTenantBGPUpdateRate}
		}, pass()},
		{"bgp update rate over", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxUpdatesPerSecond: MaxTenantBGPUpdateRate + 1}
		}, bad("bgp.maxUpdatesPerSecond", "10001 is over the bound of 10000 route changes per second")},
		{"bgp prefix total", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixesTotal: MaxTenantBGPMaxPrefixesTotal}
		}, pass()},
		{"bgp prefix total over", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixesTotal: MaxTenantBGPMaxPrefixesTotal + 1}
		}, bad("bgp.maxPrefixesTotal", "200001 is over the bound of 200000 prefixes per tenant and host")},
		{"bgp prefix total under the per-session bound", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixes: 50, MaxPrefixesTotal: 10}
		}, bad("bgp.maxPrefixesTotal", "10 is under bgp.maxPrefixes (50): no session could hold the prefixes maxPrefixes allows it; give at least 50, or lower maxPrefixes")},
		{"bgp prefix total under the default per-session bound", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixesTotal: 10}
		}, pass()},
		{"bgp reannounce", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, Reannounce: true, Community: "64512:100"}
		}, pass()},
		{"bgp reannounce without community", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, Reannounce: true}
		}, bad("bgp.community", "is required with bgp.reannounce")},
		{"bgp community without reannounce", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, Community: "64512:100"}
		}, bad("bgp.community", "set reannounce: true")},
		{"bgp community malformed", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, Reannounce: true, Community: "64512:70000"}
		}, bad("bgp.community", "0 to 65535")},
		{"bgp community long", func(t *pb.Tenant) {
			t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, Reannounce: true, Community: strings.Repeat("1", 200)}
		}, bad("bgp.community", "is 200 bytes long; at most 11")},
		{"bgp prefix length", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixLength: 33} },
			bad("bgp.maxPrefixLength", "1 to 32")},
		{"bgp prefix length6", func(t *pb.Tenant) { t.Bgp = &pb.TenantBGP{Asn: 1, Peers: []string{"10.20.0.5"}, MaxPrefixLength6: 129} },
			bad("bgp.maxPrefixLength6", "1 to 128")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant := acmeTenant()
			tt.mut(tenant)
			check(t, ValidateTenant(tenant, baseCatalog()), tt.want)
		})
	}
}

func TestValidateTenantKeepsLoadBalancers(t *testing.T) {
	tests := []struct {
		name string
		mut  func(t *pb.Tenant)
		want expect
	}{
		{"unchanged", func(t *pb.Tenant) {}, pass()},
		{"drop used pool", func(t *pb.Tenant) { t.Pools = []string{"shared"} },
			clash("pools", "VIP pool public is still used by LoadBalancer acme/shop")},
		{"drop pool used by address", func(t *pb.Tenant) { t.Pools = []string{"public"} },
			clash("pools", "VIP pool shared is still used by LoadBalancer acme/pinned")},
		{"narrow network still covering", func(t *pb.Tenant) { t.Networks[0] = "10.20.0.0/20" }, pass()},
		{"narrow network dropping member", func(t *pb.Tenant) { t.Networks[0] = "10.20.1.0/24" },
			clash("networks", "LoadBalancer acme/shop has member 10.20.0.11:30080 (pools.web.members[0])")},
		{"drop v6 network", func(t *pb.Tenant) { t.Networks = t.Networks[:1] },
			clash("networks", "member [fd00:20::12]:30080 (pools.web.members[1])")},
		{"drop routed domain", func(t *pb.Tenant) { t.Domains = []string{"acme.test"} },
			clash("domains", "LoadBalancer acme/shop routes host shop.acme.example (routes[0].host)")},
		{"narrow domain covering", func(t *pb.Tenant) { t.Domains = []string{"shop.acme.example"} }, pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCatalog()
			pinned := udpLB("pinned", "", 53)
			pinned.Vip = &pb.VIPRequest{Address: "198.51.100.3"}
			c.Put(withAddr(shopLB(), "192.0.2.1"), withAddr(pinned, "198.51.100.3"))
			c.Put(&pb.Certificate{Name: "c", Tenant: "acme"})
			tenant := acmeTenant()
			tt.mut(tenant)
			check(t, ValidateTenant(tenant, c), tt.want)
		})
	}
}
