package l7

import (
	"errors"
	"syscall"
)

// closedByPeer reports whether a member closed or wrote to an idle
// connection: anything readable on an idle HTTP connection (a FIN, a
// reset, a TLS alert, a 408) makes it unfit for another request. It peeks
// without blocking and without consuming.
func (u *upConn) closedByPeer() bool {
	rc, err := u.raw.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN):
		case errors.Is(err, syscall.EINTR):
			return false
		default:
			gone = err != nil || n >= 0
		}
		return true
	})
	return gone || err != nil
}
