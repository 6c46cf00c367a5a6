package proxy

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// TestHTTP3SpoofedInitialFlood is the flood an attacker sends: client
// Initials from raw IP packets with forged source addresses (2,000 of
// them, in 127.66.0.0/16, where nobody listens). A raw UDP socket sees
// every datagram to and from the listener's port: the host sends at most
// three bytes for each byte the forged sources sent, the flood holds at
// most H3RetryAbove handshakes of the tenant's connections, and a real
// client is served meanwhile. Needs root (raw sockets).
func TestHTTP3SpoofedInitialFlood(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" { // CI runs as root: not being root there is a failure
			t.Fatal("CI: needs root for raw sockets")
		}
		t.Skip("needs root for raw sockets")
	}
	p, target, _ := startH3(t)
	vip := mustAddrPort(t, target)
	ua := net.UDPAddrFromAddrPort(vip)
	key := snapshot.Key{Addr: vip, Network: snapshot.TCP}

	// The sniffer: every UDP datagram the host's IP layer delivers,
	// loopback traffic both ways included.
	sn, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP)
	if err != nil {
		rawSocketUnavailable(t, err)
	}
	var in, out atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	_ = unix.SetsockoptTimeval(sn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	_ = unix.SetsockoptInt(sn, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	spoofed := func(a [4]byte) bool { return a[0] == 127 && a[1] == 66 }
	wg.Go(func() {
		defer unix.Close(sn)
		buf := make([]byte, 65536)
		vb, vport := vip.Addr().As4(), vip.Port()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(sn, buf, 0)
			if err != nil || n < 28 {
				continue
			}
			ihl := int(buf[0]&0x0f) * 4
			var src, dst [4]byte
			copy(src[:], buf[12:16])
			copy(dst[:], buf[16:20])
			sport, dport := binary.BigEndian.Uint16(buf[ihl:]), binary.BigEndian.Uint16(buf[ihl+2:])
			payload := int64(n - ihl - 8)
			switch {
			case src == vb && sport == vport && spoofed(dst):
				out.Add(payload)
			case dst == vb && dport == vport && spoofed(src):
				in.Add(payload)
			}
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })

	raw, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		rawSocketUnavailable(t, err)
	}
	defer unix.Close(raw)
	const sources = 2000
	initials := make([][]byte, sources)
	for i := range initials {
		initials[i] = clientInitial(t, ua)
	}
	for i := range sources {
		src := [4]byte{127, 66, byte(i >> 8), byte(i)}
		pkt := spoofUDP(src, uint16(20000+i), vip, initials[i])
		var sa unix.SockaddrInet4
		sa.Addr = vip.Addr().As4()
		if err := unix.Sendto(raw, pkt, 0, &sa); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	waitFor(t, 20*time.Second, "the forged sources' bytes seen", func() bool { return in.Load() >= int64(sources)*1200*9/10 })
	resp, err := newH3Client(t, target).do("GET", "https://gw.acme.example/x", nil, "")
	if err != nil {
		t.Fatalf("a client during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a client during the flood: status %d", resp.StatusCode)
	}
	held := p.tenantBudget("acme").conns.Load()
	// Everything the server sends the forged sources, retransmissions
	// included, is sent once their handshakes timed out.
	waitFor(t, 30*time.Second, "the forged handshakes to time out", func() bool { return p.h3Handshakes(key) == 0 })
	ratio := float64(out.Load()) / float64(in.Load())
	t.Logf("spoofed flood: %d bytes in, %d bytes out (factor %.2f), %d connections held", in.Load(), out.Load(), ratio, held)
	if ratio > 3 {
		t.Errorf("amplification factor %.2f, want at most 3", ratio)
	}
	if held > H3RetryAbove+1 {
		t.Errorf("the flood holds %d connections of the tenant, want at most %d", held, H3RetryAbove+1)
	}
}

// spoofUDP builds an IPv4 packet carrying payload from src:sport to dst
// (UDP checksum 0: none, which IPv4 allows).
func spoofUDP(src [4]byte, sport uint16, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0], b[8], b[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	copy(b[12:16], src[:])
	d := dst.Addr().As4()
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	return b
}

// rawSocketUnavailable skips the test where raw sockets cannot be
// opened, but fails it under CI, which runs as root and has them.
func rawSocketUnavailable(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: raw socket: %v", err)
	}
	t.Skipf("raw socket (needs CAP_NET_RAW): %v", err)
}
