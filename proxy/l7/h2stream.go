package l7

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A stream's handler runs on its own goroutine; the stream is its request
// body (io.ReadCloser) and its http.ResponseWriter.

var h2bufs = sync.Pool{New: func() any { b := make([]byte, 0, h2MaxFrame); return &b }}

// h2Worker runs the stream it was started for, then waits, among at most
// h2idleMax idle workers of the server, for the next stream any client
// connection hands it. A worker outlives the connection of its stream, so
// that a connection whose concurrency comes and goes does not start and
// end a goroutine (and grow its stack, growStack) for most of its
// streams, and an idle connection holds none.
func (s *Server) h2Worker(st *h2Stream) {
	growStack(nil)
	for {
		c := st.c
		st.run()
		c.wg.Done()
		if s.h2parked.Add(1) > s.h2idleMax {
			s.h2parked.Add(-1)
			return
		}
		select {
		case st = <-s.h2work:
			s.h2parked.Add(-1)
			// The collector may have shrunk the stack while it waited.
			growStack(nil)
		case <-s.stop:
			s.h2parked.Add(-1)
			return
		}
	}
}

// growStack gives a new worker, while its stack is shallow, the stack a
// response's flush needs: encrypting a TLS record (AES-GCM) needs more
// than a goroutine starts with, and growing the stack there, deep in
// the flush, copies and adjusts every frame on it. Under h2load over TLS
// (-c32 -m10), with workers starting as streams outnumber the kept
// ones, that growth was 7.8% of serve's CPU.
//
// The frame is reserved, and the stack grown, as the function is
// entered; nil leaves it unwritten.
//
//go:noinline
func growStack(sink *[h2StackBytes]byte) {
	if sink != nil {
		var b [h2StackBytes]byte
		keep(b[:])
		*sink = b
	}
}

//go:noinline
func keep([]byte) {}

// h2StackBytes is what growStack takes from the stack.
const h2StackBytes = 12 << 10

// h2IdleWorkers is how many idle HTTP/2 stream workers a server keeps,
// for the streams of all its client connections.
const h2IdleWorkers = 256

// run serves the request and ends the stream.
func (st *h2Stream) run() {
	c := st.c
	if st.serve() {
		st.finish()
	}
	if sb := c.hc.info.Streams; sb != nil {
		sb.ReleaseStream()
	}
	c.mu.Lock()
	c.workers--
	c.active.Add(-1)
	open := c.streams[st.id] == st
	rst := open && !st.remoteClosed && st.err == nil
	if open {
		st.err = errStreamReset
		c.forget(st)
	}
	// A goroutine that writes the body to a member may still read it
	// (the member answered before the body ended): it returns now, and
	// the stream is recycled only once it has, so that it never waits
	// on, nor reads, the body of the stream that reuses this one.
	st.finished = true
	if st.readers > 0 {
		st.cond.Broadcast()
		for st.readers > 0 {
			st.cond.Wait()
		}
	}
	c.mu.Unlock()
	if st.cancel != nil {
		st.cancel()
	}
	if rst {
		// The response is complete and the client is still sending:
		// tell it to stop (RFC 9113 section 8.1).
		c.writeReset(st.id, http2.ErrCodeNo)
	}
	c.putStream(st)
	c.closeIfDone()
}

// serve runs the handler; false when it panicked and the stream was
// reset.
func (st *h2Stream) serve() (ok bool) {
	c := st.c
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				c.s.cfg.Logger.Error("http2 handler panic", "component", "proxy", "panic", v, "stack", string(debug.Stack()))
			}
			st.ended = true
			c.resetStream(st.id, http2.ErrCodeInternal)
			ok = false
		}
	}()
	switch {
	case st.status0 != 0:
		writeErrorPage(st, st.status0)
	case st.serveFast():
	case !st.buildRequest():
		writeErrorPage(st, 400)
	case st.decided:
		c.hc.serve(st, st.req, &st.dec, &st.fw)
	default:
		c.hc.ServeHTTP(st, st.req)
	}
	return true
}

// Read reads the request body.
func (st *h2Stream) Read(p []byte) (int, error) {
	st.c.mu.Lock()
	return st.readLocked(p)
}

// h2ReqBody is the request body of a stream served on the net/http path.
// The goroutine that writes it to an HTTP/2 member (h2RespBody.pump) is
// not waited for when the stream ends, and may first call Read after the
// stream was recycled for the connection's next request: it then reads
// nothing of that request's body, because putStream moved the stream's
// gen on.
type h2ReqBody struct {
	c   *h2Conn // st.c, which recycling does not change
	st  *h2Stream
	gen uint32
}

func (b *h2ReqBody) Read(p []byte) (int, error) {
	b.c.mu.Lock()
	if b.st.gen != b.gen {
		b.c.mu.Unlock()
		return 0, errStreamReset
	}
	return b.st.readLocked(p)
}

// Close implements io.Closer for the request body.
func (b *h2ReqBody) Close() error { return nil }

// stream returns the stream of the body if it is still that request's
// (c.mu held).
func (b *h2ReqBody) stream() (*h2Stream, bool) {
	return b.st, b.st.gen == b.gen
}

// readLocked is Read with c.mu held; it releases it.
func (st *h2Stream) readLocked(p []byte) (int, error) {
	c := st.c
	defer c.mu.Unlock()
	st.readers++
	defer func() {
		if st.readers--; st.readers == 0 && st.finished {
			st.cond.Broadcast() // run waits for the last one
		}
	}()
	deadline := nowNano() + int64(c.s.cfg.BodyTimeout)
	for st.rr == len(st.rbuf) || st.finished {
		switch {
		case st.finished:
			return 0, errStreamReset
		case st.err != nil:
			return 0, st.err
		case st.stopBody:
			return 0, errH2Cancelled
		case st.remoteClosed:
			if st.trailer != nil {
				if st.req != nil && st.req.Trailer != nil {
					for _, hf := range st.trailer {
						k := http.CanonicalHeaderKey(hf.Name)
						st.req.Trailer[k] = append(st.req.Trailer[k], hf.Value)
					}
				}
				st.reqTrailer, st.trailer = st.trailer, nil
			}
			return 0, io.EOF
		case c.closed:
			return 0, errClientGone
		}
		if !st.wait(deadline) {
			return 0, errH2BodyTimout
		}
	}
	n := copy(p, st.rbuf[st.rr:])
	st.rr += n
	c.releaseBody(n)
	if st.rr == len(st.rbuf) {
		st.rbuf, st.rr = st.rbuf[:0], 0
	}
	st.unacked += int64(n)
	if k := st.unacked; k >= h2InitialWindow/2 && !st.remoteClosed {
		st.unacked = 0
		st.recvWindow += k
		c.mu.Unlock()
		c.writeWindowUpdate(st.id, k)
		c.mu.Lock()
	}
	return n, nil
}

// Close implements io.Closer for the request body.
func (st *h2Stream) Close() error { return nil }

// Header implements http.ResponseWriter.
func (st *h2Stream) Header() http.Header {
	if st.rh == nil {
		st.rh = make(http.Header)
	}
	return st.rh
}

// WriteHeader implements http.ResponseWriter. Informational statuses are
// not relayed.
func (st *h2Stream) WriteHeader(code int) {
	if st.wrote || code < 200 {
		return
	}
	st.wrote, st.status = true, code
	for _, v := range st.rh["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				st.trailers = append(st.trailers, http.CanonicalHeaderKey(k))
			}
		}
	}
}

// chargeRead counts n bytes read off a member and not sent as DATA
// (chunk framing, a trailer section) as the DATA sent count
// (readCharger).
func (st *h2Stream) chargeRead(n int64) { st.c.chargeRead(n) }

// Write implements http.ResponseWriter.
func (st *h2Stream) Write(p []byte) (int, error) {
	if !st.wrote {
		st.WriteHeader(200)
	}
	if st.method == http.MethodHead {
		return len(p), nil
	}
	if st.wbp == nil {
		st.wbp = h2bufs.Get().(*[]byte)
		st.wbuf = (*st.wbp)[:0]
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(st.wbuf[len(st.wbuf):cap(st.wbuf)], p)
		st.wbuf = st.wbuf[:len(st.wbuf)+k]
		p = p[k:]
		if len(st.wbuf) == cap(st.wbuf) {
			if err := st.flush(false); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// Flush implements http.Flusher.
func (st *h2Stream) Flush() { _ = st.flush(false) }

// FlushError is Flush with its error, for http.ResponseController.
func (st *h2Stream) FlushError() error { return st.flush(false) }

// flush sends the head if it is not out yet and the buffered data; end
// ends the stream with the last frame.
func (st *h2Stream) flush(end bool) error {
	if !st.wrote {
		st.WriteHeader(200)
	}
	if st.ended {
		return errStreamReset
	}
	if !st.sentHead {
		st.sentHead = true
		// The head and the first data leave in one write.
		c := st.c
		if !st.holding {
			c.hold()
			st.holding = true
			defer func() {
				if st.holding {
					st.holding = false
					c.release()
				}
			}()
		}
		var err error
		if st.rawHead {
			err = st.sendBlock(st.hblk, end && len(st.wbuf) == 0)
		} else {
			err = st.sendHead(end && len(st.wbuf) == 0)
		}
		if err != nil {
			return err
		}
		if end && len(st.wbuf) == 0 {
			st.ended = true
			return nil
		}
	}
	if len(st.wbuf) == 0 && !end {
		return nil
	}
	err := st.sendData(st.wbuf, end)
	st.wbuf = st.wbuf[:0]
	if end {
		st.ended = true
	}
	return err
}

// finish completes the response: its head, its data and its trailers.
func (st *h2Stream) finish() {
	if st.ended {
		return
	}
	var trailers []hpack.HeaderField
	for _, k := range st.trailers {
		for _, v := range st.rh[k] {
			trailers = append(trailers, hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
	}
	for k, vv := range st.rh {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, v := range vv {
				trailers = append(trailers, hpack.HeaderField{Name: strings.ToLower(name), Value: v})
			}
		}
	}
	if len(trailers) == 0 {
		_ = st.flush(true)
		return
	}
	if st.flush(false) != nil {
		return
	}
	st.ended = true
	_ = st.sendFields(trailers, true)
}

// endLocal closes the stream before the frame that ends it leaves: a
// client that sees the end and reuses the stream id meets a closed stream.
func (st *h2Stream) endLocal() {
	c := st.c
	c.mu.Lock()
	if st.remoteClosed {
		c.forget(st)
	}
	c.mu.Unlock()
}

// appendAltSvc appends the connection's Alt-Svc field, if any.
func (st *h2Stream) appendAltSvc(dst []byte) []byte {
	if v := st.c.hc.info.AltSvc; v != "" {
		dst = appendLiteral(dst, "alt-svc", v, false)
	}
	return dst
}

// sendHead sends the response head.
func (st *h2Stream) sendHead(end bool) error {
	st.hblk = appendStatus(st.hblk[:0], st.status)
	st.hblk = st.appendAltSvc(st.hblk)
	altSvc := st.c.hc.info.AltSvc != ""
	for k, vv := range st.rh {
		// The listener's Alt-Svc is the one a client takes. The trailers
		// a handler declared may be set by the time the head leaves (it
		// goes with the first data): they leave in the trailer section.
		if strings.HasPrefix(k, http.TrailerPrefix) || (altSvc && k == "Alt-Svc") || slices.Contains(st.trailers, k) {
			continue
		}
		n := len(st.hblk)
		st.hblk = appendLower(st.hblk, k)
		name := unsafeString(st.hblk[n:])
		skip := connHeaders[name] || name == "te"
		st.hblk = st.hblk[:n]
		if skip {
			continue
		}
		for _, v := range vv {
			st.hblk = appendLiteral(st.hblk, k, v, true)
		}
	}
	return st.sendBlock(st.hblk, end)
}

// sendFields sends a trailer section.
func (st *h2Stream) sendFields(fields []hpack.HeaderField, end bool) error {
	st.hblk = st.hblk[:0]
	for _, f := range fields {
		st.hblk = appendLiteral(st.hblk, f.Name, f.Value, false)
	}
	return st.sendBlock(st.hblk, end)
}

// sendBlock sends an encoded header block; end ends the stream.
func (st *h2Stream) sendBlock(blk []byte, end bool) error {
	c := st.c
	if end {
		st.endLocal()
	}
	c.lockW()
	defer c.unlockW()
	if c.werr != nil {
		return c.werr
	}
	return c.writeBlock(st.id, blk, end)
}

// hold keeps the writes that follow in the buffer until release.
func (c *h2Conn) hold() { c.pending.Add(1) }

// release ends a hold, flushing when no other writer waits.
func (c *h2Conn) release() {
	c.wmu.Lock()
	c.unlockW() // takes the hold's count back

}

// writeBlock writes the header block b as HEADERS and
// CONTINUATION frames. wmu held.
func (c *h2Conn) writeBlock(id uint32, b []byte, end bool) error {
	c.mu.Lock()
	max := c.peerFrame
	c.mu.Unlock()
	c.werr = writeHeaderBlock(c.fr, id, b, end, max)
	return c.werr
}

// sendData sends p as DATA frames within the flow-control windows. A
// client that keeps the windows closed past WriteTimeout loses the
// connection.
func (st *h2Stream) sendData(p []byte, end bool) error {
	c := st.c
	var deadline int64
	for {
		c.mu.Lock()
		var n int
		for {
			if st.err != nil {
				c.mu.Unlock()
				return st.err
			}
			if c.closed {
				c.mu.Unlock()
				return errClientGone
			}
			if n = c.take(&st.sendWindow, len(p)); n > 0 || len(p) == 0 {
				break
			}
			if st.holding {
				// Never keep other streams' frames waiting.
				st.holding = false
				c.mu.Unlock()
				c.release()
				c.mu.Lock()
				continue
			}
			if deadline == 0 {
				deadline = nowNano() + int64(c.s.cfg.WriteTimeout)
			}
			if !st.wait(deadline) {
				c.stalled = true
				c.mu.Unlock()
				c.stall()
				return errWindowStall
			}
		}
		c.mu.Unlock()
		deadline = 0
		last := end && n == len(p)
		if last {
			st.endLocal()
		}
		c.lockW()
		err := c.werr
		var units int64
		if err == nil {
			err = c.fr.WriteData(st.id, last, p[:n])
			c.werr = err
			units = c.outM.take(int64(n))
		}
		c.unlockW()
		if err != nil {
			return err
		}
		if cpu := c.hc.info.CPU; cpu != nil && units > 0 {
			if st.holding {
				// Never keep other streams' frames waiting.
				st.holding = false
				c.release()
			}
			cpu.Relay(units * c.cpuW)
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// stall ends a connection whose client kept a flow-control window closed
// for WriteTimeout while a response waited.
func (c *h2Conn) stall() {
	c.sendGoAway(http2.ErrCodeEnhanceYourCalm, nil)
	// The reader wakes up, lets the client read the GOAWAY and closes.
	c.mu.Lock()
	c.stalled = true
	c.mu.Unlock()
	c.pinRead(time.Now())
}

// closeIfDone ends a connection that sent or received a GOAWAY once its
// last stream is done: close_notify and a FIN after the frames, so that
// the client reads them all; the reader then sees the end.
func (c *h2Conn) closeIfDone() {
	c.mu.Lock()
	done := (c.goAwaySent.Load() || c.peerGoAway.Load()) && len(c.streams) == 0 && c.workers == 0
	c.mu.Unlock()
	if !done {
		return
	}
	c.lockW()
	if c.werr == nil {
		c.werr = c.flushLocked()
		if tc, ok := c.nc.(*tls.Conn); ok {
			_ = tc.CloseWrite()
		}
		if cw, ok := c.raw.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		if c.werr == nil {
			c.werr = net.ErrClosed
		}
		c.finished.Store(true)
	}
	c.unlockW()
}

// writeHeaderBlock writes the header block b of stream id as a HEADERS
// frame and as many CONTINUATION frames as frames of max bytes need.
func writeHeaderBlock(fr *http2.Framer, id uint32, b []byte, end bool, max int) error {
	first := true
	for first || len(b) > 0 {
		k := min(len(b), max)
		var err error
		if first {
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:k], EndStream: end, EndHeaders: k == len(b)})
			first = false
		} else {
			err = fr.WriteContinuation(id, k == len(b), b[:k])
		}
		if err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}
