package l7

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 fast path: a request to an HTTP/1.1 member without PROXY
// protocol goes from the decoded HPACK fields straight to an HTTP/1.1 head
// in a reused buffer, and the member's response head (parsed in place by
// the HTTP/1.1 engine's parser) straight to an HPACK block, without
// net/http values. The response encoder never uses the dynamic table, so
// it needs no state shared with other streams.

// unsafeBytes views s as bytes; they must not be written.
func unsafeBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// appendHpackInt appends v with an n-bit prefix whose other bits are in
// first (RFC 7541 section 5.1).
func appendHpackInt(dst []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(dst, first|byte(v))
	}
	dst = append(dst, first|byte(max))
	v -= max
	for v >= 128 {
		dst = append(dst, byte(v&0x7f|0x80))
		v >>= 7
	}
	return append(dst, byte(v))
}

// appendLiteral appends a literal field without indexing and with a new
// name (RFC 7541 section 6.2.2); lower lower-cases the name.
func appendLiteral(dst []byte, name, value string, lower bool) []byte {
	dst = append(dst, 0)
	dst = appendHpackInt(dst, 0, 7, uint64(len(name)))
	if lower {
		dst = appendLower(dst, name)
	} else {
		dst = append(dst, name...)
	}
	dst = appendHpackInt(dst, 0, 7, uint64(len(value)))
	return append(dst, value...)
}

// appendLower appends s in ASCII lower case.
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// appendStatus appends :status, indexed when the static table has it.
func appendStatus(dst []byte, code int) []byte {
	switch code {
	case 200:
		return append(dst, 0x88)
	case 204:
		return append(dst, 0x89)
	case 206:
		return append(dst, 0x8a)
	case 304:
		return append(dst, 0x8b)
	case 400:
		return append(dst, 0x8c)
	case 404:
		return append(dst, 0x8d)
	case 500:
		return append(dst, 0x8e)
	}
	dst = append(dst, 0x08, 3) // literal, name :status (index 8), 3 bytes
	return strconv.AppendInt(dst, int64(code%1000), 10)
}

// serveFast proxies the request when its route leads to HTTP/1.1 members
// without PROXY protocol; false leaves it to the net/http path.
func (st *h2Stream) serveFast() bool {
	c := st.c
	s, hc := c.s, c.hc
	if st.method == http.MethodConnect {
		return false
	}
	host, ok := normalizeHost(st.hostBuf[:0], unsafeBytes(st.authority))
	if !ok {
		return false
	}
	st.hostBuf = host
	target := st.path
	p, q := target, ""
	if i := strings.IndexByte(target, '?'); i >= 0 {
		p, q = target[:i], target[i:]
	}
	cleaned := false
	if p != "*" && needsClean(unsafeBytes(p)) {
		st.pathBuf = cleanPath(st.pathBuf[:0], unsafeBytes(p))
		p, cleaned = unsafeString(st.pathBuf), true
	}
	st.view = reqView{method: unsafeBytes(st.method), authority: unsafeBytes(st.authority), target: unsafeBytes(st.path), fieldsView: fieldsView{h2: st.fields}}
	d := s.decide(hc.info, &hc.ca, (*h2Request)(st), &st.view, &st.fw, unsafeString(host), p, false)
	switch {
	case d.act == actHTTP2:
		return st.serveUpH2(&d, p, q)
	case d.act != actHTTP1 || d.opts.ProxyProtocol != 0:
		// The net/http path answers as decided: Select and the Gate
		// are not asked twice.
		st.dec, st.decided = d, true
		return false
	}
	be, opts := d.be, d.opts
	defer st.report(nowNano())
	stats := &st.stats
	fail := st.fail
	limit, key, code := st.begin(&d)
	if code != 0 {
		return fail(code, OutcomeClientError)
	}
	var id []byte
	if cleaned {
		st.head, id = st.appendHead(st.head[:0], p, q)
	} else {
		st.head, id = st.appendHead(st.head[:0], target, "")
	}
	if stats.AccessLog > 0 {
		stats.RequestID = string(id)
	}
	rht := rht(opts, s)
	for retries := s.cfg.Retries; ; retries-- {
		m, ok := be.Pick(hc.ca.addr, key)
		if !ok {
			return fail(503, OutcomeNoMember)
		}
		stats.Member, stats.Pool = m.Addr(), opts.Pool
		t0 := nowNano()
		if err := hc.members.acquire(c.ctx, s.cfg.MaxMembersPerConn, rht); err != nil {
			m.Done(nil, 0, time.Duration(nowNano()-t0))
			return fail(statusFor(err), outcomeFor(err))
		}
		u, err := st.exchange(m, opts, rht, limit)
		d := time.Duration(nowNano() - t0)
		if err != nil {
			hc.members.release()
			st.c.mu.Lock()
			gone, out := st.err != nil, st.abortedOutcome()
			st.c.mu.Unlock()
			switch {
			case errors.Is(err, errBodyTooLarge):
				m.Done(nil, 0, d)
				return fail(413, OutcomeClientError)
			case gone:
				m.Done(nil, 0, d)
				stats.Outcome = out
				return true
			}
			m.Done(err, 0, d)
			if errors.Is(err, ErrConnect) && retries > 0 {
				continue
			}
			return fail(statusFor(err), outcomeFor(err))
		}
		stats.Upstream = d
		stats.Status = u.resp.status
		m.Done(nil, u.resp.status, d)
		n, err := st.relay(u)
		hc.members.release()
		return st.relayed(n, err)
	}
}

// begin starts the figures of a request that a fast path (to HTTP/1.1 or
// HTTP/2 members) serves as d says, and checks what both check before a
// member is picked: the declared body length against the backend's limit
// (413) and the number of fields (431). It returns the body limit, the
// balancing key (the value of the backend's HashHeader field; a
// forwarding field's as the member receives it, routeRequest.hashKey) and
// the status to answer with instead (0: go on).
func (st *h2Stream) begin(d *decision) (limit int64, key []byte, code int) {
	s, hc := st.c.s, st.c.hc
	st.view = reqView{method: unsafeBytes(st.method), authority: unsafeBytes(st.authority), target: unsafeBytes(st.path), fieldsView: fieldsView{h2: st.fields}}
	startFigures(&st.stats, hc.info, hc.client, true, false, &st.view)
	st.stats.Route = d.route.Name
	limit, opts := d.limit, d.opts
	if limit > 0 && st.declLen > limit {
		return limit, nil, 413
	}
	nf := 0
	for _, f := range st.fields {
		if !f.IsPseudo() {
			nf++
		}
	}
	if nf > s.cfg.MaxHeaderCount {
		return limit, nil, 431
	}
	if name := opts.HashHeader; name != "" {
		var decided bool
		if key, decided = st.fw.rr.hashKey(name); !decided {
			for _, f := range st.fields {
				if !f.IsPseudo() && strings.EqualFold(f.Name, name) {
					key = unsafeBytes(f.Value)
					break
				}
			}
		}
	}
	return limit, key, 0
}

// relayed records a response relayed to the client: the body bytes both
// ways and the outcome (aborted when err says the relay failed).
func (st *h2Stream) relayed(n int64, err error) bool {
	st.stats.ResponseBytes, st.stats.RequestBytes = n, st.gotLen
	st.stats.Outcome = relayOutcome(err)
	return true
}

// report hands the request's figures to the metrics; start is when the
// request began (nowNano).
func (st *h2Stream) report(start int64) {
	st.stats.Duration = time.Duration(nowNano() - start)
	st.c.s.cfg.Metrics.Request(st.stats)
}

// fail answers with an error page.
func (st *h2Stream) fail(code int, out Outcome) bool {
	writeErrorPage(st, code)
	st.stats.Status, st.stats.Outcome = code, out
	return true
}

// appendHead appends the HTTP/1.1 head sent to the member: the request
// line, Host, the fields forwardFields decides, and the body's framing.
// It returns the request id sent.
func (st *h2Stream) appendHead(dst []byte, path, query string) ([]byte, []byte) {
	dst = append(dst, st.method...)
	dst = append(dst, ' ')
	dst = append(dst, path...)
	dst = append(dst, query...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, st.authority...)
	dst = append(dst, "\r\n"...)
	st.sink = h1Sink{dst: dst, fromH2: true, cookie: st.sink.cookie[:0]}
	id := forwardFields(&st.view, &st.c.hc.ca, &st.sink, &st.fw)
	st.sink.done()
	dst = st.sink.dst
	st.sink.dst = nil
	switch {
	case !st.endHeaders && st.declLen >= 0:
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, st.declLen, 10)
		dst = append(dst, "\r\n"...)
	case !st.endHeaders:
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	case st.method == http.MethodPost || st.method == http.MethodPut || st.method == http.MethodPatch:
		dst = append(dst, "Content-Length: 0\r\n"...)
	}
	return append(dst, "\r\n"...), id
}

// exchange sends the head (and the body) to m and reads the response
// head. On success the member connection is st.up.
func (st *h2Stream) exchange(m Member, opts *BackendOptions, rht time.Duration, limit int64) (*upConn, error) {
	c := st.c
	s := c.s
	key := keyOf(m.Addr(), opts.Protocol, opts)
	now := nowNano()
	u, _ := s.takeIdle(key, now, &c.pool)
	reused := true
	var err error
	if u == nil {
		if u, err = s.dial(c.ctx, key, opts, nil); err != nil {
			return nil, err
		}
		reused = false
	}
	hasBody := !st.endHeaders
	for {
		if err := st.attach(u); err != nil {
			u.close()
			return nil, err
		}
		u.got, u.r, u.w, u.pending = 0, 0, 0, nil
		u.resp.reset()
		var bodyDone chan error
		err = u.sendHead(st.head, hasBody, now, s.cfg.BodyTimeout, rht)
		if err == nil && hasBody {
			bodyDone = make(chan error, 1)
			go func(u *upConn) { bodyDone <- st.sendBody(u, limit) }(u)
		}
		if err == nil {
			err = readH1Head(u, now, rht, s.cfg.MaxHeaderBytes, st.c.chargeRead)
		}
		if err == nil {
			st.bodyDone = bodyDone
			return u, nil
		}
		st.detach()
		u.close()
		if bodyDone != nil {
			if berr := <-bodyDone; errors.Is(berr, errBodyTooLarge) {
				return nil, berr
			}
		}
		if reused && !hasBody && u.got == 0 && !isTimeout(err) {
			reused = false
			if u, err = s.dial(c.ctx, key, opts, nil); err != nil {
				return nil, err
			}
			continue
		}
		return nil, err
	}
}

// attach makes u the stream's member connection, which a reset of the
// stream unblocks.
func (st *h2Stream) attach(u *upConn) error {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	st.up, st.upCut = u, false
	return nil
}

// detach ends the stream's use of its member connection. It reports
// whether a reset of the stream set the connection's deadlines in the
// past (its rdl and wdl do not say so).
func (st *h2Stream) detach() (cut bool) {
	st.c.mu.Lock()
	st.up, cut = nil, st.upCut
	st.c.mu.Unlock()
	return cut
}

// sendBody streams the request body to the member, chunked when its
// length is unknown, with its trailers.
func (st *h2Stream) sendBody(u *upConn, limit int64) error {
	return sendH1Body(u, st, st.declLen < 0, limit, st.c.s.cfg.BodyTimeout, func(end []byte) []byte {
		for _, hf := range st.reqTrailer {
			end = append(end, hf.Name...)
			end = append(end, ": "...)
			end = append(end, hf.Value...)
			end = append(end, "\r\n"...)
		}
		return end
	})
}

// relay sends the member's response on the stream and settles the member
// connection; it returns the body bytes sent.
func (st *h2Stream) relay(u *upConn) (n int64, err error) {
	c := st.c
	s := c.s
	rh := &u.resp
	// The HTTP/1.x parser refused a head respBlock would refuse.
	st.respBlock(rh.status, fieldsView{h1b: u.rb[u.r : u.r+rh.n], h1: &rh.headLines})
	framing := rh.framing(st.method == http.MethodHead)
	left := rh.contentLength
	reusable := rh.reusable() && framing != bodyClose
	u.r += rh.n
	st.wrote, st.status, st.rawHead = true, rh.status, true
	var ck chunked
	// The trailer section gathers, over as many reads as it takes, in
	// the spare capacity of the head block (which may not have left yet).
	tstart := len(st.hblk)
	trailer := st.hblk[tstart:]
	// unsent: the bytes of a chunked body read and parsed but not sent
	// as DATA (chunk-size lines with their extensions, the CRLFs, the
	// trailer section), charged as the DATA sent count once per read
	// off the member and at the end.
	var unsent int64
	for err == nil {
		if framing == bodyNone || (framing == bodyLength && left == 0) || (framing == bodyChunked && ck.done()) {
			break
		}
		if u.r == u.w {
			if unsent > 0 {
				c.chargeRead(unsent)
				unsent = 0
			}
			u.r, u.w = 0, 0
			err = u.setReadDeadline(nowNano(), s.cfg.BodyTimeout)
			if err == nil {
				err = u.fill()
			}
			if err != nil {
				if framing == bodyClose && errors.Is(err, io.EOF) {
					err = nil
					break
				}
				err = upstreamReadError(err)
				break
			}
		}
		in := u.rb[u.r:u.w]
		switch framing {
		case bodyLength:
			k := int(min(int64(len(in)), left))
			u.r += k
			left -= int64(k)
			n += int64(k)
			_, err = st.Write(in[:k])
		case bodyClose:
			u.r += len(in)
			n += int64(len(in))
			_, err = st.Write(in)
		default:
			inTrailer := ck.inTrailer()
			k, data, cerr := ck.step(in)
			if inTrailer {
				trailer = append(trailer, in[:k]...)
			}
			u.r += k
			if data {
				n += int64(k)
				_, err = st.Write(in[:k])
			} else {
				// Read and parsed as the body's bytes, whether or not
				// anything of them goes on.
				unsent += int64(k)
			}
			if cerr != nil {
				err = ErrUpstreamProtocol
			}
		}
	}
	if unsent > 0 {
		c.chargeRead(unsent)
	}
	if err == nil {
		if tf := trailerFields(trailer, rh.conn.names); len(tf) > 0 {
			if err = st.flush(false); err == nil {
				st.ended = true
				err = st.sendFields(tf, true)
			}
		} else {
			err = st.flush(true)
		}
	}
	if err != nil && !st.ended {
		// A response cut short must not look complete.
		st.ended = true
		c.resetStream(st.id, http2.ErrCodeInternal)
	}
	cut := st.detach()
	if st.bodyDone != nil {
		if !reusable || err != nil {
			u.close()
		}
		if berr := <-st.bodyDone; berr != nil {
			reusable = false
		}
		st.bodyDone = nil
	}
	if err == nil && reusable && !cut && u.r == u.w {
		// The deadlines stay as rdl and wdl record them: whoever takes
		// the connection next moves them only when they are too short
		// (setDeadline), not twice per request.
		u.idleAt = nowNano()
		if s.pools.putBack(u, s.cfg.MaxIdlePerMember) {
			return n, nil
		}
	}
	u.close()
	return n, err
}

// chargeRead counts n bytes a stream read off a member and did not send
// as DATA (chunk framing, a trailer section, interim responses) as the
// DATA sent count.
func (c *h2Conn) chargeRead(n int64) {
	c.lockW()
	units := c.outM.take(n)
	c.unlockW()
	if cpu := c.hc.info.CPU; cpu != nil && units > 0 {
		cpu.Relay(units * c.cpuW)
	}
}

// trailerFields parses a chunked trailer section ("0\r\n" excluded or
// not) into HTTP/2 fields, those trailerKept keeps (listed are the names
// the head's Connection fields list).
func trailerFields(t, listed []byte) []hpack.HeaderField {
	var out []hpack.HeaderField
	for len(t) > 0 {
		i := bytes.Index(t, []byte("\r\n"))
		if i < 0 {
			break
		}
		line := t[:i]
		t = t[i+2:]
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(k) == 0 {
			continue
		}
		if !trailerKept(k, "", listed) {
			continue
		}
		out = append(out, hpack.HeaderField{Name: strings.ToLower(string(k)), Value: string(bytes.TrimSpace(v))})
	}
	return out
}
