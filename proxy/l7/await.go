package l7

import (
	"fmt"
	"time"
)

// sendHead sends a request head to the member under the write timeout
// bt: as a plain write when a body follows (stream), else through
// sendAwait, whose wait for the answer (bounded by rht) is armed before
// the request leaves, so no read finds the socket empty. Both HTTP/1.x
// and HTTP/2 clients' requests to HTTP/1.1 members leave through it.
func (u *upConn) sendHead(head []byte, stream bool, now int64, bt, rht time.Duration) error {
	err := u.setWriteDeadline(now, bt)
	switch {
	case err != nil:
	case stream:
		_, err = u.nc.Write(head)
	default:
		if err = u.setReadDeadline(now, rht); err == nil {
			err = u.sendAwait(head)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
	}
	return nil
}

// sendAwait writes b to the member and, on a bare TCP connection, reads
// the first bytes of its answer into rb with no read attempted before
// the answer could arrive (rawAwait). An idle HTTP/1.1 member sends
// nothing unasked but a close: a FIN or a 408 whose readiness the armed
// wait may miss is followed by a reset when the request reaches the
// closed socket, and that wakes it. The returned error is a failure to
// write; a failure to read is returned by the next fill.
func (u *upConn) sendAwait(b []byte) error {
	if u.aw == nil {
		_, err := u.nc.Write(b)
		return err
	}
	n, rest, rerr, werr := u.aw.writeRead(b, u.rb[u.w:])
	switch {
	case werr != nil:
		return werr
	case rest != nil:
		_, err := u.nc.Write(rest)
		return err
	}
	u.w += n
	u.got += n
	u.pending = rerr
	return nil
}
