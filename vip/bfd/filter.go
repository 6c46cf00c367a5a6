package bfd

import (
	"encoding/binary"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The rx socket's kernel filter (classic BPF, SO_ATTACH_FILTER) drops a
// datagram that did not arrive with TTL (hop limit) 255 or whose source
// is not a session's peer before it is queued: such packets cost the
// endpoint no read, and a flood of them takes nothing from the token
// bucket that the sessions' own packets need. The filter sees the packet
// from its network header (SKF_NET_OFF): the IPv4 TTL is at offset 8 and
// the source at 12, the IPv6 hop limit at 7 and the source at 8.

const (
	skfNetOff = 0xfff00000 // SKF_NET_OFF, -0x100000 as a uint32
	bpfLdB    = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
	bpfLdW    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfRet    = unix.BPF_RET | unix.BPF_K
	accept    = 0xffffffff
	// maxFilterPeers bounds the peers listed in a filter (BPF_MAXINSNS
	// is 4096 instructions, an IPv6 peer takes 9); past it the filter
	// checks the TTL only and the endpoint drops the rest.
	maxFilterPeers = 400
)

// rxFilter is the program for a family's rx socket with sessions for
// peers: TTL 255, then a source among peers (none: every packet drops).
func rxFilter(six bool, peers []netip.Addr) []unix.SockFilter {
	ttlOff, srcOff := uint32(8), uint32(12)
	if six {
		ttlOff, srcOff = 7, 8
	}
	prog := []unix.SockFilter{
		{Code: bpfLdB, K: skfNetOff + ttlOff},
		{Code: bpfJeq, Jt: 1, Jf: 0, K: ttl},
		{Code: bpfRet, K: 0},
	}
	if len(peers) > maxFilterPeers {
		return append(prog, unix.SockFilter{Code: bpfRet, K: accept})
	}
	for _, p := range peers {
		b := p.AsSlice()
		words := len(b) / 4
		// Each word that differs jumps past the block's remaining
		// loads and compares and its accept.
		for i := range words {
			left := words - 1 - i
			prog = append(prog,
				unix.SockFilter{Code: bpfLdW, K: skfNetOff + srcOff + uint32(4*i)},
				unix.SockFilter{Code: bpfJeq, Jt: 0, Jf: uint8(2*left + 1), K: binary.BigEndian.Uint32(b[4*i:])})
		}
		prog = append(prog, unix.SockFilter{Code: bpfRet, K: accept})
	}
	return append(prog, unix.SockFilter{Code: bpfRet, K: 0})
}

// attachFilter sets c's kernel filter to prog, replacing the one before.
func attachFilter(c *net.UDPConn, prog []unix.SockFilter) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
			&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
	})
	if err != nil {
		return err
	}
	return serr
}
