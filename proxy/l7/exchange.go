package l7

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Errors of a client's request body.
var (
	errBodyTooLarge = errors.New("request body too large")
	errBodyTimeout  = errors.New("request body timeout")
	errClientGone   = errors.New("client closed the connection")
	errBodyAborted  = errors.New("request body cut short")
)

const (
	hdrConnClose     = "Connection: close\r\n"
	hdrConnKeepAlive = "Connection: keep-alive\r\n"
)

// exchangeOpts describes one request for exchange.
type exchangeOpts struct {
	opts    *BackendOptions
	limit   int64 // body limit, 0 for none
	stream  bool  // a body follows in the client buffer or socket
	upgrade bool
	head    bool // HEAD request
}

// proxy forwards the request whose head is b to a member of be and relays
// the response.
func (c *clientConn) proxy(b []byte, be Backend, opts *BackendOptions, limit int64, path []byte, cleaned, isHead bool) {
	h := &c.h
	var key []byte
	if name := opts.HashHeader; name != "" {
		var decided bool
		if key, decided = c.fw.rr.hashKey(name); !decided {
			key = h.fieldValue(b, name)
		}
	}
	upgrade := h.upgradeTo(b)
	id := c.appendRequestHead(b, path, cleaned, upgrade)
	if c.stats.AccessLog > 0 {
		c.stats.RequestID = string(id)
	}
	x := exchangeOpts{opts: opts, limit: limit, stream: h.hasBody(), upgrade: upgrade != nil, head: isHead}
	if x.stream && !h.chunked && !h.expect100 && h.contentLength <= smallBody && int64(c.w-c.r) >= h.contentLength {
		n := int(h.contentLength)
		c.wb = append(c.wb, c.rb[c.r:c.r+n]...)
		c.r += n
		c.stats.RequestBytes = int64(n)
		h.contentLength = 0
		x.stream = false
	}
	retries := c.s.cfg.Retries
	t0 := c.headAt
	for {
		// key aliases b, which stays valid: nothing was read since (or
		// is a forwarding field's value, a copy).
		m, ok := be.Pick(c.client.Addr(), key)
		if !ok {
			c.localError(503, OutcomeNoMember, isHead)
			return
		}
		c.stats.Member, c.stats.Pool = m.Addr(), opts.Pool
		err := c.exchange(m, &x, t0)
		if err == nil {
			return
		}
		t0 = nowNano()
		if retries == 0 {
			c.localError(statusFor(err), outcomeFor(err), isHead)
			return
		}
		retries--
	}
}

func outcomeFor(err error) Outcome {
	if errors.Is(err, ErrMemberLimit) {
		return OutcomeMemberLimit
	}
	if errors.Is(err, ErrUpstreamTimeout) {
		return OutcomeUpstreamTimeout
	}
	if errors.Is(err, ErrMemberCertificate) {
		return OutcomeMemberTLS
	}
	return OutcomeUpstreamError
}

// exchange sends the request in c.wb (and its body) to m and relays the
// response. It returns an error only when m could not be dialled, so that
// the caller may try another member; everything else it answers itself.
// t0 is the clock (nowNano) as the exchange starts.
func (c *clientConn) exchange(m Member, x *exchangeOpts, t0 int64) error {
	now := t0
	since := func() time.Duration { return time.Duration(nowNano() - t0) }
	up, reused, err := c.acquire(m.Addr(), x.opts, now)
	if err != nil {
		m.Done(err, 0, since())
		return err
	}
	c.info.State.use(up)
	defer c.unuse()
	rht := x.opts.ResponseHeaderTimeout
	if rht <= 0 {
		rht = c.s.cfg.ResponseHeaderTimeout
	}
	replayable := !x.stream
	for {
		up.got = 0
		up.r, up.w = 0, 0
		up.resp.reset()
		bodyStarted := false
		up.pending = nil
		if err = up.sendHead(c.wb, x.stream, now, c.s.cfg.BodyTimeout, rht); err == nil {
			if x.stream {
				c.startBody(up, x.limit)
				bodyStarted = true
			}
			err = c.readResponseHead(up, now, rht)
			if err == nil {
				break
			}
		}
		if bodyStarted {
			if berr := c.stopBody(up); isClientBodyError(berr) {
				up.close()
				m.Done(nil, 0, since())
				c.bodyError(berr)
				return nil
			}
		}
		if errors.Is(err, errClientGone) {
			// The client left while an interim response was relayed.
			up.close()
			m.Done(nil, 0, since())
			c.closing = true
			c.finish(0, OutcomeAborted)
			return nil
		}
		up.close()
		if c.info.State.isCut() {
			// Its owner closes the connection: no answer, no retry,
			// and the member is not to blame.
			m.Done(nil, 0, since())
			c.closing = true
			c.finish(0, OutcomeAborted)
			return nil
		}
		if reused && replayable && up.got == 0 && !isTimeout(err) {
			// The member closed an idle connection as it was reused:
			// nothing was processed, so send again on a new one.
			reused = false
			up, err = c.s.dial(c.reqCtx(), keyOf(m.Addr(), x.opts.Protocol, x.opts), x.opts, c.proxyAddrs(x.opts))
			if err != nil {
				m.Done(err, 0, since())
				return err
			}
			c.info.State.use(up)
			continue
		}
		m.Done(err, 0, since())
		c.closing = c.closing || x.stream
		c.localError(statusFor(err), outcomeFor(err), x.head)
		return nil
	}
	c.relay(m, up, x, t0)
	return nil
}

// unuse ends the record of an exchange's member connection (ConnState.use).
// After a Cut the connection closes, and the member connection kept for
// the next request, shut down, is closed rather than pooled.
func (c *clientConn) unuse() {
	st := c.info.State
	if st == nil {
		return
	}
	st.use(nil)
	if st.isCut() {
		c.closing = true
		if c.up != nil {
			c.up.close()
			c.up = nil
		}
	}
}

func (c *clientConn) proxyAddrs(opts *BackendOptions) *proxyAddrs {
	if opts.ProxyProtocol == 0 {
		return nil
	}
	return &proxyAddrs{src: c.client, dst: c.local}
}

// readResponseHead reads the member's final response head, relaying
// interim (1xx) responses other than 101 to HTTP/1.1 clients (their
// heads made as a final response's, in c.wb: the request head there was
// sent).
func (c *clientConn) readResponseHead(up *upConn, now int64, rht time.Duration) error {
	if err := up.setReadDeadline(now, rht); err != nil {
		return err
	}
	rh := &up.resp
	for {
		done, ok := rh.parse(up.rb[up.r:up.w], c.s.cfg.MaxHeaderBytes)
		if !ok {
			return ErrUpstreamProtocol
		}
		if done {
			if rh.status >= 200 || rh.status == 101 {
				return nil
			}
			// Read (and relayed) as the body's bytes.
			c.respM.add(c.info.CPU, c.cpuW, int64(rh.n))
			if c.h.minor == 1 {
				// Its fields are the ones responseFields lets through,
				// as a final response's (it has no framing to relay).
				b := up.rb[up.r : up.r+rh.n]
				if rh.edit || rh.minor != 1 || c.info.AltSvc != "" {
					c.appendResponseHead(b, rh, "", true)
					b = c.wb
				}
				if err := c.write(b); err != nil {
					return fmt.Errorf("%w: %w", errClientGone, err)
				}
			}
			up.r += rh.n
			rh.reset()
			continue
		}
		if err := up.fill(); err != nil {
			return upstreamReadError(err)
		}
	}
}

func upstreamReadError(err error) error {
	switch {
	case errors.Is(err, ErrUpstreamProtocol):
		return err
	case isTimeout(err):
		return fmt.Errorf("%w: %w", ErrUpstreamTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
}

// relay sends the member's response to the client and settles both
// connections.
func (c *clientConn) relay(m Member, up *upConn, x *exchangeOpts, t0 int64) {
	now := nowNano()
	d := time.Duration(now - t0)
	c.stats.Upstream = d
	rh := &up.resp
	status := rh.status
	if status == 101 {
		if !x.upgrade {
			up.close()
			m.Done(ErrUpstreamProtocol, status, d)
			c.localError(502, OutcomeUpstreamError, x.head)
			return
		}
		c.tunnel(m, up, d)
		return
	}
	framing := rh.framing(x.head)
	dechunk := framing == bodyChunked && c.h.minor == 0
	if framing == bodyClose || dechunk || !c.h.keepAlive() || c.draining() {
		c.closing = true
	}
	conn := ""
	if c.closing {
		conn = hdrConnClose
	} else if c.h.minor == 0 {
		conn = hdrConnKeepAlive
	}
	headStart := up.r
	up.r += rh.n
	var ck chunked
	first := 0
	avail := up.w - up.r
	switch framing {
	case bodyLength:
		first = int(min(int64(avail), rh.contentLength))
	case bodyChunked:
		if !dechunk {
			// A trailer section with fields is relayBody's to filter.
			n, err := ck.scanBody(up.rb[up.r:up.w])
			if err != nil {
				c.abortExchange(m, up, x, ErrUpstreamProtocol, d)
				return
			}
			first = n
		}
	case bodyClose:
		first = avail
	}
	var err error
	if !rh.edit && conn == "" && rh.minor == 1 && c.info.AltSvc == "" {
		err = c.writeAt(up.rb[headStart:up.r+first], now)
	} else {
		c.appendResponseHead(up.rb[headStart:up.r], rh, conn, dechunk)
		if first <= smallBody {
			c.wb = append(c.wb, up.rb[up.r:up.r+first]...)
			err = c.writeAt(c.wb, now)
		} else {
			err = c.writev(c.wb, up.rb[up.r:up.r+first], now)
		}
	}
	up.r += first
	sent := int64(first)
	if err == nil {
		c.respM.add(c.info.CPU, c.cpuW, sent)
	}
	var upErr error
	if err == nil {
		var n int64
		remaining := rh.contentLength - sent
		n, upErr, err = c.relayBody(up, framing, dechunk, &ck, remaining)
		sent += n
	}
	c.stats.ResponseBytes = sent
	reusable := err == nil && upErr == nil && rh.reusable() && framing != bodyClose && up.r == up.w
	if x.stream {
		if berr := c.finishBody(up); berr != nil {
			reusable = false
			c.closing = true
		}
	}
	out := OutcomeOK
	switch {
	case upErr != nil && c.info.State.isCut():
		// Cut by the connection's owner (ConnState.Cut), not the member.
		m.Done(nil, status, d)
		out = OutcomeAborted
		c.closing = true
	case upErr != nil:
		m.Done(upErr, status, d)
		out = outcomeFor(upErr)
		c.closing = true
	case err != nil:
		m.Done(nil, status, d)
		out = OutcomeAborted
		c.closing = true
	default:
		m.Done(nil, status, d)
	}
	c.finish(status, out)
	if reusable {
		up.idleAt = c.end
		c.up = up
	} else {
		up.close()
	}
}

// abortExchange ends a request whose response cannot be relayed before
// anything was sent to the client.
func (c *clientConn) abortExchange(m Member, up *upConn, x *exchangeOpts, err error, d time.Duration) {
	if x.stream {
		_ = c.stopBody(up)
		c.closing = true
	}
	up.close()
	m.Done(err, up.resp.status, d)
	c.localError(statusFor(err), outcomeFor(err), x.head)
}

// relayBody relays the rest of a response body. upErr is a failure of the
// member, err one of the client.
func (c *clientConn) relayBody(up *upConn, framing uint8, dechunk bool, ck *chunked, remaining int64) (n int64, upErr, err error) {
	bt := c.s.cfg.BodyTimeout
	switch framing {
	case bodyLength:
		for remaining > 0 {
			if up.r == up.w {
				up.r, up.w = 0, 0
				if remaining >= spliceMin && c.tcp != nil && up.tcp != nil {
					k, serr := c.spliceN(c.tcp, up.tcp, remaining, bt, &c.respLR, &c.respM)
					c.wdl, up.rdl = 0, 0
					n += k
					remaining -= k
					if serr != nil {
						upErr, err = spliceError(up, serr)
						return n, upErr, err
					}
					continue
				}
				if err := c.fillBody(up, bt); err != nil {
					return n, err, nil
				}
			}
			k := int(min(remaining, int64(up.w-up.r)))
			if err := c.write(up.rb[up.r : up.r+k]); err != nil {
				return n, nil, err
			}
			up.r += k
			remaining -= int64(k)
			n += int64(k)
			c.respM.add(c.info.CPU, c.cpuW, int64(k))
		}
	case bodyChunked:
		c.respTrailer.holding = false
		for !ck.done() {
			if up.r == up.w {
				up.r, up.w = 0, 0
				if err := c.fillBody(up, bt); err != nil {
					return n, err, nil
				}
			}
			if in := up.rb[up.r:up.w]; !dechunk && c.respTrailer.holds(ck, in) {
				k, done, cerr := c.respTrailer.take(ck, in, "", up.resp.conn.names)
				up.r += k
				c.respM.add(c.info.CPU, c.cpuW, int64(k)) // read, held and scanned as the body's bytes
				if cerr != nil {
					return n, ErrUpstreamProtocol, nil
				}
				if !done {
					continue
				}
				err := c.write(c.respTrailer.buf)
				n += int64(len(c.respTrailer.buf))
				c.respTrailer.sent()
				if err != nil {
					return n, nil, err
				}
				break
			}
			k, data, cerr := ck.step(up.rb[up.r:up.w])
			if !dechunk || data {
				if err := c.write(up.rb[up.r : up.r+k]); err != nil {
					return n, nil, err
				}
				n += int64(k)
			}
			// Framing that dechunking drops was read and parsed as the
			// body's bytes too.
			c.respM.add(c.info.CPU, c.cpuW, int64(k))
			up.r += k
			if cerr != nil {
				return n, ErrUpstreamProtocol, nil
			}
		}
	case bodyClose:
		for {
			if up.r == up.w {
				up.r, up.w = 0, 0
				if c.tcp != nil && up.tcp != nil {
					k, serr := c.spliceAll(c.tcp, up.tcp, bt)
					c.wdl, up.rdl = 0, 0
					n += k
					if serr != nil {
						upErr, err = spliceError(up, serr)
					}
					return n, upErr, err
				}
				if err := c.fillBody(up, bt); err != nil {
					if errors.Is(err, ErrUpstreamClosed) && errors.Is(err, io.EOF) {
						return n, nil, nil
					}
					return n, err, nil
				}
			}
			if err := c.write(up.rb[up.r:up.w]); err != nil {
				return n, nil, err
			}
			n += int64(up.w - up.r)
			c.respM.add(c.info.CPU, c.cpuW, int64(up.w-up.r))
			up.r = up.w
		}
	}
	return n, nil, nil
}

// spliceError tells whose fault a failed splice from a member to a client
// was: a splice error does not say which socket failed, the member's
// socket does (a premature end or a reset is readable there).
func spliceError(up *upConn, err error) (upErr, clientErr error) {
	if errors.Is(err, io.EOF) || up.closedByPeer() {
		return upstreamReadError(err), nil
	}
	return nil, err
}

// fillBody reads more of a response body from the member.
func (c *clientConn) fillBody(up *upConn, bt time.Duration) error {
	if err := up.setReadDeadline(nowNano(), bt); err != nil {
		return upstreamReadError(err)
	}
	if err := up.fill(); err != nil {
		return upstreamReadError(err)
	}
	return nil
}

// spliceN copies n bytes of a body from src to dst with splice(2),
// refreshing the deadlines while bytes flow: it fails after a whole
// timeout without any. With a CPU budget it moves bodyQuantum at most
// between two counts in m (which may wait there); lr is the direction's
// reader, kept in the connection so that a splice allocates nothing.
func (c *clientConn) spliceN(dst, src *net.TCPConn, n int64, timeout time.Duration, lr *io.LimitedReader, m *meter) (int64, error) {
	defer func() { lr.R = nil }()
	var total int64
	for n > 0 {
		dl := time.Now().Add(timeout)
		_ = src.SetReadDeadline(dl)
		_ = dst.SetWriteDeadline(dl)
		chunk := n
		if c.info.CPU != nil {
			chunk = min(n, bodyQuantum)
		}
		lr.R, lr.N = src, chunk
		k, err := dst.ReadFrom(lr)
		if err == nil && k < chunk {
			err = io.EOF // as io.CopyN: src ended early
		}
		total += k
		n -= k
		m.add(c.info.CPU, c.cpuW, k)
		if err != nil {
			if isTimeout(err) && k > 0 {
				continue
			}
			return total, err
		}
	}
	return total, nil
}

// spliceAll copies from src to dst until src ends, like spliceN (a
// response body that ends with the member's connection).
func (c *clientConn) spliceAll(dst, src *net.TCPConn, timeout time.Duration) (int64, error) {
	if c.info.CPU == nil {
		var total int64
		for {
			dl := time.Now().Add(timeout)
			_ = src.SetReadDeadline(dl)
			_ = dst.SetWriteDeadline(dl)
			k, err := io.Copy(dst, src)
			total += k
			if err == nil {
				return total, nil
			}
			if !isTimeout(err) || k == 0 {
				return total, err
			}
		}
	}
	lr := &c.respLR
	defer func() { lr.R = nil }()
	var total int64
	for {
		dl := time.Now().Add(timeout)
		_ = src.SetReadDeadline(dl)
		_ = dst.SetWriteDeadline(dl)
		lr.R, lr.N = src, bodyQuantum
		k, err := dst.ReadFrom(lr)
		total += k
		c.respM.add(c.info.CPU, c.cpuW, k)
		switch {
		case err == nil && lr.N > 0:
			return total, nil // src ended
		case err == nil:
		case !isTimeout(err) || k == 0:
			return total, err
		}
	}
}
