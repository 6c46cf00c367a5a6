package tenantbgp

import (
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// cpuTime is the CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// oneRouteAMessage are n /32s in 10.0.0.0/8, each with its own MED so
// that the speaker sends each in an UPDATE of its own.
func oneRouteAMessage(n int) []*apiutil.Path {
	nh, _ := bgp.NewPathAttributeNextHop(netip.MustParseAddr("127.0.0.2"))
	paths := make([]*apiutil.Path, 0, n)
	for i := range n {
		nlri, _ := bgp.NewIPAddrPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32))
		paths = append(paths, &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri, Attrs: []bgp.PathAttributeInterface{
			bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh, bgp.NewPathAttributeMultiExitDisc(uint32(i))}})
	}
	return paths
}

// A table sent one route a message costs the host in proportion to its
// size: gobgp's own prefix limit counted the whole Adj-RIB-In on every
// UPDATE, so 20,000 such routes took minutes of CPU (and 100,000 most of
// an hour); the relay's mirror counts each route once.
func TestRelayTableOneRouteAMessage(t *testing.T) {
	// Not parallel: gobgp's StartBgp writes package variables, which
	// two servers starting at once race on.
	if testing.Short() {
		t.Skip("-short: 20,000 BGP UPDATE messages")
	}
	const n = 20000
	port := freePort(t)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sp := startTenantSpeaker(t, "", port)
	if _, err := sp.srv.AddPath(apiutil.AddPathRequest{Paths: oneRouteAMessage(n)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	tn := &pb.Tenant{Name: "kube", Networks: []string{"127.0.0.2/32", "10.0.0.0/8"},
		Bgp: &pb.TenantBGP{Asn: 64600, Peers: []string{"127.0.0.2"}, MaxPrefixes: 100000, MaxUpdatesPerSecond: 10000}}
	cpu, start := cpuTime(), time.Now()
	r.Update([]*pb.Object{{Kind: &pb.Object_Tenant{Tenant: tn}}})
	deadline := time.Now().Add(90 * time.Second)
	for len(routes.get()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d routes installed after %s (%s of CPU)", len(routes.get()), n, time.Since(start), cpuTime()-cpu)
		}
		time.Sleep(50 * time.Millisecond)
	}
	used := cpuTime() - cpu
	t.Logf("%d routes, one a message: installed after %s, %s of CPU (relay and speaker)", n, time.Since(start).Round(time.Millisecond), used.Round(time.Millisecond))
	// The race detector costs several times the CPU; the deadline above
	// holds (gobgp's own limit did not finish in it, with or without).
	if used > 20*time.Second && !raceEnabled {
		t.Errorf("%s of CPU for %d routes", used, n)
	}
}
