package proxy

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/steer"
)

// TestSteeredHTTP3SpoofedFloodStaysOnItsVIP: one tenant's HTTP/3 ports on
// two VIPs share one steered UDP socket. A spoofed-source Initial flood
// to the first (2,000 raw IP packets from forged sources in
// 127.66.0.0/16) holds handshakes of the first VIP only, at most
// H3RetryAbove of them (its transport asks the rest for a Retry); the
// second VIP's transport keeps none and serves a client meanwhile, as
// does the first; the host sends the forged sources at most three bytes
// for each byte they sent. Needs root (a namespace, raw sockets).
func TestSteeredHTTP3SpoofedFloodStaysOnItsVIP(t *testing.T) {
	bes := map[string]*routingBackend{"one": startRoutingBackend(t, "one"), "two": startRoutingBackend(t, "two")}
	netnstest.Run(t, []string{"192.0.2.1/32", "192.0.2.2/32"}, func() {
		st, err := steer.Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv := l7.New(l7.Config{})
		defer srv.Close()
		p, _ := newProxy(t, Config{Steer: st, HTTP: newH3Term(t, srv)})
		defer p.Close()
		lbs := []*pb.LoadBalancer{steeredH3LB("one", "192.0.2.1", bes["one"]), steeredH3LB("two", "192.0.2.2", bes["two"])}
		if err := p.Update(steeredUDPObjects(lbs...), 1); err != nil {
			t.Fatalf("Update: %v", err)
		}
		vip1, vip2 := netip.MustParseAddrPort("192.0.2.1:443"), netip.MustParseAddrPort("192.0.2.2:443")
		key1, key2 := snapshot.Key{Addr: vip1, Network: snapshot.TCP}, snapshot.Key{Addr: vip2, Network: snapshot.TCP}
		if n := udpSocketsOnPort(t, 443); n != 1 {
			t.Fatalf("%d UDP sockets on port 443; want the tenant's one", n)
		}

		sn, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP)
		if err != nil {
			rawSocketUnavailable(t, err)
		}
		var in, out, otherOut atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		_ = unix.SetsockoptTimeval(sn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		_ = unix.SetsockoptInt(sn, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		spoofed := func(a [4]byte) bool { return a[0] == 127 && a[1] == 66 }
		wg.Go(func() {
			defer unix.Close(sn)
			buf := make([]byte, 65536)
			v1 := vip1.Addr().As4()
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
				case src == v1 && sport == 443 && spoofed(dst):
					out.Add(payload)
				case dst == v1 && dport == 443 && spoofed(src):
					in.Add(payload)
				case spoofed(dst):
					otherOut.Add(payload)
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
		ua := net.UDPAddrFromAddrPort(vip1)
		initials := make([][]byte, sources)
		for i := range initials {
			initials[i] = clientInitial(t, ua)
		}
		// The second VIP's handshakes, watched all along the flood.
		var most2 atomic.Int64
		watching := make(chan struct{})
		var ww sync.WaitGroup
		ww.Go(func() {
			for {
				most2.Store(max(most2.Load(), p.h3Handshakes(key2)))
				select {
				case <-watching:
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
		for i := range sources {
			src := [4]byte{127, 66, byte(i >> 8), byte(i)}
			pkt := spoofUDP(src, uint16(20000+i), vip1, initials[i])
			var sa unix.SockaddrInet4
			sa.Addr = vip1.Addr().As4()
			if err := unix.Sendto(raw, pkt, 0, &sa); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		waitFor(t, 20*time.Second, "the forged sources' bytes seen", func() bool { return in.Load() >= int64(sources)*1200*9/10 })
		held1 := p.h3Handshakes(key1)
		for _, c := range []struct {
			vip  netip.AddrPort
			want string
		}{{vip2, "two"}, {vip1, "one"}} {
			if got, err := h3Backend(t, c.vip); err != nil || got != c.want {
				t.Errorf("a client of %s during the flood: member %q, %v", c.vip, got, err)
			}
		}
		held := p.tenantBudget("acme").conns.Load()
		waitFor(t, 30*time.Second, "the forged handshakes to time out", func() bool { return p.h3Handshakes(key1) == 0 })
		close(watching)
		ww.Wait()
		ratio := float64(out.Load()) / float64(in.Load())
		t.Logf("steered spoofed flood: %d bytes in, %d out (factor %.2f); first VIP %d handshakes, second at most %d; tenant connections held %d",
			in.Load(), out.Load(), ratio, held1, most2.Load(), held)
		if ratio > 3 {
			t.Errorf("amplification factor %.2f, want at most 3", ratio)
		}
		if held1 > H3RetryAbove+1 {
			t.Errorf("the flood holds %d handshakes of the first VIP, want at most %d", held1, H3RetryAbove+1)
		}
		if held > H3RetryAbove+2 {
			t.Errorf("the flood holds %d connections of the tenant, want at most %d", held, H3RetryAbove+2)
		}
		// The two clients' handshakes are the only ones the second VIP
		// ever had.
		if m := most2.Load(); m > 1 {
			t.Errorf("the second VIP held %d handshakes during a flood of the first", m)
		}
		if n := otherOut.Load(); n != 0 {
			t.Errorf("%d bytes went to the forged sources from elsewhere than the first VIP", n)
		}
	})
}
