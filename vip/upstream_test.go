package vip

import (
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// routerRIB returns the IPv4 routes a gobgp router holds, with the
// communities of each.
func routerRIB(t *testing.T, srv *server.BgpServer) map[netip.Prefix][]uint32 {
	t.Helper()
	out := map[netip.Prefix][]uint32{}
	err := srv.ListPath(apiutil.ListPathRequest{TableType: gobgpapi.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_IPv4_UC},
		func(n bgp.NLRI, paths []*apiutil.Path) {
			p, err := netip.ParsePrefix(n.String())
			if err != nil {
				return
			}
			for _, path := range paths {
				for _, a := range path.Attrs {
					if c, ok := a.(*bgp.PathAttributeCommunities); ok {
						out[p] = append(out[p], c.Value...)
					}
				}
				if _, ok := out[p]; !ok {
					out[p] = nil
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The tenants' routes the relay hands over are announced to the router
// with their community, changed and withdrawn as the set changes.
func TestSetTenantRoutes(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables, which two
	// servers starting at once race on.
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatalf("127.0.0.3 (the loopback network) cannot be bound: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	router := server.NewBgpServer()
	go router.Serve()
	t.Cleanup(router.Stop)
	if err := router.StartBgp(t.Context(), &gobgpapi.StartBgpRequest{Global: &gobgpapi.Global{Asn: 65000, RouterId: "127.0.0.3",
		ListenPort: int32(port), ListenAddresses: []string{"127.0.0.3"}}}); err != nil {
		t.Fatal(err)
	}
	if err := router.AddPeer(t.Context(), &gobgpapi.AddPeerRequest{Peer: &gobgpapi.Peer{
		Conf:      &gobgpapi.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001},
		Transport: &gobgpapi.Transport{PassiveMode: true},
	}}); err != nil {
		t.Fatal(err)
	}
	sp, err := startSpeaker(BGPConfig{ASN: 65001, RouterID: "127.0.0.1", Peers: []BGPPeer{{Address: "127.0.0.3", ASN: 65000, Port: uint16(port)}}},
		slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.stop)
	m := &Manager{carriers: carriers{spk: sp}}
	wait := func(what string, ok func(map[netip.Prefix][]uint32) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			rib := routerRIB(t, router)
			if ok(rib) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: the router has %v", what, rib)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	pods, nodes := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.20.0.0/16")
	const c1, c2 = 64512<<16 | 60, 64512<<16 | 61
	if err := m.SetTenantRoutes(map[netip.Prefix]uint32{pods: c1, nodes: c1}); err != nil {
		t.Fatal(err)
	}
	wait("both routes with the community", func(rib map[netip.Prefix][]uint32) bool {
		return slices.Equal(rib[pods], []uint32{c1}) && slices.Equal(rib[nodes], []uint32{c1})
	})
	if err := m.SetTenantRoutes(map[netip.Prefix]uint32{pods: c2}); err != nil {
		t.Fatal(err)
	}
	wait("one withdrawn, the other with the new community", func(rib map[netip.Prefix][]uint32) bool {
		_, still := rib[nodes]
		return slices.Equal(rib[pods], []uint32{c2}) && !still
	})
	if err := sp.withdrawAll(); err != nil {
		t.Fatal(err)
	}
	wait("everything withdrawn", func(rib map[netip.Prefix][]uint32) bool { return len(rib) == 0 })
	if err := m.SetTenantRoutes(map[netip.Prefix]uint32{pods: c1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // nothing to poll for: nothing may come
	if rib := routerRIB(t, router); len(rib) != 0 {
		t.Errorf("announced after the host withdrew every route: %v", rib)
	}
	var none *Manager
	if err := none.SetTenantRoutes(nil); err == nil {
		t.Error("a host without a speaker took the tenants' routes")
	}
}
