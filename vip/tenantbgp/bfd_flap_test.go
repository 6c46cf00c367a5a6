package tenantbgp

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/vip/bfd"
)

// A speaker whose BFD flaps (Down, Init, Up, Down: three packets a
// cycle) has its BGP session reset once per ResetHold, counted once, and
// wakes the loop once per ResetHold; a speaker that says AdminDown has
// its BGP session left alone.
func TestBFDFlapHeld(t *testing.T) {
	t.Parallel()
	peer, a := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("127.0.1.1")
	b := bfdState{downs: map[string]uint64{}, errs: map[string]error{}, held: map[bfdPeer]bfdHold{},
		keys:        map[string]map[netip.Addr]netip.Addr{"a": {peer: a}},
		established: map[netip.Addr]bool{a: true}}
	hold := 30 * time.Second
	now := time.Unix(1000, 0)
	resets, pokes := 0, 0
	cycle := func() {
		for _, st := range []bfd.Status{{State: bfd.Init, Prev: bfd.Down, Remote: bfd.Down}, {State: bfd.Up, Prev: bfd.Init, Remote: bfd.Up}, {State: bfd.Down, Prev: bfd.Up, Remote: bfd.Down}} {
			d := b.change("a", peer, st, now, hold)
			if d.reset {
				resets++
				if d.addr != a {
					t.Fatalf("reset %s, want %s", d.addr, a)
				}
			}
			if d.poke {
				pokes++
			}
			now = now.Add(10 * time.Millisecond)
		}
	}
	// 10 s of flapping, the BGP session read established at every pass.
	for range 333 {
		cycle()
		b.established[a] = true
	}
	if resets != 1 || pokes != 2 || b.downs["a"] != 1 {
		t.Fatalf("in 10 s of flapping: %d resets (%d counted), %d wake-ups; want 1, 1, 2", resets, b.downs["a"], pokes)
	}
	// After the hold, once more.
	now = now.Add(hold)
	cycle()
	if resets != 2 || pokes != 4 || b.downs["a"] != 2 {
		t.Fatalf("after the hold: %d resets (%d counted), %d wake-ups; want 2, 2, 4", resets, b.downs["a"], pokes)
	}
	// Not established (as read by the last pass): nothing to reset.
	now = now.Add(hold)
	b.established[a] = false
	cycle()
	if resets != 2 {
		t.Fatalf("a session not established was reset")
	}

	// AdminDown from the speaker: its BGP session is left alone.
	now = now.Add(hold)
	b.established[a] = true
	if d := b.change("a", peer, bfd.Status{State: bfd.Down, Prev: bfd.Up, Remote: bfd.AdminDown, Diag: bfd.DiagNeighborDown}, now, hold); d.reset {
		t.Fatal("the BGP session of a speaker that said AdminDown was reset")
	}
}

// A tenant's BFD drops are exported per reason, and kept when its
// endpoint is closed (made again or removed).
func TestBFDDropMetrics(t *testing.T) {
	t.Parallel()
	r := &Relay{srv: server.NewBgpServer(), world: compile([]*pb.Object{bfdTenant("a", 100)}, "lb1"),
		bfdSt: bfdState{downs: map[string]uint64{}, eps: map[string]*bfd.Endpoint{}, closed: map[string]bfd.Stats{}}}
	// The port was free when udpPort closed it; another package's
	// tests, run at the same time, may take it before the endpoint
	// binds it on every address: then another is tried.
	var e *bfd.Endpoint
	var port, peerPort uint16
	lo := netip.MustParseAddr("127.0.0.1")
	for try := 1; ; try++ {
		port, peerPort = udpPort(t), udpPort(t)
		e = bfd.New(bfd.Config{Port: port, PeerPort: peerPort})
		err := e.Set(map[netip.Addr]bfd.Params{lo: {MinTx: time.Second, MinRx: time.Second, Multiplier: 3}})
		if err == nil {
			break
		}
		e.Close()
		if !errors.Is(err, unix.EADDRINUSE) || try == 5 {
			t.Fatal(err)
		}
	}
	r.bfdSt.eps["a"] = e
	// Down, multiplier 3, length 24, my discriminator 5, your
	// discriminator 12345 (not the session's), from the peer at TTL 255.
	pk := []byte{0x20, 0x40, 3, 24, 0, 0, 0, 5, 0, 0, 0x30, 0x39, 0, 0x0f, 0x42, 0x40, 0, 0x0f, 0x42, 0x40, 0, 0, 0, 0}
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, _ := c.(*net.UDPConn).SyscallConn()
	_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 255) })
	if _, err := c.WriteTo(pk, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}); err != nil {
		t.Fatal(err)
	}
	want := func() string {
		return `
# HELP teapot_lb_tenant_bgp_bfd_dropped_total BFD packets this host read from the tenant's namespace and dropped: malformed (reason=invalid), from an address with no session (unknown-peer), with a TTL under 255 (ttl), with another session's discriminator (discriminator), or with the session's queue full (overflow).
# TYPE teapot_lb_tenant_bgp_bfd_dropped_total counter
teapot_lb_tenant_bgp_bfd_dropped_total{reason="discriminator",tenant="a"} 1
teapot_lb_tenant_bgp_bfd_dropped_total{reason="invalid",tenant="a"} 0
teapot_lb_tenant_bgp_bfd_dropped_total{reason="overflow",tenant="a"} 0
teapot_lb_tenant_bgp_bfd_dropped_total{reason="ttl",tenant="a"} 0
teapot_lb_tenant_bgp_bfd_dropped_total{reason="unknown-peer",tenant="a"} 0
`
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := testutil.GatherAndCompare(registry(r), strings.NewReader(want()), "teapot_lb_tenant_bgp_bfd_dropped_total")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.closeEndpoint("a", e)
	if err := testutil.GatherAndCompare(registry(r), strings.NewReader(want()), "teapot_lb_tenant_bgp_bfd_dropped_total"); err != nil {
		t.Fatalf("after the endpoint closed: %v", err)
	}
	if n, err := testutil.GatherAndCount(registry(r), "teapot_lb_tenant_bgp_bfd_packets_total", "teapot_lb_tenant_bgp_bfd_throttled_total"); err != nil || n != 3 {
		t.Fatalf("packets and throttled series: %d, %v", n, err)
	}
}

func udpPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}
