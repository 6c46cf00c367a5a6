package api

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// plainCatalog hides the optional look-ups, AddressIndex among them.
type plainCatalog struct{ Catalog }

var _ AddressIndex = (*catalogtest.Catalog)(nil)

// allocate runs AllocateAddress with and without the address index and
// requires both to agree.
func allocate(t testing.TB, lb *pb.LoadBalancer, c *catalogtest.Catalog) (netip.Addr, error) {
	t.Helper()
	a, err := AllocateAddress(lb, c)
	a2, err2 := AllocateAddress(lb, plainCatalog{c})
	if a != a2 || fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("indexed allocation %v, %v; plain %v, %v", a, err, a2, err2)
	}
	return a, err
}

// l4 is a one-listener load balancer of tenant acme.
func l4(name string, vip *pb.VIPRequest, port uint32) *pb.LoadBalancer {
	return &pb.LoadBalancer{
		Name: name, Tenant: "acme", Vip: vip,
		Listeners: []*pb.Listener{{Port: port, Protocol: "tcp", Pool: "p"}},
		Pools:     map[string]*pb.BackendPool{"p": {Members: []*pb.Member{{Address: "10.20.0.1:80"}}}},
	}
}

// poolCatalog holds tenant acme allowed to use pool p, with quotas large
// enough for the allocation tests' thousands of load balancers.
func poolCatalog(p *pb.VIPPool, objs ...any) *catalogtest.Catalog {
	t := acmeTenant()
	t.Pools = []string{p.GetName()}
	t.Quotas = &pb.Quotas{LoadBalancers: 100000, Addresses: 100000}
	return catalogtest.New(append([]any{p, t}, objs...)...)
}

func TestAllocateAddress(t *testing.T) {
	public := publicPool()
	shared := sharedPool()
	tests := []struct {
		name string
		pool *pb.VIPPool
		have []*pb.LoadBalancer
		lb   *pb.LoadBalancer
		want string
		err  expect
	}{
		{"first v4 skips network", public, nil, l4("a", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.1", pass()},
		{"v6 skips anycast", public, nil, l4("a", &pb.VIPRequest{Pool: "public", Family: "ipv6"}, 80), "2001:db8:10::1", pass()},
		{"v6 only pool defaults to v6", &pb.VIPPool{Name: "six", Cidrs: []string{"2001:db8:6::/64"}, Mode: "bgp"}, nil,
			l4("a", &pb.VIPRequest{Pool: "six"}, 80), "2001:db8:6::1", pass()},
		{"v4 family on v6 pool", &pb.VIPPool{Name: "six", Cidrs: []string{"2001:db8:6::/64"}, Mode: "bgp"}, nil,
			l4("a", &pb.VIPRequest{Pool: "six", Family: "ipv4"}, 80), "", bad("vip.family", "VIP pool six has no IPv4 addresses")},
		{"range has no reserved addresses", &pb.VIPPool{Name: "r", Cidrs: []string{"192.0.2.0-192.0.2.2"}, Mode: "arp"}, nil,
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "192.0.2.0", pass()},
		{"slash 31 uses both", &pb.VIPPool{Name: "r", Cidrs: []string{"192.0.2.0/31"}, Mode: "arp"},
			[]*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "r"}, 80), "192.0.2.0")},
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "192.0.2.1", pass()},
		{"slash 32", &pb.VIPPool{Name: "r", Cidrs: []string{"192.0.2.9/32"}, Mode: "arp"}, nil,
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "192.0.2.9", pass()},
		{"slash 127 uses both", &pb.VIPPool{Name: "r", Cidrs: []string{"2001:db8::/127"}, Mode: "arp"}, nil,
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "2001:db8::", pass()},
		{"slash 30 skips broadcast", &pb.VIPPool{Name: "r", Cidrs: []string{"192.0.2.0/30"}, Mode: "arp"},
			[]*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "r"}, 80), "192.0.2.1"), withAddr(l4("y", &pb.VIPRequest{Pool: "r"}, 80), "192.0.2.2")},
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "", clash("vip.pool", "pool r has no free IPv4 address (2 of 2 in use)")},
		{"pool order before numeric order", &pb.VIPPool{Name: "r", Cidrs: []string{"203.0.113.128/30", "203.0.113.0/30"}, Mode: "arp"}, nil,
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "203.0.113.129", pass()},
		{"next entry when first is full", &pb.VIPPool{Name: "r", Cidrs: []string{"203.0.113.9/32", "203.0.113.0/30"}, Mode: "arp"},
			[]*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "r"}, 80), "203.0.113.9")},
			l4("a", &pb.VIPRequest{Pool: "r"}, 80), "203.0.113.1", pass()},
		{"fills gap", public, []*pb.LoadBalancer{
			withAddr(l4("x", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.1"),
			withAddr(l4("y", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.2"),
			withAddr(l4("z", &pb.VIPRequest{Address: "192.0.2.4"}, 80), "192.0.2.4"),
		}, l4("a", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.3", pass()},
		{"explicit honoured", public, nil, l4("a", &pb.VIPRequest{Address: "192.0.2.9"}, 80), "192.0.2.9", pass()},
		{"explicit v6 honoured", public, nil, l4("a", &pb.VIPRequest{Pool: "public", Address: "2001:db8:10::f"}, 80), "2001:db8:10::f", pass()},
		{"explicit taken", public, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "public"}, 443), "192.0.2.9")},
			l4("a", &pb.VIPRequest{Address: "192.0.2.9"}, 80), "", clash("vip.address", "address 192.0.2.9 is in use by LoadBalancer acme/x")},
		{"explicit outside pool", public, nil, l4("a", &pb.VIPRequest{Pool: "public", Address: "192.0.2.99"}, 80), "",
			bad("vip.address", "192.0.2.99 is outside pool public")},
		{"explicit broadcast", public, nil, l4("a", &pb.VIPRequest{Pool: "public", Address: "192.0.2.15"}, 80), "",
			bad("vip.address", "broadcast address of 192.0.2.0/28")},
		{"keeps status address", public, nil, withAddr(l4("a", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.7"), "192.0.2.7", pass()},
		{"keeps status across families", public, nil, withAddr(l4("a", &pb.VIPRequest{Pool: "public"}, 80), "2001:db8:10::7"), "2001:db8:10::7", pass()},
		{"status of wrong family replaced", public, nil, withAddr(l4("a", &pb.VIPRequest{Pool: "public", Family: "ipv6"}, 80), "192.0.2.7"), "2001:db8:10::1", pass()},
		{"status outside pool replaced", public, nil, withAddr(l4("a", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.77"), "192.0.2.1", pass()},
		{"status taken replaced", public, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.1")},
			withAddr(l4("a", &pb.VIPRequest{Pool: "public"}, 80), "192.0.2.1"), "192.0.2.2", pass()},
		{"shares with same key", shared, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.3")},
			l4("a", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 443), "198.51.100.3", pass()},
		{"shares lowest", shared, []*pb.LoadBalancer{
			withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.5"),
			withAddr(l4("y", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.4"),
			withAddr(l4("z", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 443), "198.51.100.4"),
		}, l4("a", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 443), "198.51.100.5", pass()},
		{"no share on port clash", shared, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.1")},
			l4("a", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.2", pass()},
		{"no share with other key", shared, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "j"}, 80), "198.51.100.1")},
			l4("a", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 443), "198.51.100.2", pass()},
		{"no share in unshared pool", public, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "public", SharingKey: "k"}, 80), "192.0.2.1")},
			l4("a", &pb.VIPRequest{Pool: "public", SharingKey: "k"}, 443), "192.0.2.2", pass()},
		{"explicit shared", shared, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.1")},
			l4("a", &pb.VIPRequest{Address: "198.51.100.1", SharingKey: "k"}, 443), "198.51.100.1", pass()},
		{"explicit shared clash", shared, []*pb.LoadBalancer{withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.1")},
			l4("a", &pb.VIPRequest{Address: "198.51.100.1", SharingKey: "k"}, 80), "", clash("vip.address", "both listen on 80/tcp")},
		{"pool missing", public, nil, l4("a", &pb.VIPRequest{Pool: "nope"}, 80), "", bad("vip.pool", "VIP pool nope does not exist")},
		{"tenant missing", public, nil, func() *pb.LoadBalancer { lb := l4("a", &pb.VIPRequest{Pool: "public"}, 80); lb.Tenant = "x"; return lb }(), "",
			bad("tenant", "tenant x does not exist")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := poolCatalog(tt.pool)
			for _, lb := range tt.have {
				c.Put(lb)
			}
			got, err := allocate(t, tt.lb, c)
			check(t, err, tt.err)
			if tt.want != "" && got != netip.MustParseAddr(tt.want) {
				t.Fatalf("got %v, want %s", got, tt.want)
			}
			if err == nil {
				tt.lb.Status = &pb.LoadBalancerStatus{Address: got.String()}
				if verr := ValidateLoadBalancer(tt.lb, c); verr != nil {
					t.Fatalf("allocated %v fails validation: %v", got, verr)
				}
			}
		})
	}
}

func TestAllocateExhausted(t *testing.T) {
	c := poolCatalog(publicPool())
	for i := 0; i < 14; i++ {
		lb := l4(fmt.Sprintf("lb%d", i), &pb.VIPRequest{Pool: "public"}, 80)
		a, err := allocate(t, lb, c)
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		c.Put(withAddr(lb, a.String()))
	}
	_, err := allocate(t, l4("last", &pb.VIPRequest{Pool: "public"}, 80), c)
	check(t, err, clash("vip.pool", "pool public has no free IPv4 address (14 of 14 in use)"))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("exhaustion is not ErrConflict: %v", err)
	}
	// IPv6 still has room.
	a, err := allocate(t, l4("last", &pb.VIPRequest{Pool: "public", Family: "ipv6"}, 80), c)
	if err != nil || a != netip.MustParseAddr("2001:db8:10::1") {
		t.Fatalf("v6 after v4 exhausted: %v, %v", a, err)
	}
}

func TestAllocateAddressQuota(t *testing.T) {
	tenant := acmeTenant()
	tenant.Quotas = &pb.Quotas{Addresses: 1}
	c := catalogtest.New(sharedPool(), tenant, withAddr(l4("x", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 80), "198.51.100.1"))
	_, err := allocate(t, l4("a", &pb.VIPRequest{Pool: "shared"}, 443), c)
	check(t, err, clash("vip.pool", "quota of 1 addresses"))
	a, err := allocate(t, l4("a", &pb.VIPRequest{Pool: "shared", SharingKey: "k"}, 443), c)
	if err != nil || a.String() != "198.51.100.1" {
		t.Fatalf("shared allocation at quota: %v, %v", a, err)
	}
	_, err = allocate(t, l4("a", &pb.VIPRequest{Address: "198.51.100.2"}, 443), c)
	check(t, err, clash("vip.address", "quota of 1 addresses"))
}

func TestAllocateNoDoubleAllocation(t *testing.T) {
	t.Parallel()
	pools := []*pb.VIPPool{
		{Name: "v4", Cidrs: []string{"10.100.0.0/24", "10.100.8.0-10.100.11.255"}, Mode: "arp"},
		{Name: "v6", Cidrs: []string{"2001:db8:100::/120", "2001:db8:200::/64"}, Mode: "bgp"},
	}
	for _, p := range pools {
		t.Run(p.GetName(), func(t *testing.T) {
			t.Parallel() // each pool has its own catalog
			c := poolCatalog(p)
			ranges, err := ParsePoolRanges(p.GetCidrs())
			if err != nil {
				t.Fatal(err)
			}
			seen := map[netip.Addr]string{}
			for i := 0; i < 1000; i++ {
				lb := l4(fmt.Sprintf("lb%04d", i), &pb.VIPRequest{Pool: p.GetName()}, 80)
				a, err := allocate(t, lb, c)
				if err != nil {
					t.Fatalf("allocation %d: %v", i, err)
				}
				if prev, dup := seen[a]; dup {
					t.Fatalf("%v given to %s and %s", a, prev, lb.GetName())
				}
				if !ranges[0].Contains(a) && !ranges[1].Contains(a) {
					t.Fatalf("%v is outside the pool", a)
				}
				seen[a] = lb.GetName()
				c.Put(withAddr(lb, a.String()))
			}
			// Freed addresses are reused lowest first.
			c.Delete(&pb.ObjectRef{Kind: KindLoadBalancer, Tenant: "acme", Name: "lb0100"})
			c.Delete(&pb.ObjectRef{Kind: KindLoadBalancer, Tenant: "acme", Name: "lb0007"})
			var lb7 netip.Addr
			for a, n := range seen {
				if n == "lb0007" {
					lb7 = a
				}
			}
			a, err := allocate(t, l4("again", &pb.VIPRequest{Pool: p.GetName()}, 80), c)
			if err != nil || a != lb7 {
				t.Fatalf("after freeing %v got %v, %v", lb7, a, err)
			}
		})
	}
}

// largeV6Catalog holds n load balancers packed at the start of a /64.
func largeV6Catalog(n int) (*catalogtest.Catalog, netip.Addr) {
	p := &pb.VIPPool{Name: "big", Cidrs: []string{"2001:db8:ffff::/64"}, Mode: "bgp"}
	c := poolCatalog(p)
	a := netip.MustParseAddr("2001:db8:ffff::")
	lbs := make([]any, 0, n)
	for i := 0; i < n; i++ {
		a = a.Next()
		lbs = append(lbs, withAddr(l4(fmt.Sprintf("lb%05d", i), &pb.VIPRequest{Pool: "big"}, 80), a.String()))
	}
	c.Put(lbs...)
	c.LoadBalancers("") // build the sorted view outside the measurement
	return c, a.Next()
}

func TestAllocateLargeIPv6Pool(t *testing.T) {
	c, next := largeV6Catalog(10000)
	lb := l4("new", &pb.VIPRequest{Pool: "big"}, 80)
	for name, cat := range map[string]Catalog{"indexed": c, "plain": plainCatalog{c}} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			a, err := AllocateAddress(lb, cat)
			elapsed := time.Since(start)
			if err != nil || a != next {
				t.Fatalf("got %v, %v; want %v", a, err, next)
			}
			// A loose bound that only an address-by-address walk breaks
			// (a /64 would take years); a loaded machine keeps within it;
			// the benchmarks give the real figures.
			if elapsed > 5*time.Second {
				t.Fatalf("allocation took %v", elapsed)
			}
		})
	}
}

func BenchmarkAllocateIPv6Pool10k(b *testing.B) {
	c, _ := largeV6Catalog(10000)
	lb := l4("new", &pb.VIPRequest{Pool: "big"}, 80)
	for name, cat := range map[string]Catalog{"indexed": c, "plain": plainCatalog{c}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AllocateAddress(lb, cat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestAllocateErrorNamesLoadBalancer(t *testing.T) {
	_, err := AllocateAddress(l4("a", &pb.VIPRequest{}, 80), poolCatalog(publicPool()))
	if err == nil || !strings.HasPrefix(err.Error(), "LoadBalancer acme/a: vip.pool: required") {
		t.Fatalf("got %v", err)
	}
}

func TestLowestFree(t *testing.T) {
	r := func(from, to string) Range {
		return Range{From: netip.MustParseAddr(from), To: netip.MustParseAddr(to)}
	}
	addrs := func(ss ...string) []netip.Addr {
		out := make([]netip.Addr, len(ss))
		for i, s := range ss {
			out[i] = netip.MustParseAddr(s)
		}
		return out
	}
	tests := []struct {
		name string
		r    Range
		used []netip.Addr
		want string // "" for full
	}{
		{"empty", r("10.0.0.1", "10.0.0.9"), nil, "10.0.0.1"},
		{"gap at start", r("10.0.0.1", "10.0.0.9"), addrs("10.0.0.2", "10.0.0.3"), "10.0.0.1"},
		{"gap in middle", r("10.0.0.1", "10.0.0.9"), addrs("10.0.0.1", "10.0.0.2", "10.0.0.5"), "10.0.0.3"},
		{"after run", r("10.0.0.1", "10.0.0.9"), addrs("10.0.0.1", "10.0.0.2"), "10.0.0.3"},
		{"full", r("10.0.0.1", "10.0.0.3"), addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"), ""},
		{"single full", r("10.0.0.1", "10.0.0.1"), addrs("10.0.0.1"), ""},
		{"top of v4", r("255.255.255.254", "255.255.255.255"), addrs("255.255.255.254"), "255.255.255.255"},
		{"top of v6 full", r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
			addrs("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), ""},
		{"v6 across 64-bit carry", r("2001:db8::ffff:ffff:ffff:fffe", "2001:db8:0:1::ff"),
			addrs("2001:db8::ffff:ffff:ffff:fffe", "2001:db8::ffff:ffff:ffff:ffff"), "2001:db8:0:1::"},
		{"whole v6 space", r("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), addrs("::", "::1"), "::2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// lowestFree takes the used set in any order.
			shuffled := slices.Clone(tt.used)
			slices.Reverse(shuffled)
			for name, got := range map[string]func() (netip.Addr, bool){
				"bitmap": func() (netip.Addr, bool) { return lowestFree(tt.r, shuffled) },
				"sorted": func() (netip.Addr, bool) { return lowestFreeSorted(tt.r, tt.used) },
			} {
				a, ok := got()
				if tt.want == "" {
					if ok {
						t.Errorf("%s: got %v, want none", name, a)
					}
				} else if !ok || a != netip.MustParseAddr(tt.want) {
					t.Errorf("%s: got %v %v, want %s", name, a, ok, tt.want)
				}
			}
		})
	}
}
