package l7

import (
	"net"
	"syscall"
)

// rawConnOf returns the RawConn of a bare TCP client connection, or
// nil where none can be had.
func rawConnOf(tc *net.TCPConn) syscall.RawConn {
	if tc == nil {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// stepRaw is the RawConn.Read callback of a bare TCP client connection
// (see rawClient). It returns false to wait until the socket is
// readable, true to leave.
func (c *clientConn) stepRaw(fd uintptr) bool {
	x := &c.rx
	x.fd = int(fd)
	if x.tr != nil {
		return c.stepTLS(fd)
	}
	for {
		if x.fresh && c.parsed() {
			return true
		}
		if x.fresh {
			continue // pipelined bytes after a response
		}
		if !x.needRead {
			// The last read drained the socket: whatever came since
			// announced itself, so wait, then read.
			x.needRead = true
			return false
		}
		if c.w == len(c.rb) {
			if c.r == 0 {
				return true // errBufFull: the parser bounds heads before this
			}
			c.w = copy(c.rb, c.rb[c.r:c.w])
			c.r = 0
		}
		n, err := sockRead(int(fd), c.rb[c.w:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil || n <= 0:
			return true // closed or reset: nothing to answer
		}
		c.w += n
		x.needRead = c.w == len(c.rb)
		x.fresh = true
	}
}
