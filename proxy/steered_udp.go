package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/internal/freebind"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"github.com/teapot-lb/teapot-lb/proxy/steer"
)

// With Config.Steer, a UDP key (a udp listener, or the HTTP/3 port of an
// https listener) has no socket of its own either: its address is steered
// to a socket its tenant's keys of one family, port and kind share. A
// UDP socket has no accept, and a reply's source port is always the
// socket's own, so the shared socket is bound to the keys' port (on an
// address of its own that nothing sends to: 127.127.x.y for IPv4, the
// discard prefix 100::/64 for IPv6, x.y and the host part being its
// slot); the packet info of each datagram (IP_PKTINFO, IPV6_RECVPKTINFO)
// names the address it was sent to, which selects the key, and each
// reply carries that address as its source. udp listeners and HTTP/3
// ports have sockets of their own kind: quic-go sets DF and ECN on its
// sockets, which a udp listener's relay does not.

// udpSharedKey names a shared UDP socket: a tenant's, of one family,
// port and kind.
type udpSharedKey struct {
	tenant string
	v6     bool
	port   uint16
	h3     bool
}

// udpShared is a UDP socket shared by the UDP keys of one udpSharedKey.
type udpShared struct {
	p    *Proxy
	key  udpSharedKey
	conn *net.UDPConn
	slot uint32
	refs int // guarded by steering.umu
	// dropped counts the datagrams read for an address that is not (or
	// no longer) steered here, or not this tenant's; drops is the
	// tenant's count of them, exported (steered_drops.go).
	dropped atomic.Int64
	drops   *steeredDrops

	mu    sync.RWMutex
	dests map[netip.Addr]*udpDest
}

// udpDest is one UDP key served through a shared socket.
type udpDest struct {
	// key is the listener's key: UDP for a udp listener, TCP for the
	// HTTP/3 port of an https listener.
	key  snapshot.Key
	addr netip.AddrPort
	h3   bool
	// src is the control message that makes a reply leave from addr.
	src []byte
	// shared is the socket the address is steered to now (written
	// under steering.umu).
	shared atomic.Pointer[udpShared]
	// receive takes one datagram sent to addr.
	receive func(b, oob []byte, from netip.AddrPort)
}

func newUDPDest(key snapshot.Key, h3 bool, receive func(b, oob []byte, from netip.AddrPort)) *udpDest {
	a := key.Addr.Addr().Unmap()
	d := &udpDest{key: key, addr: netip.AddrPortFrom(a, key.Addr.Port()), h3: h3, receive: receive}
	if a.Is4() {
		d.src = make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&d.src[0]))
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		b := a.As4()
		copy(d.src[unix.CmsgLen(0)+4:], b[:]) // ipi_spec_dst
	} else {
		d.src = make([]byte, unix.CmsgSpace(unix.SizeofInet6Pktinfo))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&d.src[0]))
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
		b := a.As16()
		copy(d.src[unix.CmsgLen(0):], b[:]) // ipi6_addr
	}
	return d
}

// writeTo sends b to the client from d's address, with the control
// messages in oob (quic-go's GSO and ECN).
func (d *udpDest) writeTo(b, oob []byte, to netip.AddrPort) (int, error) {
	sh := d.shared.Load()
	if sh == nil {
		return 0, net.ErrClosed
	}
	if len(oob) == 0 {
		oob = d.src
	} else {
		oob = append(oob, d.src...)
	}
	n, _, err := sh.conn.WriteMsgUDPAddrPort(b, oob, to)
	return n, err
}

// allocSlot takes a free slot of the sockmap.
func (st *steering) allocSlot() (uint32, error) {
	st.umu.Lock()
	defer st.umu.Unlock()
	return st.allocSlotLocked()
}

// allocSlotLocked is allocSlot under st.umu.
func (st *steering) allocSlotLocked() (uint32, error) {
	var slot uint32
	switch {
	case len(st.free) > 0:
		slot, st.free = st.free[len(st.free)-1], st.free[:len(st.free)-1]
	case st.next < steer.MaxSockets:
		slot = st.next
		st.next++
	default:
		return 0, fmt.Errorf("all %d shared sockets are in use (one per tenant and address family, and per tenant, family and port for UDP)", steer.MaxSockets)
	}
	return slot, nil
}

func (st *steering) freeSlot(slot uint32) {
	st.umu.Lock()
	st.free = append(st.free, slot)
	st.umu.Unlock()
}

// sharedUDPAddr is the address a shared UDP socket is bound to: one that
// no datagram is sent to but the steered ones, distinct per slot.
func sharedUDPAddr(v6 bool, slot uint32, port uint16) netip.AddrPort {
	if v6 {
		var b [16]byte
		b[0] = 0x01 // 100::/64, discard only (RFC 6666)
		binary.BigEndian.PutUint32(b[12:], slot)
		return netip.AddrPortFrom(netip.AddrFrom16(b), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 127, byte(slot >> 8), byte(slot)}), port)
}

// acquireUDPShared returns the shared socket of sk, opening it when none
// is open (under st.umu).
func (p *Proxy) acquireUDPShared(sk udpSharedKey) (*udpShared, error) {
	st := p.steering
	if sh := st.udp[sk]; sh != nil {
		sh.refs++
		return sh, nil
	}
	slot, err := st.allocSlotLocked()
	if err != nil {
		return nil, err
	}
	conn, err := listenSharedUDP(sk, slot)
	if err == nil {
		var rc syscall.RawConn
		if rc, err = conn.SyscallConn(); err == nil {
			err = st.s.SetSocket(slot, rc)
		}
		if err != nil {
			conn.Close()
		}
	}
	if err != nil {
		st.free = append(st.free, slot)
		return nil, err
	}
	sh := &udpShared{p: p, key: sk, conn: conn, slot: slot, refs: 1, dests: map[netip.Addr]*udpDest{}, drops: p.steeredDropsOf(sk.tenant)}
	st.udp[sk] = sh
	p.wg.Go(sh.readLoop)
	return sh, nil
}

// listenSharedUDP opens the socket of sk in slot, with the packet info
// of each datagram on (and, for HTTP/3, what quic-go sets on a socket of
// its own: ECN, DF, its buffer sizes).
func listenSharedUDP(sk udpSharedKey, slot uint32) (*net.UDPConn, error) {
	network := "udp4"
	if sk.v6 {
		network = "udp6"
	}
	addr := sharedUDPAddr(sk.v6, slot, sk.port)
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		if err := freebind.Control(network, address, c); err != nil {
			return err
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			set := func(level, opt, v int) {
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), level, opt, v)
				}
			}
			if sk.v6 {
				set(unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
				if sk.h3 {
					set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
					set(unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
				}
			} else {
				set(unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
				if sk.h3 {
					set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
					set(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("open the tenant's shared udp socket for port %d: %w", sk.port, err)
	}
	c := pc.(*net.UDPConn)
	if sk.h3 {
		// As quic-go asks of its sockets (it tries; a smaller buffer
		// only loses packets under load).
		_ = c.SetReadBuffer(7 << 20)
		_ = c.SetWriteBuffer(7 << 20)
	}
	return c, nil
}

// releaseUDPShared drops a reference to sh; the last one closes it
// (under st.umu).
func (p *Proxy) releaseUDPShared(sh *udpShared) {
	if sh.refs--; sh.refs > 0 {
		return
	}
	st := p.steering
	delete(st.udp, sh.key)
	sh.conn.Close()
	if err := st.s.ClearSocket(sh.slot); err != nil {
		p.log.Warn("shared udp socket not cleared", "tenant", sh.key.tenant, "port", sh.key.port, "error", err)
	}
	st.free = append(st.free, sh.slot)
}

// errUDPInUse refuses a UDP key whose address another key serves (a udp
// listener and an HTTP/3 port on one address and port, or an HTTP/3
// port that still drains).
var errUDPInUse = errors.New("address already in use")

// steerUDP steers d's address to tenant's shared socket, moving it from
// another tenant's when it was there.
func (p *Proxy) steerUDP(d *udpDest, tenant string) error {
	st := p.steering
	st.umu.Lock()
	defer st.umu.Unlock()
	old := d.shared.Load()
	if old != nil && old.key.tenant == tenant {
		return nil
	}
	sh, err := p.acquireUDPShared(udpSharedKey{tenant: tenant, v6: !d.addr.Addr().Is4(), port: d.addr.Port(), h3: d.h3})
	if err != nil {
		return err
	}
	if o := st.udpDests[d.addr]; o != nil && o != d {
		p.releaseUDPShared(sh)
		return fmt.Errorf("udp %s: %w", d.addr, errUDPInUse)
	}
	sh.mu.Lock()
	sh.dests[d.addr.Addr()] = d
	sh.mu.Unlock()
	if err := st.s.AddUDP(d.addr, sh.slot); err != nil {
		sh.mu.Lock()
		delete(sh.dests, d.addr.Addr())
		sh.mu.Unlock()
		p.releaseUDPShared(sh)
		return err
	}
	st.udpDests[d.addr] = d
	d.shared.Store(sh)
	if old != nil {
		// Datagrams the old socket still holds for the address are
		// dropped there.
		old.mu.Lock()
		delete(old.dests, d.addr.Addr())
		old.mu.Unlock()
		p.releaseUDPShared(old)
	}
	return nil
}

// unsteerUDP stops steering d's address and lets go of its socket.
func (p *Proxy) unsteerUDP(d *udpDest) {
	st := p.steering
	st.umu.Lock()
	defer st.umu.Unlock()
	sh := d.shared.Load()
	if sh == nil {
		return
	}
	if st.udpDests[d.addr] == d {
		delete(st.udpDests, d.addr)
		if err := st.s.RemoveUDP(d.addr); err != nil {
			p.log.Warn("steered udp address not removed", "listener", d.key.String(), "error", err)
		}
	}
	sh.mu.Lock()
	delete(sh.dests, d.addr.Addr())
	sh.mu.Unlock()
	d.shared.Store(nil)
	p.releaseUDPShared(sh)
}

// readLoop hands each datagram to the key it was sent to, if that key is
// steered here and its listener is this socket's tenant's; it drops the
// others.
func (sh *udpShared) readLoop() {
	p := sh.p
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	for {
		n, oobn, _, from, err := sh.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		dst, ok := pktinfoDst(oob[:oobn])
		var d *udpDest
		if ok {
			sh.mu.RLock()
			d = sh.dests[dst]
			sh.mu.RUnlock()
		}
		if d == nil {
			sh.drop()
			continue
		}
		if l := p.current.Load().listener(d.key); l == nil || l.Tenant != sh.key.tenant {
			sh.drop()
			continue
		}
		d.receive(buf[:n], oob[:oobn], netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	}
}

// drop counts a datagram not steered here (or not this tenant's).
func (sh *udpShared) drop() {
	sh.dropped.Add(1)
	sh.drops.notSteered.Add(1)
}

// pktinfoDst is the destination address in a datagram's packet info.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	for len(oob) > 0 {
		h, body, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return netip.Addr{}, false
		}
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(body) >= unix.SizeofInet4Pktinfo:
			return netip.AddrFrom4([4]byte(body[8:12])), true // ipi_addr
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(body) >= unix.SizeofInet6Pktinfo:
			return netip.AddrFrom16([16]byte(body[:16])).Unmap(), true
		}
		oob = rest
	}
	return netip.Addr{}, false
}

// steerUDPFor moves the steered UDP keys of s (its udp listener, its
// HTTP/3 port) to tenant's shared sockets, when they are steered and
// another tenant's.
func (p *Proxy) steerUDPFor(s *socket, l *snapshot.Listener) {
	for _, d := range []*udpDest{s.udpDest(), s.h3Dest()} {
		if d == nil {
			continue
		}
		if err := p.steerUDP(d, l.Tenant); err != nil {
			// The address stays with the former tenant's socket, whose
			// datagrams for it readLoop drops.
			p.log.Warn("udp address not moved to its new tenant's shared socket", "tenant", l.Tenant, "lb", l.LB, "listener", d.key.String(), "error", err)
		}
	}
}

func (s *socket) udpDest() *udpDest {
	if s.udp == nil {
		return nil
	}
	return s.udp.dest
}

func (s *socket) h3Dest() *udpDest {
	if s.h3 == nil {
		return nil
	}
	if c, ok := s.h3.pc.(*h3SteeredConn); ok {
		return c.d
	}
	return nil
}
