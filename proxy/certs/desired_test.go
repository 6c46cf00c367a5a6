package certs

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestTenantChangeMatters: a tenant change the predicate calls harmless
// leaves the desired certificates as they were, and one that changes
// them is never called harmless.
func TestTenantChangeMatters(t *testing.T) {
	acme := &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}}
	lb := &pb.LoadBalancer{Name: "web", Tenant: "acme", Status: &pb.LoadBalancerStatus{Address: "192.0.2.1"},
		Listeners: []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}}},
		Routes:    []*pb.Route{{Host: "a.acme.example", Pool: "app"}, {Host: "b.acme.example", Pool: "app"}}}
	with := func(f func(*pb.Tenant)) *pb.Tenant {
		c := proto.Clone(acme).(*pb.Tenant)
		f(c)
		return c
	}
	desiredWith := func(ts ...*pb.Tenant) *desired {
		objs := []*pb.Object{{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}}
		for _, t := range ts {
			if t != nil {
				objs = append(objs, &pb.Object{Kind: &pb.Object_Tenant{Tenant: t}})
			}
		}
		return computeDesired(objs, nil)
	}
	bolt := &pb.Tenant{Name: "bolt", Networks: []string{"10.0.0.0/8"}}
	tests := []struct {
		name       string
		prev, next *pb.Tenant
		others     []*pb.Tenant // in the state before and after
		matters    bool
	}{
		{"tenant without domains created", nil, bolt, []*pb.Tenant{acme}, false},
		{"tenant without domains deleted", bolt, nil, []*pb.Tenant{acme}, false},
		{"networks changed", acme, with(func(t *pb.Tenant) { t.Networks = []string{"10.0.0.0/8"} }), nil, false},
		{"domains changed", acme, with(func(t *pb.Tenant) { t.Domains = []string{"other.example"} }), nil, true},
		{"certificate quota changed", acme, with(func(t *pb.Tenant) { t.Quotas = &pb.Quotas{Certificates: 1} }), nil, true},
		{"tenant with domains created", nil, acme, nil, true},
		{"tenant with domains deleted", acme, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TenantChangeMatters(tt.prev, tt.next)
			if got != tt.matters {
				t.Errorf("TenantChangeMatters = %t, want %t", got, tt.matters)
			}
			before := desiredWith(append([]*pb.Tenant{tt.prev}, tt.others...)...)
			after := desiredWith(append([]*pb.Tenant{tt.next}, tt.others...)...)
			same := maps.Equal(before.managed, after.managed) && maps.Equal(before.refused, after.refused)
			if same == tt.matters {
				t.Errorf("the desired certificates changed: %t; the case says the change matters: %t (managed %v then %v)", !same, tt.matters, before.managed, after.managed)
			}
		})
	}
}
