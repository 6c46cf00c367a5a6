package vip

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/ndp"
)

var testMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x11}

func TestAnnouncementIPv4(t *testing.T) {
	frames, err := announcement(testMAC, netip.MustParseAddr("192.0.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 {
		t.Fatalf("%d frames, want a request and a reply", len(frames))
	}
	ip := []byte{192, 0, 2, 10}
	for i, tt := range []struct {
		op  uint16
		tha []byte
	}{{1, make([]byte, 6)}, {2, testMAC}} {
		f := frames[i]
		switch {
		case len(f) != minFrame:
			t.Errorf("frame %d: %d bytes, want %d", i, len(f), minFrame)
		case !bytes.Equal(f[0:6], broadcast) || !bytes.Equal(f[6:12], testMAC):
			t.Errorf("frame %d: Ethernet addresses % x", i, f[:12])
		case binary.BigEndian.Uint16(f[12:14]) != etherTypeARP:
			t.Errorf("frame %d: ethertype %#x", i, f[12:14])
		case binary.BigEndian.Uint16(f[20:22]) != tt.op:
			t.Errorf("frame %d: op %d, want %d", i, binary.BigEndian.Uint16(f[20:22]), tt.op)
		case !bytes.Equal(f[22:28], testMAC) || !bytes.Equal(f[28:32], ip):
			t.Errorf("frame %d: sender % x % x", i, f[22:28], f[28:32])
		case !bytes.Equal(f[32:38], tt.tha) || !bytes.Equal(f[38:42], ip):
			t.Errorf("frame %d: target % x % x", i, f[32:38], f[38:42])
		}
	}
}

func TestAnnouncementIPv6(t *testing.T) {
	a := netip.MustParseAddr("2001:db8::10")
	frames, err := announcement(testMAC, a)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 {
		t.Fatalf("%d frames, want one neighbour advertisement", len(frames))
	}
	f := frames[0]
	if !bytes.Equal(f[0:6], allNodesMAC) || binary.BigEndian.Uint16(f[12:14]) != etherTypeIPv6 {
		t.Fatalf("Ethernet header % x", f[:14])
	}
	ip6 := f[14:54]
	if ip6[6] != 58 || ip6[7] != 255 {
		t.Errorf("next header %d hop limit %d, want 58 and 255", ip6[6], ip6[7])
	}
	if src := netip.AddrFrom16([16]byte(ip6[8:24])); src != a {
		t.Errorf("source %s, want %s", src, a)
	}
	if int(binary.BigEndian.Uint16(ip6[4:6])) != len(f)-54 {
		t.Errorf("payload length %d, frame carries %d", binary.BigEndian.Uint16(ip6[4:6]), len(f)-54)
	}
	m, err := ndp.ParseMessage(f[54:])
	if err != nil {
		t.Fatal(err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok || !na.Override || na.Solicited || na.Router || na.TargetAddress != a {
		t.Fatalf("message %+v, want an unsolicited override advertisement for %s", m, a)
	}
	if len(na.Options) != 1 || !bytes.Equal(na.Options[0].(*ndp.LinkLayerAddress).Addr, testMAC) {
		t.Errorf("options %+v, want the target link-layer address", na.Options)
	}
}

func TestAnnouncementNeedsEthernet(t *testing.T) {
	if _, err := announcement(nil, netip.MustParseAddr("192.0.2.1")); err == nil {
		t.Error("no error for an interface without an Ethernet address")
	}
}
