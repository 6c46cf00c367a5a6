// Package steer hands TCP connections and UDP datagrams for many
// addresses to a few sockets, with a BPF sk_lookup program attached to
// the network namespace: the kernel looks the destination (protocol,
// address, port) up in a map and gives the connection or datagram to the
// socket named there, whatever address and port that socket is bound to.
// A host serving 100,000 load balancers then holds a listening socket per
// tenant, not per load balancer.
//
// The program runs before the kernel's own socket lookup. A destination
// that is not in the map, or whose socket is gone, takes the normal path.
// It needs Linux 5.9 or later, CAP_BPF (or CAP_SYS_ADMIN) and
// CAP_NET_ADMIN in the namespace, and bpf(2) allowed by any seccomp
// filter (systemd's SystemCallFilter=@system-service leaves it out); a
// refusal names which of these it was. The program and its maps live as long
// as the Steer: when the process ends, the kernel detaches them.
package steer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxSockets is how many listening sockets one Steer holds.
const MaxSockets = 1 << 16

// Steer is one sk_lookup program attached to this process's network
// namespace, with its two maps: destinations to socket slots, and the
// sockets.
type Steer struct {
	mu      sync.Mutex
	dests   int // hash map: dest key -> slot (u32)
	sockets int // sockmap: slot -> socket
	prog    int
	link    int
	closed  bool
}

// Open loads the program and attaches it to the calling process's
// network namespace. maxDests bounds the destinations it can steer.
func Open(maxDests int) (*Steer, error) {
	if maxDests <= 0 {
		return nil, errors.New("steer: maxDests must be positive")
	}
	s := &Steer{dests: -1, sockets: -1, prog: -1, link: -1}
	var err error
	if s.dests, err = mapCreate(unix.BPF_MAP_TYPE_HASH, keySize, 4, uint32(maxDests), noPrealloc); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("steer: create the destination map: %w: %s", err, selfDeniedCause())
		}
		return nil, fmt.Errorf("steer: create the destination map: %w", err)
	}
	if s.sockets, err = mapCreate(unix.BPF_MAP_TYPE_SOCKMAP, 4, 8, MaxSockets, 0); err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: create the socket map: %w", err)
	}
	if s.prog, err = progLoad(program(s.dests, s.sockets)); err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: load the sk_lookup program: %w", err)
	}
	// The namespace of this thread is the process's: nothing here
	// switches namespaces on a locked thread.
	runtime.LockOSThread()
	ns, err := os.Open("/proc/thread-self/ns/net")
	runtime.UnlockOSThread()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: %w", err)
	}
	defer ns.Close()
	if s.link, err = linkCreate(s.prog, int(ns.Fd()), unix.BPF_SK_LOOKUP); err != nil {
		s.Close()
		return nil, fmt.Errorf("steer: attach the sk_lookup program to the network namespace: %w", err)
	}
	return s, nil
}

// Close detaches the program and frees its maps; connections already
// queued on the sockets stay there.
func (s *Steer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, fd := range []int{s.link, s.prog, s.sockets, s.dests} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	return nil
}

// SetSocket puts the socket in slot: a listening TCP socket (a Go
// listener made with MPTCP refuses: ListenConfig.SetMultipathTCP false)
// or a bound, unconnected UDP socket. A slot's socket takes the
// destinations of its own protocol only (the kernel refuses to assign a
// socket of another). A socket closed by its owner leaves the map by
// itself.
func (s *Steer) SetSocket(slot uint32, conn syscall.RawConn) error {
	if slot >= MaxSockets {
		return fmt.Errorf("steer: slot %d out of range", slot)
	}
	var uerr error
	err := conn.Control(func(fd uintptr) {
		v := uint64(fd)
		uerr = mapUpdate(s.sockets, unsafe.Pointer(&slot), unsafe.Pointer(&v), unix.BPF_ANY)
	})
	if err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("steer: add a socket: %w", err)
	}
	return nil
}

// ClearSocket empties slot. A slot already empty is no error: the
// kernel takes a socket out of the sockmap when it is closed, and a
// sockmap answers the deletion of an empty slot with EINVAL.
func (s *Steer) ClearSocket(slot uint32) error {
	if slot >= MaxSockets {
		return fmt.Errorf("steer: remove a socket: slot %d, want below %d", slot, MaxSockets)
	}
	err := mapDelete(s.sockets, unsafe.Pointer(&slot))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("steer: remove a socket: %w", err)
	}
	return nil
}

// Add steers TCP connections to dst to the socket in slot.
func (s *Steer) Add(dst netip.AddrPort, slot uint32) error {
	return s.add(unix.IPPROTO_TCP, dst, slot)
}

// AddUDP steers UDP datagrams to dst to the socket in slot.
func (s *Steer) AddUDP(dst netip.AddrPort, slot uint32) error {
	return s.add(unix.IPPROTO_UDP, dst, slot)
}

func (s *Steer) add(proto uint32, dst netip.AddrPort, slot uint32) error {
	k := destKey(proto, dst)
	if err := mapUpdate(s.dests, unsafe.Pointer(&k[0]), unsafe.Pointer(&slot), unix.BPF_ANY); err != nil {
		return fmt.Errorf("steer: add %s %s: %w", protoName(proto), dst, err)
	}
	return nil
}

// Remove stops steering TCP connections to dst; they take the kernel's
// own lookup again.
func (s *Steer) Remove(dst netip.AddrPort) error {
	return s.remove(unix.IPPROTO_TCP, dst)
}

// RemoveUDP stops steering UDP datagrams to dst.
func (s *Steer) RemoveUDP(dst netip.AddrPort) error {
	return s.remove(unix.IPPROTO_UDP, dst)
}

func (s *Steer) remove(proto uint32, dst netip.AddrPort) error {
	k := destKey(proto, dst)
	err := mapDelete(s.dests, unsafe.Pointer(&k[0]))
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("steer: remove %s %s: %w", protoName(proto), dst, err)
	}
	return nil
}

func protoName(proto uint32) string {
	if proto == unix.IPPROTO_UDP {
		return "udp"
	}
	return "tcp"
}

// Lookup returns the slot TCP connections to dst are steered to.
func (s *Steer) Lookup(dst netip.AddrPort) (uint32, bool) {
	return s.lookup(unix.IPPROTO_TCP, dst)
}

// LookupUDP returns the slot UDP datagrams to dst are steered to.
func (s *Steer) LookupUDP(dst netip.AddrPort) (uint32, bool) {
	return s.lookup(unix.IPPROTO_UDP, dst)
}

func (s *Steer) lookup(proto uint32, dst netip.AddrPort) (uint32, bool) {
	k := destKey(proto, dst)
	var slot uint32
	if err := mapLookup(s.dests, unsafe.Pointer(&k[0]), unsafe.Pointer(&slot)); err != nil {
		return 0, false
	}
	return slot, true
}

// The destination key, as the program writes it on its stack: family,
// protocol and local port (host order, 32 bits each), then the IPv4 and
// the IPv6 address (in network order, as the context has them; the one of
// the other family is zero).
const keySize = 32

func destKey(proto uint32, dst netip.AddrPort) [keySize]byte {
	var k [keySize]byte
	a := dst.Addr().Unmap()
	ne := binary.NativeEndian
	ne.PutUint32(k[4:], proto)
	ne.PutUint32(k[8:], uint32(dst.Port()))
	if a.Is4() {
		ne.PutUint32(k[0:], unix.AF_INET)
		b := a.As4()
		copy(k[12:16], b[:])
	} else {
		ne.PutUint32(k[0:], unix.AF_INET6)
		b := a.As16()
		copy(k[16:32], b[:])
	}
	return k
}
