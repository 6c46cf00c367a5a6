package proxy

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/metrics"
)

// udpMember answers every datagram from the proxy with reply(n): the sizes
// of the datagrams it sends back for a datagram of n bytes. It counts the
// bytes it sent.
func udpMember(t *testing.T, reply func(n int) []int) (string, *atomic.Int64) {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var sent atomic.Int64
	go func() {
		buf := make([]byte, 65536)
		out := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, size := range reply(n) {
				if _, err := c.WriteTo(out[:size], from); err == nil {
					sent.Add(int64(size))
				}
			}
		}
	}()
	return c.LocalAddr().String(), &sent
}

// udpCounter reads every datagram c receives and counts their bytes and
// number.
func udpCounter(c *net.UDPConn) (bytes, grams *atomic.Int64) {
	bytes, grams = new(atomic.Int64), new(atomic.Int64)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			bytes.Add(int64(n))
			grams.Add(1)
		}
	}()
	return bytes, grams
}

func listenerStats(m *metrics.Memory) metrics.ListenerStats {
	if ls := m.Report().Listeners; len(ls) > 0 {
		return ls[0]
	}
	return metrics.ListenerStats{}
}

// TestUDPReflectionBounded: a member that answers each 40-byte datagram
// with 64 KiB (64 datagrams of 1 KiB) is what a tenant needs to turn a
// UDP listener into a reflector against a spoofed source. The listener
// relays at most max(udpReplyFloor, 3×) what the client sent before the
// client showed it receives, and max(udpReplyFloor, 64×) after; the rest
// is dropped and counted.
func TestUDPReflectionBounded(t *testing.T) {
	t.Parallel()
	amp := func(int) []int {
		out := make([]int, 64)
		for i := range out {
			out[i] = 1024
		}
		return out
	}
	tests := []struct {
		name  string
		grams int
		ratio int64
	}{
		{"one spoofed datagram", 1, udpReplyRatio},
		{"a spoofer sending on", 10, udpReplyRatioVerified},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			member, sent := udpMember(t, amp)
			p, m := newProxy(t, Config{})
			port := freePort(t)
			update(t, p, l4LB("amp", "127.0.0.3", port, "udp", member))
			vip := netip.MustParseAddrPort(vipAddr("127.0.0.3", port))
			c := udpClient(t, "127.0.0.1")
			got, _ := udpCounter(c)
			q := make([]byte, 40)
			for i := range tt.grams {
				if _, err := c.WriteToUDPAddrPort(q, vip); err != nil {
					t.Fatal(err)
				}
				// The next datagram after the member's burst, as a
				// spoofer who guesses when replies went out would send.
				want := int64(i+1) * 64 << 10
				deadline := time.Now().Add(5 * time.Second)
				for sent.Load() < want && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			total := int64(tt.grams) * 64 << 10
			// Every reply the member sent is relayed or dropped; some
			// may be lost in socket buffers, so the wait is bounded.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				l := listenerStats(m)
				// The reader counts the client's datagram after writing it to
				// the member, so the reply may be counted first.
				if l.BytesOut+l.UDPReplyDropped >= total && l.BytesIn >= int64(tt.grams)*40 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			l := listenerStats(m)
			in := int64(tt.grams) * 40
			bound := max(udpReplyFloor, tt.ratio*in)
			if l.BytesIn != in {
				t.Errorf("received %d bytes from the client, sent %d", l.BytesIn, in)
			}
			if l.BytesOut > bound {
				t.Errorf("relayed %d bytes for %d from the client (×%d), bound %d", l.BytesOut, in, l.BytesOut/in, bound)
			}
			if l.BytesOut+l.UDPReplyDropped <= bound || l.UDPReplyDropped == 0 {
				t.Errorf("relayed %d and dropped %d bytes of the member's %d: it did not offer more than the bound %d", l.BytesOut, l.UDPReplyDropped, total, bound)
			}
			eventually(t, "the client to read what was relayed", func() bool { return got.Load() >= l.BytesOut })
			if g := got.Load(); g > bound {
				t.Errorf("the client received %d bytes, bound %d", g, bound)
			}
			t.Logf("client sent %d bytes, member answered %d, client received %d (×%.1f), dropped %d",
				in, sent.Load(), got.Load(), float64(got.Load())/float64(in), l.UDPReplyDropped)
		})
	}
}

// TestUDPReplyBudgetKeepsNormalFlows: request/response traffic within the
// budget is never dropped: a DNS-like member answering each 40-byte query
// with 400 bytes, and a download whose client sends a 40-byte
// acknowledgement for every two 1,200-byte datagrams (as QUIC does).
func TestUDPReplyBudgetKeepsNormalFlows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply []int
	}{
		{"dns", []int{400}},
		{"download", []int{1200, 1200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			member, _ := udpMember(t, func(int) []int { return tt.reply })
			p, m := newProxy(t, Config{})
			port := freePort(t)
			update(t, p, l4LB("app", "127.0.0.3", port, "udp", member))
			vip := netip.MustParseAddrPort(vipAddr("127.0.0.3", port))
			c := udpClient(t, "127.0.0.1")
			buf := make([]byte, 65536)
			q := make([]byte, 40)
			const rounds = 200
			for i := range rounds {
				if _, err := c.WriteToUDPAddrPort(q, vip); err != nil {
					t.Fatal(err)
				}
				for j := range tt.reply {
					_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
					n, _, err := c.ReadFromUDPAddrPort(buf)
					if err != nil {
						t.Fatalf("round %d, reply %d: %v (dropped %d bytes)", i, j, err, listenerStats(m).UDPReplyDropped)
					}
					if n != tt.reply[j] {
						t.Fatalf("round %d: reply of %d bytes, want %d", i, n, tt.reply[j])
					}
				}
			}
			if d := listenerStats(m).UDPReplyDropped; d != 0 {
				t.Errorf("dropped %d bytes of replies", d)
			}
		})
	}
}

// TestUDPDroppedRepliesTakeNoBuffer: the replies a flow drops over its
// budget cost no reply buffer and no copy (a reflecting member's burst
// took a 64 KiB buffer per datagram, which under load was most of what
// the host allocated). The test reads a package counter, so it does not
// run in parallel with the other UDP tests.
func TestUDPDroppedRepliesTakeNoBuffer(t *testing.T) {
	const burst = 64
	member, sent := udpMember(t, func(int) []int {
		out := make([]int, burst)
		for i := range out {
			out[i] = 1024
		}
		return out
	})
	p, m := newProxy(t, Config{})
	port := freePort(t)
	update(t, p, l4LB("amp", "127.0.0.3", port, "udp", member))
	vip := netip.MustParseAddrPort(vipAddr("127.0.0.3", port))
	c := udpClient(t, "127.0.0.1")
	udpCounter(c)
	before := replyBufTakes.Load()
	if _, err := c.WriteToUDPAddrPort(make([]byte, 40), vip); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the member's burst to be relayed or dropped", func() bool {
		l := listenerStats(m)
		return sent.Load() == burst*1024 && l.BytesOut+l.UDPReplyDropped >= burst*1024
	})
	l := listenerStats(m)
	taken := replyBufTakes.Load() - before
	relayed := l.BytesOut / 1024
	if taken > relayed+1 {
		t.Errorf("%d reply buffers taken for %d datagrams relayed and %d dropped, want at most %d", taken, relayed, l.UDPReplyDropped/1024, relayed+1)
	}
	t.Logf("%d datagrams relayed, %d dropped, %d buffers taken", relayed, l.UDPReplyDropped/1024, taken)
}
