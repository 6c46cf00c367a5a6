package vip

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

// burst is when, after taking a VIP, this host announces it: at once and
// then a few times more in case a frame was lost or a switch was slow to
// learn.
var burst = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

const (
	etherTypeARP  = 0x0806
	etherTypeIPv6 = 0x86dd
	minFrame      = 60
)

var (
	broadcast    = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodesMAC  = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	allNodesAddr = netip.MustParseAddr("ff02::1")
)

// announcement returns the frames that tell a segment that a now lives at
// mac: for IPv4 a gratuitous ARP request and a gratuitous ARP reply (some
// hosts heed only one of them); for IPv6 an unsolicited neighbour
// advertisement with the override flag, to all nodes.
func announcement(mac net.HardwareAddr, a netip.Addr) ([][]byte, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("interface has no Ethernet address (%q)", mac)
	}
	if a.Is4() {
		return [][]byte{arpFrame(mac, a, 1), arpFrame(mac, a, 2)}, nil
	}
	f, err := naFrame(mac, a)
	if err != nil {
		return nil, err
	}
	return [][]byte{f}, nil
}

func ethHeader(dst, src net.HardwareAddr, typ uint16) []byte {
	b := make([]byte, 0, minFrame)
	b = append(b, dst...)
	b = append(b, src...)
	return binary.BigEndian.AppendUint16(b, typ)
}

// arpFrame is a gratuitous ARP: sender and target protocol address are
// both a; a request has an all-zero target hardware address, a reply
// repeats the sender's (as RFC 5227 and Linux's arp_is_garp expect).
func arpFrame(mac net.HardwareAddr, a netip.Addr, op uint16) []byte {
	b := ethHeader(broadcast, mac, etherTypeARP)
	b = binary.BigEndian.AppendUint16(b, 1) // Ethernet
	b = binary.BigEndian.AppendUint16(b, 0x0800)
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	ip := a.As4()
	b = append(b, mac...)
	b = append(b, ip[:]...)
	if op == 1 {
		b = append(b, 0, 0, 0, 0, 0, 0)
	} else {
		b = append(b, mac...)
	}
	b = append(b, ip[:]...)
	for len(b) < minFrame {
		b = append(b, 0)
	}
	return b
}

// naFrame is an unsolicited neighbour advertisement from a (the VIP is
// an address of the interface) to all nodes, hop limit 255.
func naFrame(mac net.HardwareAddr, a netip.Addr) ([]byte, error) {
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: a,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	icmp, err := ndp.MarshalMessageChecksum(na, a, allNodesAddr)
	if err != nil {
		return nil, fmt.Errorf("neighbour advertisement for %s: %w", a, err)
	}
	b := ethHeader(allNodesMAC, mac, etherTypeIPv6)
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, 58, 255) // ICMPv6, hop limit
	src, dst := a.As16(), allNodesAddr.As16()
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	return append(b, icmp...), nil
}

// sender writes raw frames on one interface. The socket is opened on
// first use and again after an error (the interface may have been
// recreated).
type sender struct {
	name string
	// ns is the path of the interface's namespace ("" the host's).
	ns   string
	conn *packet.Conn
	ifi  *net.Interface
}

func (s *sender) open() error {
	if s.conn != nil {
		return nil
	}
	var (
		ifi *net.Interface
		c   *packet.Conn
	)
	// The socket is made in the interface's namespace.
	err := inNamespace(s.ns, func() error {
		var err error
		if ifi, err = net.InterfaceByName(s.name); err != nil {
			return fmt.Errorf("interface %s: %w", s.name, err)
		}
		// Protocol 0: the socket only sends.
		if c, err = packet.Listen(ifi, packet.Raw, 0, nil); err != nil {
			return fmt.Errorf("raw socket on %s: %w", s.name, err)
		}
		return nil
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return err
	}
	s.conn, s.ifi = c, ifi
	return nil
}

// send announces a on the interface.
func (s *sender) send(a netip.Addr) error {
	if err := s.open(); err != nil {
		return err
	}
	frames, err := announcement(s.ifi.HardwareAddr, a)
	if err != nil {
		return err
	}
	for _, f := range frames {
		if _, err := s.conn.WriteTo(f, &packet.Addr{HardwareAddr: f[:6]}); err != nil {
			s.close()
			return fmt.Errorf("announce %s on %s: %w", a, s.name, err)
		}
	}
	return nil
}

func (s *sender) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.ifi = nil, nil
	}
}
