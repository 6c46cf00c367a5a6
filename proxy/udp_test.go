package proxy

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// udpEcho answers every datagram with "echo:" and the payload.
func udpEcho(t *testing.T, host string) string {
	t.Helper()
	c, err := net.ListenPacket("udp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	return c.LocalAddr().String()
}

// udpAsk sends msg from c to vip and returns the reply and its source.
func udpAsk(t *testing.T, c *net.UDPConn, vip netip.AddrPort, msg string) (string, netip.AddrPort, error) {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort([]byte(msg), vip); err != nil {
		return "", netip.AddrPort{}, err
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 65536)
	n, from, err := c.ReadFromUDPAddrPort(buf)
	return string(buf[:n]), netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), err
}

func udpClient(t *testing.T, host string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(host+":0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (p *Proxy) udpFlows(k snapshot.Key) int {
	p.mu.Lock()
	s := p.sockets[k]
	p.mu.Unlock()
	if s == nil {
		return -1
	}
	s.udp.mu.Lock()
	defer s.udp.mu.Unlock()
	return len(s.udp.flows)
}

func TestUDPRoundTripsFromTheVIP(t *testing.T) {
	tests := []struct{ name, vip, host, member string }{
		{"IPv4", "127.0.0.3", "127.0.0.1", "127.0.0.1"},
		{"IPv6", "::1", "[::1]", "[::1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			member := udpEcho(t, tt.member)
			p, m := newProxy(t, Config{Limits: Limits{Defaults: snapshot.Defaults{UDPIdleTimeout: 150 * time.Millisecond}}})
			port := freePort(t)
			update(t, p, l4LB("dns", tt.vip, port, "udp", member))
			vip := netip.MustParseAddrPort(vipAddr(tt.vip, port))
			key := snapshot.Key{Addr: vip, Network: snapshot.UDP}
			a, b := udpClient(t, tt.host), udpClient(t, tt.host)
			for i, c := range []*net.UDPConn{a, b, a} {
				reply, from, err := udpAsk(t, c, vip, "q")
				if err != nil {
					t.Fatalf("query %d: %v", i, err)
				}
				if reply != "echo:q" || from != vip {
					t.Errorf("query %d: reply %q from %s, want echo:q from the VIP %s", i, reply, from, vip)
				}
			}
			if n := p.udpFlows(key); n != 2 {
				t.Errorf("%d flows for two clients", n)
			}
			eventually(t, "idle flows to expire", func() bool { return p.udpFlows(key) == 0 })
			eventually(t, "flow counters", func() bool {
				l := m.Report().Listeners[0]
				return l.Opened == 2 && l.Closed == 2 && l.BytesIn == 3 && l.BytesOut == 18
			})
			if _, _, err := udpAsk(t, a, vip, "again"); err != nil {
				t.Errorf("new flow after expiry: %v", err)
			}
		})
	}
}

func TestUDPFlowTableIsBounded(t *testing.T) {
	member := udpEcho(t, "127.0.0.1")
	p, m := newProxy(t, Config{Limits: Limits{Defaults: snapshot.Defaults{MaxUDPFlows: 2}}})
	port := freePort(t)
	update(t, p, l4LB("dns", "127.0.0.3", port, "udp", member))
	vip := netip.MustParseAddrPort(vipAddr("127.0.0.3", port))
	for i := range 2 {
		if _, _, err := udpAsk(t, udpClient(t, "127.0.0.1"), vip, "q"); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	if _, _, err := udpAsk(t, udpClient(t, "127.0.0.1"), vip, "q"); err == nil {
		t.Fatal("a third flow was served with a table of two")
	}
	if n := m.Report().Listeners[0].Refused[RefusedListenerLimit]; n != 1 {
		t.Errorf("%d refusals counted", n)
	}
}

func TestUDPNoMemberDrops(t *testing.T) {
	p, m := newProxy(t, Config{})
	port := freePort(t)
	lb := l4LB("dns", "127.0.0.3", port, "udp", "127.0.0.1:9")
	w := uint32(0)
	lb.Pools["app"].Members[0].Weight = &w
	update(t, p, lb)
	if _, _, err := udpAsk(t, udpClient(t, "127.0.0.1"), netip.MustParseAddrPort(vipAddr("127.0.0.3", port)), "q"); err == nil {
		t.Fatal("got a reply with every member drained")
	}
	if n := m.Report().Listeners[0].Refused[RefusedNoMember]; n != 1 {
		t.Errorf("%d refusals counted", n)
	}
}
