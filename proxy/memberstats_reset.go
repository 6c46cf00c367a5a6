package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerReset reports whether the peer of c reset the connection: the
// kernel has moved the socket to CLOSE (an RST arrived) while this side
// has not closed it yet. Called on the failure path only.
func peerReset(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		closed = err == nil && info.State == unix.BPF_TCP_CLOSE
	})
	return closed
}
