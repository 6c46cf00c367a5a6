package tenantbgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"testing"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// learned is what a tenant's speaker has learned from the host: prefix
// -> next hop.
func learned(srv *server.BgpServer) (map[netip.Prefix]netip.Addr, error) {
	return learnedOf(srv, bgp.RF_IPv4_UC)
}

// learnedOf is learned in one family.
func learnedOf(srv *server.BgpServer, fam bgp.Family) (map[netip.Prefix]netip.Addr, error) {
	got := map[netip.Prefix]netip.Addr{}
	err := srv.ListPath(apiutil.ListPathRequest{TableType: gobgpapi.TableType_TABLE_TYPE_GLOBAL, Family: fam},
		func(n bgp.NLRI, ps []*apiutil.Path) {
			for _, p := range ps {
				if p.PeerAddress.IsValid() && !p.PeerAddress.IsUnspecified() { // received, not the speaker's own
					if pfx, ok := prefixOf(n); ok {
						got[pfx] = nextHop(p)
					}
				}
			}
		})
	return got, err
}

// The VIPs of bgp pools in tenants' attachments are sent to the sessions
// of the tenants named for each, with this host's address in the
// tenant's attachment as next hop, and to no other tenant's: two
// attached tenants whose speakers have the same address (each in its own
// namespace) and two VIPs. A VIP moved from one tenant to the other is
// withdrawn from the first; one of the same address for both is sent to
// both; a withdrawn one leaves both. The speakers' own routes are still
// installed, and the observation lists what each tenant is sent.
func TestRelayAnnouncesVIPsToTheirTenantOnly(t *testing.T) {
	if ownProcess(t) {
		return
	}
	pa, pb2 := newNSPair(t, "xa"), newNSPair(t, "xb")
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pa, "b": pb2},
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("192.0.2.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sa := startNodeSpeaker(t, pa, "", "10.0.1.0/24")
	sb := startNodeSpeaker(t, pb2, "", "10.0.1.0/24")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{attachedTenant("a", 100, ""), attachedTenant("b", 200, "")})
	waitUntil(t, "the speakers' routes in the namespaces", func() error {
		for _, ns := range []string{pa.host, pb2.host} {
			got, err := nsRoutesOf(ns)
			if err != nil {
				return err
			}
			if len(got) != 1 {
				return fmt.Errorf("%s has %v", ns, got)
			}
		}
		return nil
	})

	vip1, vip2 := netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("10.0.0.101")
	host := netip.MustParseAddr("10.0.0.2")
	p1, p2 := netip.PrefixFrom(vip1, 32), netip.PrefixFrom(vip2, 32)
	expect := func(what string, wantA, wantB map[netip.Prefix]netip.Addr) {
		t.Helper()
		waitUntil(t, what, func() error {
			for _, c := range []struct {
				name string
				srv  *server.BgpServer
				want map[netip.Prefix]netip.Addr
			}{{"a", sa, wantA}, {"b", sb, wantB}} {
				got, err := learned(c.srv)
				if err != nil {
					return err
				}
				if !maps.Equal(got, c.want) {
					var h pb.HostObservation
					r.Observe(observe.Filter{}, &h)
					var rib []string
					_ = r.srv.ListPath(apiutil.ListPathRequest{TableType: gobgpapi.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_IPv4_UC}, func(n bgp.NLRI, ps []*apiutil.Path) {
						rib = append(rib, n.String())
					})
					return fmt.Errorf("tenant %s's speaker learned %v, want %v; relay rib %v; observed %v", c.name, got, c.want, rib, h.GetTenantBgp())
				}
			}
			return nil
		})
	}

	if err := r.AnnounceVIP(vip1, []string{"a"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.AnnounceVIP(vip2, []string{"b"}, []uint32{65001<<16 | 7}); err != nil {
		t.Fatal(err)
	}
	expect("each VIP at its tenant's speaker only", map[netip.Prefix]netip.Addr{p1: host}, map[netip.Prefix]netip.Addr{p2: host})
	// The pass that puts the VIPs in gobgp (syncExports) publishes its
	// observation at its end, after gobgp may have sent them: it is
	// waited for.
	waitUntil(t, "a's observation announcing vip1", func() error {
		var h pb.HostObservation
		r.Observe(observe.Filter{Tenant: "a"}, &h)
		o := h.GetTenantBgp()[0]
		if len(o.GetAnnounced()) != 1 || o.GetAnnounced()[0].GetPrefix() != "10.0.0.100/32" || o.GetAnnounced()[0].GetNextHop() != "10.0.0.2" ||
			o.GetAnnounceSince() == nil || o.GetAnnounceError() != "" {
			return fmt.Errorf("a's observation: %v", o)
		}
		return nil
	})
	waitUntil(t, "the session's advertised count", func() error {
		var h pb.HostObservation
		r.Observe(observe.Filter{Tenant: "a"}, &h)
		if ss := h.GetTenantBgp()[0].GetSessions(); len(ss) != 1 || ss[0].GetAdvertised() != 1 {
			return fmt.Errorf("sessions %v", ss)
		}
		return nil
	})

	waitUntil(t, "vip1 reaching a's router", func() error {
		if p := r.VIPProblem(vip1); p != "" {
			return errors.New(p)
		}
		return nil
	})

	// vip1 moves from a to b: a's speaker loses it.
	if err := r.AnnounceVIP(vip1, []string{"b"}, nil); err != nil {
		t.Fatal(err)
	}
	expect("vip1 moved to b", map[netip.Prefix]netip.Addr{}, map[netip.Prefix]netip.Addr{p1: host, p2: host})
	// Both tenants have a VIP of vip1's address.
	if err := r.AnnounceVIP(vip1, []string{"a", "b"}, nil); err != nil {
		t.Fatal(err)
	}
	expect("vip1 for both", map[netip.Prefix]netip.Addr{p1: host}, map[netip.Prefix]netip.Addr{p1: host, p2: host})
	if err := r.WithdrawVIP(vip1); err != nil {
		t.Fatal(err)
	}
	expect("vip1 withdrawn", map[netip.Prefix]netip.Addr{}, map[netip.Prefix]netip.Addr{p2: host})

	// A VIP for a tenant without bgp here is refused with the reason.
	if err := r.AnnounceVIP(vip1, []string{"c"}, nil); err != nil {
		t.Fatal(err)
	}
	r.Update([]*pb.Object{attachedTenant("a", 100, ""), attachedTenant("b", 200, ""),
		{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "c", Networks: []string{"10.0.0.0/24"}, Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"10.0.0.10"}}}}}})
	waitUntil(t, "c's reason", func() error {
		var h pb.HostObservation
		r.Observe(observe.Filter{Tenant: "c"}, &h)
		if o := h.GetTenantBgp(); len(o) != 1 || o[0].GetAnnounceError() != "VIP 10.0.0.100: tenant c has no attachment" {
			return fmt.Errorf("c observed %v", o)
		}
		return nil
	})
	if p := r.VIPProblem(vip1); p != "tenant c: VIP 10.0.0.100: tenant c has no attachment" {
		t.Errorf("vip1's problem for c: %q", p)
	}
	expect("nothing more after c", map[netip.Prefix]netip.Addr{}, map[netip.Prefix]netip.Addr{p2: host})

	// The policies of earlier plans are gone: the import policy and one
	// for b, its two sets.
	var pols []string
	if err := r.srv.ListPolicy(ctx, &gobgpapi.ListPolicyRequest{}, func(p *gobgpapi.Policy) { pols = append(pols, p.GetName()) }); err != nil {
		t.Fatal(err)
	}
	sets := 0
	for _, typ := range []gobgpapi.DefinedType{gobgpapi.DefinedType_DEFINED_TYPE_PREFIX, gobgpapi.DefinedType_DEFINED_TYPE_NEIGHBOR} {
		if err := r.srv.ListDefinedSet(ctx, &gobgpapi.ListDefinedSetRequest{DefinedType: typ}, func(*gobgpapi.DefinedSet) { sets++ }); err != nil {
			t.Fatal(err)
		}
	}
	if len(pols) != 2 || sets != 2 {
		t.Errorf("gobgp holds policies %v and %d sets after the changes, want local-only and b's with its 2 sets", pols, sets)
	}
}

// An IPv6 VIP goes to the tenant's IPv6 speaker with this host's IPv6
// address in the attachment as next hop.
func TestRelayAnnouncesIPv6VIP(t *testing.T) {
	if ownProcess(t) {
		return
	}
	pa := newNSPair(t, "x6")
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pa}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sa := startNodeSpeakerAt(t, pa, "2001:db8::10", "2001:db8::2", "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "a", Networks: []string{"2001:db8::/64", "2001:db8:5::/64"},
		Attachment: &pb.TenantAttachment{Vxlan: &pb.AttachmentVXLAN{Vni: 100, Remotes: []string{"203.0.113.2"}}, Hosts: map[string]string{"lb1": "2001:db8::2/64"}},
		Bgp:        &pb.TenantBGP{Asn: 64600, Peers: []string{"2001:db8::10"}}}}}})
	vip := netip.MustParseAddr("2001:db8:5::100")
	if err := r.AnnounceVIP(vip, []string{"a"}, nil); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix]netip.Addr{netip.PrefixFrom(vip, 128): netip.MustParseAddr("2001:db8::2")}
	waitUntil(t, "the IPv6 VIP at the speaker", func() error {
		got, err := learnedOf(sa, bgp.RF_IPv6_UC)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			var h pb.HostObservation
			r.Observe(observe.Filter{Tenant: "a"}, &h)
			return fmt.Errorf("learned %v, want %v; observed %v", got, want, h.GetTenantBgp())
		}
		return nil
	})
	if err := r.WithdrawVIP(vip); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the IPv6 VIP withdrawn", func() error {
		got, err := learnedOf(sa, bgp.RF_IPv6_UC)
		if err != nil || len(got) != 0 {
			return fmt.Errorf("learned %v (%v)", got, err)
		}
		return nil
	})
}

// VIPProblem says, per tenant a VIP is for, why it reaches none of its
// routers: not announced (the reason, or no pass yet), or announced with
// no established session of its family in the attachment.
func TestVIPProblem(t *testing.T) {
	vip4, vip6 := netip.MustParseAddr("10.0.1.100"), netip.MustParseAddr("2001:db8:1::100")
	r := &Relay{srv: server.NewBgpServer(), vips: map[netip.Addr]vipExport{
		vip4: {tenants: []string{"a", "b", "c"}}, vip6: {tenants: []string{"a"}}}}
	announced := []*pb.TenantRoute{{Prefix: "10.0.1.100/32", NextHop: "10.0.0.2"}, {Prefix: "2001:db8:1::100/128", NextHop: "2001:db8::2"}}
	r.obs = map[string]*pb.TenantBGPObservation{
		"a": {Tenant: "a", Announced: announced, Sessions: []*pb.TenantBGPSession{
			{Peer: "10.0.0.10", State: "established", Attachment: "teapot-att-a"},
			{Peer: "2001:db8::10", State: "active", Attachment: "teapot-att-a"}}},
		"b": {Tenant: "b", AnnounceError: "VIP 10.0.1.100: tenant b's attachment lists no address for this host"},
	}
	if p := r.VIPProblem(vip4); p != "tenant b: VIP 10.0.1.100: tenant b's attachment lists no address for this host; "+
		"tenant c: not announced (the relay reports no BGP of the tenant on this host, or has not passed since it was asked)" {
		t.Errorf("vip4: %q", p)
	}
	if p := r.VIPProblem(vip6); p != "tenant a: no session with its IPv6 speakers is established, so no router of the tenant has the route" {
		t.Errorf("vip6: %q", p)
	}
	r.obs["a"].Sessions[1].State = "established"
	if p := r.VIPProblem(vip6); p != "" {
		t.Errorf("vip6 with an established session: %q", p)
	}
	if p := r.VIPProblem(netip.MustParseAddr("10.0.1.101")); p != "" {
		t.Errorf("a VIP not asked for: %q", p)
	}
}
