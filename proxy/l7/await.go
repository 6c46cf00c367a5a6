package l7

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
