package l7

import "syscall"

// rawServe serves the requests of a bare TCP client connection from
// inside its syscall.RawConn.Read callback (stepRaw), so that the
// socket's readiness is remembered from one request to the next.
//
// With net.Conn, reading the next request right after writing a
// response nearly always fails with EAGAIN (the client had no time to
// send it), then waits in the poller and reads again. The wait cannot
// simply come first: the runtime forgets a socket's readiness when a
// read starts (internal/poll's prepareRead), and a pipelining client's
// next request may have arrived, with its readiness event, before that.
// Inside one RawConn.Read the readiness is reset once, when it starts;
// from then on every arrival is recorded. So after a read that found the
// socket empty or drained it (it returned less than it could hold),
// waiting is enough: bytes that came since then, pipelined during the
// exchange or not, announced themselves and end the wait at once. A
// read that filled the buffer, and the first read after the callback
// is entered, come before any wait.
//
// The callback holds the socket's read lock, so nothing inside may read
// the client through net.Conn: a request whose body is not all buffered,
// or that asks for an upgrade, leaves the callback with its head parsed
// and is handled outside (nextRaw returns true), with reads of its own.
type rawServe struct {
	rc       syscall.RawConn
	fd       int                // the socket, while stepRaw runs
	step     func(uintptr) bool // the connection's stepRaw, made once
	on       bool               // stepRaw may run: client reads must not use nc
	needRead bool               // the socket may hold bytes no readiness event announced
	fresh    bool               // buffered bytes the parser has not seen
	started  bool               // a request's first bytes are in and it is claimed
	hdrDL    bool               // the header deadline of the request is set
	out      bool               // a parsed request is handled outside the callback
	// tr is the transport under the client's TLS connection, nil for
	// bare TCP: records are read through crypto/tls (stepTLS), and
	// responses written through it.
	tr *tlsTransport
}

// nextRaw serves requests inside the callback until one must be handled
// outside it (it returns true, the head parsed) or the connection is
// done (false).
func (c *clientConn) nextRaw() bool {
	x := &c.rx
	x.out, x.started, x.hdrDL = false, false, false
	x.needRead = true // the readiness is reset as the callback is entered
	c.h.reset()
	if c.r == c.w {
		c.emptyBuf()
	} else {
		x.fresh = true
	}
	// Entering the callback fails at once on a read deadline in the past
	// (one a stopped request body left), before buffered bytes are
	// parsed: arm one whatever is buffered. A partial head gets its
	// header deadline before any wait.
	if !c.armIdle(nowNano()) {
		return false
	}
	if x.tr != nil {
		x.tr.enter()
	}
	x.on = true
	err := x.rc.Read(x.step)
	x.on = false
	if x.tr != nil {
		x.tr.leave()
	}
	if x.out {
		return true
	}
	if err != nil && x.started && !c.closing && isTimeout(err) && !c.draining() {
		c.reject(408)
	}
	return false
}

// rawSafe reports whether the parsed request can be served inside the
// callback: it reads nothing more from the client.
func (c *clientConn) rawSafe() bool {
	h := &c.h
	if h.conn.upgrade && h.upgrade >= 0 {
		return false
	}
	if !h.hasBody() {
		return true
	}
	return !h.chunked && !h.expect100 && h.contentLength <= smallBody && int64(c.w-c.r-h.n) >= h.contentLength
}

// served settles a request answered inside the callback. It reports
// false when the connection is done.
func (c *clientConn) served() bool {
	if c.closing {
		return false
	}
	c.state.CompareAndSwap(connActive, connIdle)
	c.info.State.idle()
	c.h.reset()
	c.rx.started, c.rx.hdrDL = false, false
	if c.r < c.w {
		c.rx.fresh = true // pipelined
		return true
	}
	c.emptyBuf()
	now := c.end // the response went out just now
	if now == 0 {
		now = nowNano()
	}
	return c.armIdle(now)
}

// parsed gives the buffered bytes to the parser. It reports whether the
// callback must return (true) and, if so, with what result.
func (c *clientConn) parsed() (leave bool) {
	x := &c.rx
	x.fresh = false
	if !x.started {
		x.started = true
		if !c.claim(nowNano()) {
			return true // closed by its owner while idle
		}
	} else {
		c.headAt = 0 // the head came in several reads
	}
	done, st := c.h.parse(c.rb[c.r:c.w], c.s.cfg.MaxHeaderBytes, c.s.cfg.MaxHeaderCount)
	switch {
	case st != 0:
		c.reject(st)
		return true
	case done:
		if c.headAt == 0 {
			c.headAt = nowNano()
		}
		if !c.rawSafe() {
			x.out = true
			return true
		}
		c.handle()
		return !c.served()
	}
	if !x.hdrDL {
		x.hdrDL = true
		c.rdl = 0
		if c.setReadDeadline(c.start, c.s.cfg.HeaderTimeout) != nil {
			return true
		}
	}
	c.growHead()
	return false
}
