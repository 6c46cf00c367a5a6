package tenantbgp

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// BenchmarkPass100k: the cost of one pass over a session holding 100,000
// accepted routes that do not change.
func BenchmarkPass100k(b *testing.B) {
	const n = 100000
	port := freePort(b)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	sp := startTenantSpeaker(b, "", port)
	nh, _ := bgp.NewPathAttributeNextHop(netip.MustParseAddr("127.0.0.2"))
	var paths []*apiutil.Path
	for i := range n {
		nlri, _ := bgp.NewIPAddrPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32))
		paths = append(paths, &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri,
			Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh}})
	}
	if _, err := sp.srv.AddPath(apiutil.AddPathRequest{Paths: paths}); err != nil {
		b.Fatal(err)
	}
	t := &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.0.0.0/8"},
		Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2"}, MaxPrefixes: n}}
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: t}}})
	ctx := context.Background()
	deadline := time.Now().Add(120 * time.Second)
	for len(routes.get()) < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d routes installed", len(routes.get()), n)
		}
		r.pass(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	// gobgp's events for the table may still come: take them.
	for {
		ch := r.judgeSessions(r.world, r.cfg.HostAddrs(), time.Now())
		if len(ch.tenants) == 0 {
			break
		}
		r.install(r.world, ch, time.Now())
		time.Sleep(500 * time.Millisecond)
	}
	b.Run("steady", func(b *testing.B) {
		for b.Loop() {
			r.pass(ctx)
		}
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			r.judgedWorld = nil // judge every route again
			r.pass(ctx)
		}
	})
}
