package api

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// allocateAll runs AllocateAddresses with and without the address index
// and requires both to agree.
func allocateAll(t *testing.T, lb *pb.LoadBalancer, c *catalogtest.Catalog) ([]string, error) {
	t.Helper()
	as, err := AllocateAddresses(lb, c)
	as2, err2 := AllocateAddresses(lb, plainCatalog{c})
	if !slices.Equal(as, as2) || fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("indexed allocation %v, %v; plain %v, %v", as, err, as2, err2)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out, err
}

// withAddrs is lb holding addrs as the cluster stamps them.
func withAddrs(lb *pb.LoadBalancer, addrs ...string) *pb.LoadBalancer {
	lb.Status = &pb.LoadBalancerStatus{Address: addrs[0]}
	if len(lb.GetVip().GetFamilies()) > 0 {
		lb.Status.Addresses = addrs
	}
	return lb
}

func dual(pool string, policy string, fams ...string) *pb.VIPRequest {
	return &pb.VIPRequest{Pool: pool, Families: fams, FamilyPolicy: policy}
}

// A dual-stack load balancer gets one address per family from the pool,
// in the order asked; the other load balancers' second addresses count as
// used; a pool without a family, or exhausted in it, refuses under
// require and leaves the family out under prefer.
func TestAllocateAddressesDualStack(t *testing.T) {
	t.Parallel()
	mixed := &pb.VIPPool{Name: "p", Cidrs: []string{"192.0.2.0/30", "2001:db8:10::/126"}, Mode: "arp"}
	v4only := &pb.VIPPool{Name: "p", Cidrs: []string{"192.0.2.0/30"}, Mode: "arp"}
	tests := []struct {
		name    string
		pool    *pb.VIPPool
		have    []*pb.LoadBalancer
		lb      *pb.LoadBalancer
		want    []string
		wantErr string
	}{
		{name: "both families, ipv4 first", pool: mixed, lb: l4("a", dual("p", "", "ipv4", "ipv6"), 80),
			want: []string{"192.0.2.1", "2001:db8:10::1"}},
		{name: "both families, ipv6 first", pool: mixed, lb: l4("a", dual("p", "", "ipv6", "ipv4"), 80),
			want: []string{"2001:db8:10::1", "192.0.2.1"}},
		{name: "other load balancers' second addresses are used", pool: mixed,
			have: []*pb.LoadBalancer{withAddrs(l4("b", dual("p", "", "ipv4", "ipv6"), 80), "192.0.2.1", "2001:db8:10::1")},
			lb:   l4("a", dual("p", "", "ipv6", "ipv4"), 80), want: []string{"2001:db8:10::2", "192.0.2.2"}},
		{name: "updates keep both addresses", pool: mixed,
			have: []*pb.LoadBalancer{withAddrs(l4("b", dual("p", "", "ipv4", "ipv6"), 80), "192.0.2.1", "2001:db8:10::1")},
			lb:   withAddrs(l4("a", dual("p", "", "ipv4", "ipv6"), 81), "192.0.2.2", "2001:db8:10::3"), want: []string{"192.0.2.2", "2001:db8:10::3"}},
		{name: "a requested address is its family's VIP", pool: mixed,
			lb:   l4("a", &pb.VIPRequest{Pool: "p", Families: []string{"ipv4", "ipv6"}, Address: "2001:db8:10::2"}, 80),
			want: []string{"192.0.2.1", "2001:db8:10::2"}},
		{name: "require: the pool has no IPv6", pool: v4only, lb: l4("a", dual("p", "require", "ipv4", "ipv6"), 80),
			wantErr: "vip.families: VIP pool p has no IPv6 addresses, and familyPolicy require needs one VIP of each listed family"},
		{name: "prefer: the pool has no IPv6", pool: v4only, lb: l4("a", dual("p", "prefer", "ipv6", "ipv4"), 80),
			want: []string{"192.0.2.1"}},
		{name: "require: IPv6 exhausted", pool: mixed,
			have: []*pb.LoadBalancer{
				withAddrs(l4("b", dual("p", "", "ipv6"), 80), "2001:db8:10::1"),
				withAddrs(l4("c", dual("p", "", "ipv6"), 80), "2001:db8:10::2"),
				withAddrs(l4("d", dual("p", "", "ipv6"), 80), "2001:db8:10::3"),
			},
			lb: l4("a", dual("p", "", "ipv4", "ipv6"), 80), wantErr: "vip.pool: pool p has no free IPv6 address (3 of 3 in use)"},
		{name: "prefer: IPv6 exhausted", pool: mixed,
			have: []*pb.LoadBalancer{
				withAddrs(l4("b", dual("p", "", "ipv6"), 80), "2001:db8:10::1"),
				withAddrs(l4("c", dual("p", "", "ipv6"), 80), "2001:db8:10::2"),
				withAddrs(l4("d", dual("p", "", "ipv6"), 80), "2001:db8:10::3"),
			},
			lb: l4("a", dual("p", "prefer", "ipv4", "ipv6"), 80), want: []string{"192.0.2.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs := []any{}
			for _, o := range tt.have {
				objs = append(objs, o)
			}
			got, err := allocateAll(t, tt.lb, poolCatalog(tt.pool, objs...))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
			// What the cluster stamps is valid, and the prefer case
			// reports the family left out.
			lb := withAddrs(tt.lb, got...)
			if err := ValidateLoadBalancer(lb, poolCatalog(tt.pool, objs...)); err != nil {
				t.Fatalf("stamped %v: %v", got, err)
			}
			p := FamilyProblem(lb)
			if (len(got) < len(tt.lb.GetVip().GetFamilies())) != (p != nil) {
				t.Fatalf("problem %v for %v of %v", p, got, tt.lb.GetVip().GetFamilies())
			}
		})
	}
}

// Both addresses of a dual-stack load balancer count against the tenant's
// address quota.
func TestDualStackAddressQuota(t *testing.T) {
	t.Parallel()
	mixed := &pb.VIPPool{Name: "p", Cidrs: []string{"192.0.2.0/28", "2001:db8:10::/124"}, Mode: "arp"}
	tenant := acmeTenant()
	tenant.Pools = []string{"p"}
	tenant.Quotas = &pb.Quotas{Addresses: 3}
	b := withAddrs(l4("b", dual("p", "", "ipv4", "ipv6"), 80), "192.0.2.1", "2001:db8:10::1")
	c := catalogtest.New(mixed, tenant, b)
	_, err := allocateAll(t, l4("a", dual("p", "", "ipv4", "ipv6"), 80), c)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "quota of 3 addresses") {
		t.Fatalf("got %v; want the quota of 3 reached by the second family", err)
	}
	if got, err := allocateAll(t, l4("a", &pb.VIPRequest{Pool: "p"}, 80), c); err != nil || len(got) != 1 {
		t.Fatalf("one address: got %v, %v", got, err)
	}
	// A stamped status over the quota is refused by validation too.
	over := withAddrs(l4("a", dual("p", "", "ipv4", "ipv6"), 80), "192.0.2.2", "2001:db8:10::2")
	if err := ValidateLoadBalancer(over, c); !errors.Is(err, ErrConflict) {
		t.Fatalf("validation of %v: %v", over.Status, err)
	}
}

// The request's dual-stack fields are checked with reasons that name the
// field.
func TestValidateFamilies(t *testing.T) {
	t.Parallel()
	c := baseCatalog()
	for _, tt := range []struct {
		name string
		vip  *pb.VIPRequest
		st   *pb.LoadBalancerStatus
		want string
	}{
		{"ok", dual("public", "", "ipv4", "ipv6"), nil, ""},
		{"prefer ok", dual("public", "prefer", "ipv6"), nil, ""},
		{"unknown family", dual("public", "", "ipv4", "inet6"), nil, `vip.families[1]: "inet6" is not one of ipv4, ipv6`},
		{"twice", dual("public", "", "ipv4", "ipv4"), nil, "vip.families[1]: ipv4 is listed twice"},
		{"three", dual("public", "", "ipv4", "ipv6", "ipv4"), nil, "vip.families: lists 3 families; at most 2"},
		{"with family", &pb.VIPRequest{Pool: "public", Family: "ipv4", Families: []string{"ipv4", "ipv6"}}, nil, "vip.family: set vip.families or vip.family, not both"},
		{"policy alone", &pb.VIPRequest{Pool: "public", FamilyPolicy: "prefer"}, nil, "vip.familyPolicy: applies to vip.families, which is unset"},
		{"bad policy", dual("public", "maybe", "ipv4"), nil, `vip.familyPolicy: "maybe" is not one of require, prefer`},
		{"address of an unlisted family", &pb.VIPRequest{Pool: "public", Families: []string{"ipv4"}, Address: "2001:db8:10::5"}, nil,
			"vip.address: 2001:db8:10::5 is an IPv6 address and vip.families lists no ipv6"},
		{"no pool of the family", dual("shared", "prefer", "ipv6"), nil, "vip.families: VIP pool shared has no IPv6 addresses"},
		{"addresses without families", &pb.VIPRequest{Pool: "public"}, &pb.LoadBalancerStatus{Address: "192.0.2.1", Addresses: []string{"192.0.2.1"}},
			"status.addresses: is set only for a load balancer with vip.families"},
		{"addresses not starting with address", dual("public", "", "ipv4", "ipv6"), &pb.LoadBalancerStatus{Address: "192.0.2.1", Addresses: []string{"2001:db8:10::1", "192.0.2.1"}},
			"status.addresses: must start with status.address"},
		{"two of one family", dual("public", "", "ipv4", "ipv6"), &pb.LoadBalancerStatus{Address: "192.0.2.1", Addresses: []string{"192.0.2.1", "192.0.2.2"}},
			"status.addresses[1]: 192.0.2.2 is a second IPv4 address"},
		{"require with one", dual("public", "", "ipv4", "ipv6"), &pb.LoadBalancerStatus{Address: "192.0.2.1", Addresses: []string{"192.0.2.1"}},
			"status.addresses: holds 1 addresses for the 2 families of vip.families, and familyPolicy require needs one of each"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := shopLB()
			lb.Vip, lb.Status = tt.vip, tt.st
			err := ValidateLoadBalancer(lb, c)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want %q", err, tt.want)
			}
		})
	}
}
