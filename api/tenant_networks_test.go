package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateTenantNetworkOwners(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		nets []string
		want expect
	}{
		{"disjoint", []string{"10.20.0.0/16", "10.31.0.0/16"}, pass()},
		{"same as other", []string{"10.30.0.0/16"}, clash("networks[0]", "network 10.30.0.0/16 overlaps 10.30.0.0/16 of tenant other")},
		{"inside other", []string{"10.20.0.0/16", "10.30.7.0/24"}, clash("networks[1]", "network 10.30.7.0/24 overlaps 10.30.0.0/16 of tenant other")},
		{"covering other", []string{"10.0.0.0/8"}, clash("networks[0]", "network 10.0.0.0/8 overlaps 10.30.0.0/16 of tenant other; tenants share addresses only when both are attached")},
		{"v6 beside v4", []string{"::/0"}, pass()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tenant := acmeTenant()
			tenant.Networks = tt.nets
			check(t, ValidateTenant(tenant, baseCatalog()), tt.want)
		})
	}
}

// stateView is a Catalog of a write in progress: the state with the write
// in it, and the state before.
type stateView struct {
	*catalogtest.Catalog
	prior Catalog
}

func (v stateView) Prior() Catalog { return v.prior }

func TestValidateTenantKeepsStoredOverlap(t *testing.T) {
	t.Parallel()
	// A state an older release wrote: acme's 10.30.8.0/24 inside other's.
	stored := func() *catalogtest.Catalog {
		a := acmeTenant()
		a.Networks = append(a.Networks, "10.30.8.0/24")
		return catalogtest.New(publicPool(), sharedPool(), a, otherTenant())
	}
	view := func(objs ...any) stateView {
		c := stored()
		c.Put(objs...)
		return stateView{Catalog: c, prior: stored()}
	}
	// Either tenant may still change something else.
	a := acmeTenant()
	a.Networks = append(a.Networks, "10.30.8.0/24")
	a.Domains = append(a.Domains, "acme.test")
	check(t, ValidateTenant(a, view(a)), pass())
	o := otherTenant()
	o.Domains = append(o.Domains, "other.test")
	check(t, ValidateTenant(o, view(o)), pass())
	// A new overlap is refused, naming it and not the stored one.
	a = acmeTenant()
	a.Networks = append(a.Networks, "10.30.8.0/24", "10.30.9.0/24")
	check(t, ValidateTenant(a, view(a)), clash("networks[3]", "network 10.30.9.0/24 overlaps 10.30.0.0/16 of tenant other"))
	// So is widening the other side over a stored overlap.
	o = otherTenant()
	o.Networks = []string{"10.0.0.0/8"}
	check(t, ValidateTenant(o, view(o)), clash("networks[0]", "network 10.0.0.0/8 overlaps 10.20.0.0/16 of tenant acme"))
	// Two tenants created with overlapping networks in one write: neither
	// is in the state before it.
	b := &pb.Tenant{Name: "b", Networks: []string{"10.40.0.0/16"}}
	c := &pb.Tenant{Name: "c", Networks: []string{"10.40.1.0/24"}}
	check(t, ValidateTenant(c, view(b, c)), clash("networks[0]", "network 10.40.1.0/24 overlaps 10.40.0.0/16 of tenant b"))
}

func TestNetworkOverlaps(t *testing.T) {
	t.Parallel()
	a := &pb.Tenant{Name: "a", Networks: []string{"10.0.0.0/8", "fd00::/48"}}
	b := &pb.Tenant{Name: "b", Networks: []string{"10.20.0.0/16", "10.20.5.0/24", "192.0.2.0/24"}}
	c := &pb.Tenant{Name: "c", Networks: []string{"10.20.5.128/25", "fd00:0:0:1::/64", "198.51.100.0/24"}}
	d := &pb.Tenant{Name: "d", Networks: []string{"203.0.113.0/24", "fd01::/48"}}
	got := NetworkOverlaps(catalogtest.New(a, b, c, d))
	want := []string{
		"tenant a: network 10.0.0.0/8 overlaps 10.20.0.0/16 of tenant b",
		"tenant a: network 10.0.0.0/8 overlaps 10.20.5.0/24 of tenant b",
		"tenant a: network 10.0.0.0/8 overlaps 10.20.5.128/25 of tenant c",
		"tenant b: network 10.20.0.0/16 overlaps 10.20.5.128/25 of tenant c",
		"tenant b: network 10.20.5.0/24 overlaps 10.20.5.128/25 of tenant c",
		"tenant a: network fd00::/48 overlaps fd00:0:0:1::/64 of tenant c",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d overlaps:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+";") {
			t.Errorf("overlap %d: %q, want %q", i, got[i], want[i])
		}
	}
	if got := NetworkOverlaps(catalogtest.New(b, d)); len(got) != 0 {
		t.Fatalf("disjoint tenants: %v", got)
	}
	// Many overlaps: the first MaxNetworkOverlapsShown, then a count.
	var many []any
	for i := range 30 {
		many = append(many, &pb.Tenant{Name: fmt.Sprintf("t%02d", i), Networks: []string{"10.0.0.0/8"}})
	}
	got = NetworkOverlaps(catalogtest.New(many...))
	if len(got) != MaxNetworkOverlapsShown+1 || got[MaxNetworkOverlapsShown] != "415 more overlaps of tenants' networks" {
		t.Fatalf("got %d lines, last %q", len(got), got[len(got)-1])
	}
}
