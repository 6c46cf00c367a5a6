package l7

import (
	"context"
	"errors"
	"io"
	"runtime"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 clients to HTTP/2 members (h2c, h2 over TLS) without PROXY
// protocol: the request's decoded fields become the member's header block
// and the member's fields the client's, frames in and frames out, without
// net/http values. gRPC takes this path.

// h2BodyInline is the largest request body, complete when the handler
// starts, that is sent with the head in one write (gRPC unary calls).
const h2BodyInline = 16 << 10

// serveUpH2 proxies the stream to a member of d.be over the HTTP/2 client.
func (st *h2Stream) serveUpH2(d *decision, path, query string) bool {
	c := st.c
	s, hc := c.s, c.hc
	be, opts := d.be, d.opts
	defer st.report(nowNano())
	stats := &st.stats
	fail := st.fail
	limit, key, code := st.begin(d)
	if code != 0 {
		return fail(code, OutcomeClientError)
	}
	scheme := "http"
	if opts.Protocol == H2TLS {
		scheme = "https"
	}
	var id []byte
	st.head, id = st.appendUpBlock(st.head[:0], scheme, path, query)
	if stats.AccessLog > 0 {
		stats.RequestID = string(id)
	}
	// A body that is complete already leaves with the head, and can be
	// sent again if the member refuses the stream.
	var body []byte
	inline := false
	if !st.endHeaders {
		c.mu.Lock()
		inline = st.remoteClosed && st.trailer == nil && st.gotLen <= h2BodyInline && st.err == nil
		c.mu.Unlock()
		if inline {
			bp := copyBufs.Get().(*[]byte)
			defer copyBufs.Put(bp)
			buf := (*bp)[:0]
			for {
				n, err := st.Read(buf[len(buf):cap(buf)])
				buf = buf[:len(buf)+n]
				if err == io.EOF {
					break
				}
				if err != nil || len(buf) == cap(buf) {
					return fail(400, OutcomeClientError)
				}
			}
			if limit > 0 && int64(len(buf)) > limit {
				return fail(413, OutcomeClientError)
			}
			body = buf
		}
	}
	rt := rht(opts, s)
	refusals := 0
	for retries := s.cfg.Retries; ; {
		m, ok := be.Pick(hc.ca.addr, key)
		if !ok {
			return fail(503, OutcomeNoMember)
		}
		stats.Member, stats.Pool = m.Addr(), opts.Pool
		t0 := nowNano()
		up, err := st.openUp(m, opts, rt, body, inline, limit)
		if err == nil {
			err = up.awaitHead(t0+int64(rt), c.chargeRead)
		}
		d := time.Duration(nowNano() - t0)
		if err != nil {
			if up != nil {
				st.endUp(up)
			}
			gone := st.clientGone()
			switch {
			case errors.Is(err, errBodyTooLarge) || st.tooLarge:
				m.Done(nil, 0, d)
				return fail(413, OutcomeClientError)
			case gone:
				m.Done(nil, 0, d)
				stats.Outcome = abortedOutcome(st, nil)
				return true
			case errors.Is(err, errH2Refused) && (st.endHeaders || inline) && refusals < 2:
				// Not processed: another connection (or member) may take it.
				refusals++
				m.Done(nil, 0, d)
				continue
			}
			m.Done(err, 0, d)
			if errors.Is(err, ErrConnect) && retries > 0 {
				retries--
				continue
			}
			return fail(statusFor(err), outcomeFor(err))
		}
		if !st.respBlock(up.status, fieldsView{h2: up.fields}) {
			// Connection fields over maxConnTokens: a broken response.
			st.endUp(up)
			m.Done(ErrUpstreamProtocol, up.status, d)
			return fail(statusFor(ErrUpstreamProtocol), outcomeFor(ErrUpstreamProtocol))
		}
		stats.Upstream = d
		stats.Status = up.status
		m.Done(nil, up.status, d)
		n, err := st.relayUp(up)
		return st.relayed(n, err)
	}
}

// clientGone reports whether the client reset the stream or left.
func (st *h2Stream) clientGone() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.err != nil || st.c.closed
}

// openUp opens a stream to m and starts sending the request body.
func (st *h2Stream) openUp(m Member, opts *BackendOptions, rt time.Duration, body []byte, inline bool, limit int64) (*h2UpStream, error) {
	c := st.c
	s := c.s
	key := keyOf(m.Addr(), opts.Protocol, opts)
	var err error
	uc := s.h2up.reserveFree(key)
	if uc == nil {
		// Waiting for a stream slot (or a dial) ends when this stream
		// does: a client's reset cancels it (abort), not only the
		// connection's end.
		ctx, cancel := context.WithCancel(c.ctx)
		c.mu.Lock()
		prev := st.cancel
		st.cancel = cancel
		if st.err != nil {
			cancel()
		}
		c.mu.Unlock()
		uc, err = s.h2up.acquire(ctx, key, opts, time.Now().Add(rt))
		c.mu.Lock()
		st.cancel = prev
		c.mu.Unlock()
		cancel()
		if err != nil {
			return nil, err
		}
	}
	up := newH2UpStream(uc)
	c.mu.Lock()
	st.h2up = up
	if st.err != nil {
		up.cancel()
	}
	c.mu.Unlock()
	var sent bool
	switch {
	case st.endHeaders:
		_, err = up.start(st.head, true, nil)
	case inline:
		sent, err = up.start(st.head, false, body)
		if err == nil && !sent {
			err = up.write(body, true)
		}
	default:
		_, err = up.start(st.head, false, nil)
		if err == nil {
			st.bodyDone = make(chan error, 1)
			go func() { st.bodyDone <- st.pumpUp(up, limit) }()
		}
	}
	return up, err
}

// pumpUp streams the request body to the member, then its trailers.
func (st *h2Stream) pumpUp(up *h2UpStream, limit int64) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var sent int64
	for {
		n, rerr := st.Read(buf)
		sent += int64(n)
		if limit > 0 && sent > limit {
			up.cancel()
			return errBodyTooLarge
		}
		if n > 0 {
			if err := up.write(buf[:n], false); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			up.cancel() // the member must not take a truncated body
			return rerr
		}
	}
	if len(st.reqTrailer) > 0 {
		return up.writeTrailers(st.reqTrailer, buf[:0])
	}
	return up.write(nil, true)
}

// endUp stops the request body, waits for its writer and closes the
// member stream.
func (st *h2Stream) endUp(up *h2UpStream) {
	c := st.c
	if st.bodyDone != nil {
		up.cancel()
		c.mu.Lock()
		st.stopBody = true
		st.cond.Broadcast()
		c.mu.Unlock()
		err := <-st.bodyDone
		st.bodyDone = nil
		if errors.Is(err, errBodyTooLarge) {
			st.tooLarge = true
		}
	}
	c.mu.Lock()
	st.h2up = nil
	c.mu.Unlock()
	up.close()
}

// relayUp sends the member's response on the stream: head (the block
// respBlock made), data and trailers. Frames that are ready together
// leave in one write.
func (st *h2Stream) relayUp(up *h2UpStream) (n int64, err error) {
	c := st.c
	st.wrote, st.status, st.rawHead = true, up.status, true
	c.hold()
	st.holding = true
	release := func() {
		if st.holding {
			st.holding = false
			c.release()
		}
	}
	bp := copyBufs.Get().(*[]byte)
	buf := *bp
	for err == nil {
		if !up.ready() {
			// The member's next frames may be read already: let the
			// connection's reader hand them over, so that they leave
			// with these in one write.
			runtime.Gosched()
		}
		if !up.ready() {
			// Out with what is there before waiting: a stream (gRPC,
			// server-sent events) must not sit in a buffer.
			err = st.flush(false)
			release()
			if err != nil {
				break
			}
		}
		var k int
		k, err = up.read(buf)
		if k > 0 {
			n += int64(k)
			if _, werr := st.Write(buf[:k]); werr != nil {
				err = werr
			}
		}
		if !st.holding && err == nil {
			c.hold()
			st.holding = true
		}
	}
	copyBufs.Put(bp)
	if err == io.EOF {
		err = nil
		// The trailers' header block was read as the body's bytes,
		// whether or not its fields go on.
		if k := up.takeUnsent(); k > 0 {
			c.chargeRead(k)
		}
		// Only the fields trailerKept keeps go on; the head's
		// Connection fields name more (st.rs.it.names, from respBlock).
		kept := up.trailer[:0]
		for _, f := range up.trailer {
			if trailerKept(unsafeBytes(f.Name), "", st.rs.it.names) {
				kept = append(kept, f)
			}
		}
		if up.trailer = kept; len(up.trailer) > 0 {
			if err = st.flush(false); err == nil {
				st.ended = true
				err = st.sendFields(up.trailer, true)
			}
		} else {
			err = st.flush(true)
		}
	}
	release()
	if err != nil && !st.ended {
		// A response cut short must not look complete.
		st.ended = true
		c.resetStream(st.id, http2.ErrCodeInternal)
	}
	st.endUp(up)
	return n, err
}

// respBlock makes the response head block (in st.hblk): :status and the
// fields responseFields decides from the member's head v, the
// connection's Alt-Svc last. False: the response must not be relayed
// (responseFields); the names the head's Connection fields list stay in
// st.rs.it.names, for the trailer section.
func (st *h2Stream) respBlock(status int, v fieldsView) bool {
	st.hsink = hpackSink{dst: appendStatus(st.hblk[:0], status), lower: true}
	st.rs.v = v
	ok := responseFields(&st.rs.v, st.c.hc.info.AltSvc, false, &st.hsink, &st.rs)
	st.hblk = st.hsink.dst
	st.hsink = hpackSink{}
	st.rs.v = fieldsView{}
	return ok
}

// appendUpBlock appends the header block sent to an HTTP/2 member: the
// pseudo-fields and the fields forwardFields decides. The block uses no
// dynamic table. It returns the request id sent.
func (st *h2Stream) appendUpBlock(dst []byte, scheme, path, query string) ([]byte, []byte) {
	dst = appendPseudo(dst, st.method, scheme, st.authority, path, query)
	st.hsink = hpackSink{dst: dst}
	id := forwardFields(&st.view, &st.c.hc.ca, &st.hsink, &st.fw)
	dst = st.hsink.dst
	st.hsink.dst = nil
	return dst, id
}

// h2Member reports whether the fast path serves a backend over the HTTP/2
// client.
func h2Member(opts *BackendOptions) bool {
	return (opts.Protocol == H2C || opts.Protocol == H2TLS) && opts.ProxyProtocol == 0
}
