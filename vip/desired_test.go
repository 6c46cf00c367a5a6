package vip

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func lbAt(tenant, name, pool, addr string) *pb.Object {
	return api.Wrap(&pb.LoadBalancer{Tenant: tenant, Name: name, Vip: &pb.VIPRequest{Pool: pool}, Status: &pb.LoadBalancerStatus{Address: addr}})
}

func TestDesiredState(t *testing.T) {
	pools := []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "l2", Cidrs: []string{"192.0.2.0/28", "2001:db8::/124"}, Mode: "arp"}),
		api.Wrap(&pb.VIPPool{Name: "edge", Cidrs: []string{"203.0.113.10-203.0.113.20"}, Mode: "bgp", Communities: []string{"65000:100", "bad"}}),
		api.Wrap(&pb.VIPPool{Name: "routed", Cidrs: []string{"198.51.100.0/24"}, Mode: "static"}),
	}
	addr := netip.MustParseAddr
	tests := []struct {
		name    string
		objs    []*pb.Object
		vips    []vipSpec
		members []member
	}{
		{"nothing", nil, nil, nil},
		{"one lb per mode", append(pools,
			lbAt("acme", "web", "l2", "192.0.2.5"),
			lbAt("acme", "api", "edge", "203.0.113.10"),
			lbAt("acme", "dns", "routed", "198.51.100.7"),
		), []vipSpec{
			{Addr: addr("192.0.2.5"), Mode: "arp", Pool: "l2", LBs: []string{"acme/web"}},
			{Addr: addr("198.51.100.7"), Mode: "static", Pool: "routed", LBs: []string{"acme/dns"}},
			{Addr: addr("203.0.113.10"), Mode: "bgp", Pool: "edge", Communities: []uint32{65000<<16 | 100}, LBs: []string{"acme/api"}},
		}, nil},
		{"a shared address lists every lb", append(pools,
			lbAt("acme", "web-443", "l2", "2001:db8::3"),
			lbAt("acme", "web-80", "l2", "2001:db8::3"),
		), []vipSpec{{Addr: addr("2001:db8::3"), Mode: "arp", Pool: "l2", LBs: []string{"acme/web-443", "acme/web-80"}}}, nil},
		{"the pool is found by address when the lb names none", append(pools,
			lbAt("acme", "web", "", "203.0.113.15"),
		), []vipSpec{{Addr: addr("203.0.113.15"), Mode: "bgp", Pool: "edge", Communities: []uint32{65000<<16 | 100}, LBs: []string{"acme/web"}}}, nil},
		{"a dual-stack lb has a VIP of each family", append(pools, api.Wrap(&pb.LoadBalancer{Tenant: "acme", Name: "dual",
			Vip:    &pb.VIPRequest{Pool: "l2", Families: []string{"ipv6", "ipv4"}},
			Status: &pb.LoadBalancerStatus{Address: "2001:db8::7", Addresses: []string{"2001:db8::7", "192.0.2.7"}}}),
		), []vipSpec{
			{Addr: addr("192.0.2.7"), Mode: "arp", Pool: "l2", LBs: []string{"acme/dual"}},
			{Addr: addr("2001:db8::7"), Mode: "arp", Pool: "l2", LBs: []string{"acme/dual"}},
		}, nil},
		{"no address yet, or outside every pool", append(pools,
			lbAt("acme", "new", "l2", ""),
			lbAt("acme", "stray", "l2", "10.9.9.9"),
		), nil, nil},
		{"hosts with a heartbeat address", []*pb.Object{
			api.Wrap(&pb.Node{Id: "n2", HeartbeatAddr: "192.0.2.12:7946"}),
			api.Wrap(&pb.Node{Id: "n1", HeartbeatAddr: "[2001:db8::11]:7946"}),
			api.Wrap(&pb.Node{Id: "n3"}),
		}, nil, []member{
			{ID: "n1", Heartbeat: netip.MustParseAddrPort("[2001:db8::11]:7946")},
			{ID: "n2", Heartbeat: netip.MustParseAddrPort("192.0.2.12:7946")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := desiredState(tt.objs)
			if got := slices.Collect(d.VIPs.All()); !reflect.DeepEqual(got, tt.vips) {
				t.Errorf("VIPs:\n got %+v\nwant %+v", got, tt.vips)
			}
			if !reflect.DeepEqual(d.Members, tt.members) {
				t.Errorf("members:\n got %+v\nwant %+v", d.Members, tt.members)
			}
		})
	}
	d := desiredState(pools)
	if !inRanges(d.Ranges, addr("192.0.2.15")) || !inRanges(d.Ranges, addr("203.0.113.20")) || inRanges(d.Ranges, addr("198.51.100.1")) {
		t.Errorf("ranges %v: want the arp and bgp pools and not the static one", d.Ranges)
	}
}
