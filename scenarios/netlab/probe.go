package netlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// Neighbors asks, from the host's interface, who has address a (an ARP
// request for IPv4, a neighbour solicitation for IPv6) and returns every
// distinct hardware address that answered within wait. Two answers mean
// two hosts claim the address.
func (h *Host) Neighbors(ifname string, a netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	var out []net.HardwareAddr
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		src, err := sourceAddr(ifi, a.Is4())
		if err != nil {
			return err
		}
		proto := unix.ETH_P_ARP
		if !a.Is4() {
			proto = unix.ETH_P_IPV6
		}
		c, err := packet.Listen(ifi, packet.Raw, proto, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		var frame []byte
		if a.Is4() {
			frame = arpRequest(ifi.HardwareAddr, src, a)
		} else if frame, err = neighborSolicitation(ifi.HardwareAddr, src, a); err != nil {
			return err
		}
		if _, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: frame[:6]}); err != nil {
			return err
		}
		deadline := time.Now().Add(wait)
		buf := make([]byte, 1600)
		for {
			_ = c.SetReadDeadline(deadline)
			n, _, err := c.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			if mac := answerFrom(buf[:n], a); mac != nil && !slices.ContainsFunc(out, func(m net.HardwareAddr) bool { return m.String() == mac.String() }) {
				out = append(out, mac)
			}
		}
	})
	return out, err
}

func sourceAddr(ifi *net.Interface, v4 bool) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, ad := range addrs {
		p, err := netip.ParsePrefix(ad.String())
		if err != nil {
			continue
		}
		if a := p.Addr(); a.Is4() == v4 && !a.IsLinkLocalUnicast() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no address to ask from", ifi.Name)
}

func arpRequest(mac net.HardwareAddr, src, target netip.Addr) []byte {
	b := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = append(b, 0, 1, 8, 0, 6, 4, 0, 1)
	s, t := src.As4(), target.As4()
	b = append(b, mac...)
	b = append(b, s[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, t[:]...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

func neighborSolicitation(mac net.HardwareAddr, src, target netip.Addr) ([]byte, error) {
	dst, err := ndp.SolicitedNodeMulticast(target)
	if err != nil {
		return nil, err
	}
	ns := &ndp.NeighborSolicitation{
		TargetAddress: target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}},
	}
	icmp, err := ndp.MarshalMessageChecksum(ns, src, dst)
	if err != nil {
		return nil, err
	}
	d := dst.As16()
	b := []byte{0x33, 0x33, d[12], d[13], d[14], d[15]}
	b = append(b, mac...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IPV6)
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, 58, 255)
	s := src.As16()
	b = append(b, s[:]...)
	b = append(b, d[:]...)
	return append(b, icmp...), nil
}

// answerFrom returns the hardware address that frame says has a, or nil.
func answerFrom(frame []byte, a netip.Addr) net.HardwareAddr {
	if len(frame) < 14 {
		return nil
	}
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case unix.ETH_P_ARP:
		p := frame[14:]
		if len(p) < 28 || binary.BigEndian.Uint16(p[6:8]) != 2 {
			return nil
		}
		if spa, ok := netip.AddrFromSlice(p[14:18]); ok && spa == a {
			return slices.Clone(net.HardwareAddr(p[8:14]))
		}
	case unix.ETH_P_IPV6:
		p := frame[14:]
		if len(p) < 40 || p[6] != 58 {
			return nil
		}
		m, err := ndp.ParseMessage(p[40:])
		if err != nil {
			return nil
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok || na.TargetAddress != a {
			return nil
		}
		for _, o := range na.Options {
			if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
				return slices.Clone(lla.Addr)
			}
		}
		return slices.Clone(net.HardwareAddr(frame[6:12]))
	}
	return nil
}
