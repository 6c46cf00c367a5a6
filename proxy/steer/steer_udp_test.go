package steer

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
)

func listenUDP(t *testing.T, network, addr string) *net.UDPConn {
	t.Helper()
	var lc net.ListenConfig
	c, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// TestSteersUDPDatagrams: a UDP destination steered to a slot reaches the
// unconnected UDP socket there, whatever it is bound to; the packet info
// names the address the datagram was sent to, and a reply sent with that
// address as its source comes from the destination the client sent to
// (the port is the socket's own). A TCP entry for the same address does
// not take UDP datagrams, nor a UDP entry TCP connections.
func TestSteersUDPDatagrams(t *testing.T) {
	netnstest.Run(t, []string{"192.0.2.20/32", "192.0.2.21/32", "2001:db8::20/128"}, func() {
		s, err := Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The shared sockets are bound to the port of the destinations
		// they take, on an address of their own.
		u4, u6 := listenUDP(t, "udp4", "127.0.0.1:5353"), listenUDP(t, "udp6", "[::1]:5353")
		for slot, c := range map[uint32]*net.UDPConn{1: u4, 2: u6} {
			rc, err := c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetSocket(slot, rc); err != nil {
				t.Fatalf("SetSocket(udp): %v", err)
			}
		}
		if err := ipv4.NewPacketConn(u4).SetControlMessage(ipv4.FlagDst, true); err != nil {
			t.Fatal(err)
		}
		if err := ipv6.NewPacketConn(u6).SetControlMessage(ipv6.FlagDst, true); err != nil {
			t.Fatal(err)
		}
		tl := listen(t, "127.0.0.1:0")
		if err := s.SetSocket(3, rawConn(t, tl)); err != nil {
			t.Fatal(err)
		}
		for dst, slot := range map[string]uint32{"192.0.2.20:5353": 1, "192.0.2.21:5353": 1, "[2001:db8::20]:5353": 2} {
			if err := s.AddUDP(netip.MustParseAddrPort(dst), slot); err != nil {
				t.Fatal(err)
			}
		}
		// A TCP entry on a UDP destination's address and port.
		if err := s.Add(netip.MustParseAddrPort("192.0.2.21:5353"), 3); err != nil {
			t.Fatal(err)
		}
		for dst, c := range map[string]*net.UDPConn{"192.0.2.20:5353": u4, "192.0.2.21:5353": u4, "[2001:db8::20]:5353": u6} {
			b, oob := make([]byte, 64), make([]byte, 128)
			var cl net.Conn
			var n, oobn int
			var from netip.AddrPort
			// A fresh namespace's IPv6 address now and then loses what a
			// socket connected to it right after it was added sends (its
			// route is cached at connect): a new socket each 250 ms.
			for tries := 0; ; tries++ {
				cl, err = net.Dial("udp", dst)
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				if _, err := cl.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
				n, oobn, _, from, err = c.ReadMsgUDPAddrPort(b, oob)
				if err == nil {
					break
				}
				if tries == 20 {
					t.Fatalf("%s: the steered socket read nothing: %v", dst, err)
				}
			}
			to := netip.MustParseAddrPort(dst).Addr()
			var got netip.Addr
			if to.Is4() {
				var cm ipv4.ControlMessage
				if err := cm.Parse(oob[:oobn]); err != nil {
					t.Fatal(err)
				}
				got, _ = netip.AddrFromSlice(cm.Dst)
			} else {
				var cm ipv6.ControlMessage
				if err := cm.Parse(oob[:oobn]); err != nil {
					t.Fatal(err)
				}
				got, _ = netip.AddrFromSlice(cm.Dst)
			}
			if string(b[:n]) != "ping" || got.Unmap() != to {
				t.Fatalf("%s: read %q sent to %s", dst, b[:n], got)
			}
			var reply []byte
			if to.Is4() {
				reply = (&ipv4.ControlMessage{Src: to.AsSlice()}).Marshal()
			} else {
				reply = (&ipv6.ControlMessage{Src: to.AsSlice()}).Marshal()
			}
			if _, _, err := c.WriteMsgUDPAddrPort([]byte("pong"), reply, from); err != nil {
				t.Fatalf("%s: reply: %v", dst, err)
			}
			cl.SetReadDeadline(time.Now().Add(5 * time.Second))
			// A connected client socket takes only datagrams from the
			// address and port it sent to.
			if n, err := cl.Read(b); err != nil || string(b[:n]) != "pong" {
				t.Fatalf("%s: the client got %q, %v; want pong from the destination", dst, b[:n], err)
			}
		}
		if slot, ok := s.LookupUDP(netip.MustParseAddrPort("192.0.2.21:5353")); !ok || slot != 1 {
			t.Errorf("LookupUDP = %d, %t; want 1, true", slot, ok)
		}
		if slot, ok := s.Lookup(netip.MustParseAddrPort("192.0.2.21:5353")); !ok || slot != 3 {
			t.Errorf("Lookup = %d, %t; want 3, true", slot, ok)
		}
		// The TCP entry takes TCP connections to the address.
		if l, _ := reaches(t, "192.0.2.21:5353", tl); l != tl {
			t.Error("a TCP connection to 192.0.2.21:5353 did not reach the TCP slot")
		}
		// A removed UDP destination takes the kernel's lookup: nothing
		// listens there, the datagram is not delivered to the socket.
		if err := s.RemoveUDP(netip.MustParseAddrPort("192.0.2.20:5353")); err != nil {
			t.Fatal(err)
		}
		cl, err := net.Dial("udp", "192.0.2.20:5353")
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cl.Write([]byte("late"))
		u4.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _, err := u4.ReadFromUDPAddrPort(make([]byte, 64)); err == nil {
			t.Errorf("a removed destination still reached the socket (%d bytes)", n)
		}
	})
}
