package l7

import (
	"net"
	"sync/atomic"
	"syscall"
)

// tlsTransport is the TCP connection under a client's TLS connection
// (ClientTransport). Outside the client's read callback it is the
// *net.TCPConn it embeds. Inside it (rawServe, stepTLS), crypto/tls
// reads through it from the socket the callback holds, and a read that
// would wait returns errWouldBlock instead: crypto/tls keeps what it has
// read of a record and hands the error back, the callback returns false
// and the runtime waits for readiness, and the next call carries on. So
// HTTPS keep-alive connections wait for their next request as bare TCP
// ones do, without a read that finds nothing.
type tlsTransport struct {
	*net.TCPConn
	rc syscall.RawConn
	// fd is the socket while the client's read callback runs, else -1.
	// A request body may be read from another goroutine, outside it.
	fd atomic.Int64
	// drained is set, inside the callback, when the last read returned
	// less than it could hold: the socket was empty, and whatever
	// arrives since announces itself, so the next read waits first.
	drained bool
}

// errWouldBlock is what a tlsTransport read inside the callback returns
// when it must wait for the socket. crypto/tls keeps a connection whose
// transport fails with a temporary net.Error usable, as it does for
// deadlines.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "l7: client socket has nothing to read yet" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

var _ net.Error = wouldBlock{}

// ClientTransport returns the connection to put under the TLS server
// connection of an accepted client (tls.Server(ClientTransport(c), cfg)),
// so that ServeConn can serve HTTP/1.x over it from the socket's read
// callback as it does bare TCP. It returns c itself when c is not a
// *net.TCPConn or the platform has no such path.
func ClientTransport(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc := rawConnOf(tc)
	if rc == nil {
		return c
	}
	t := &tlsTransport{TCPConn: tc, rc: rc}
	t.fd.Store(-1)
	return t
}

// enter readies t for a read callback: the runtime forgot the socket's
// readiness as the callback was entered, so the first read comes before
// any wait.
func (t *tlsTransport) enter() { t.drained = false }

// leave ends the callback: reads go through the TCP connection again.
func (t *tlsTransport) leave() { t.fd.Store(-1) }
