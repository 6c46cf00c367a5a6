package l7

import (
	"io"
	"net"
	"os"
	"syscall"
)

// Read reads the socket: through the TCP connection outside the client's
// read callback, inside it with read(2) on the socket the callback holds,
// returning errWouldBlock where the callback must wait.
func (t *tlsTransport) Read(p []byte) (int, error) {
	fd := int(t.fd.Load())
	if fd < 0 {
		return t.TCPConn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if t.drained {
		t.drained = false
		return 0, errWouldBlock
	}
	for {
		n, err := sockRead(fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, errWouldBlock
		case err != nil:
			return 0, &net.OpError{Op: "read", Net: "tcp", Source: t.LocalAddr(), Addr: t.RemoteAddr(), Err: os.NewSyscallError("read", err)}
		case n == 0:
			return 0, io.EOF
		}
		t.drained = n < len(p)
		return n, nil
	}
}

// stepTLS is stepRaw for a client over TLS: the records come through
// crypto/tls, which reads the socket through x.tr. It reads whatever TLS
// has buffered before it asks the socket, and returns false to wait only
// when the transport says so.
func (c *clientConn) stepTLS(fd uintptr) bool {
	x := &c.rx
	x.tr.fd.Store(int64(fd))
	for {
		if x.fresh && c.parsed() {
			return true
		}
		if x.fresh {
			continue // pipelined bytes after a response
		}
		if c.w == len(c.rb) {
			if c.r == 0 {
				return true // errBufFull: the parser bounds heads before this
			}
			c.w = copy(c.rb, c.rb[c.r:c.w])
			c.r = 0
		}
		n, err := c.nc.Read(c.rb[c.w:])
		switch {
		case n > 0:
			// An error that came with the bytes (a close_notify read
			// after them) comes again with the next read.
			c.w += n
			x.fresh = true
		case err == errWouldBlock:
			return false
		default:
			return true // closed, reset or a TLS failure: nothing to answer
		}
	}
}
