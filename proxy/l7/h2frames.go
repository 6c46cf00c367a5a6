package l7

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Frame handlers of the reading goroutine. Each returns a connection
// error code, or 0 to go on.

var (
	errStreamReset  = errors.New("http2: stream reset")
	errBodyLength   = errors.New("http2: body length differs from content-length")
	errWindowStall  = errors.New("http2: client kept its flow-control window closed")
	errH2BodyTimout = errors.New("http2: request body timeout")
)

// closedRecently reports whether id is among the recently closed streams.
// c.mu held.
func (c *h2Conn) closedRecently(id uint32) bool {
	for _, v := range c.recent {
		if v == id {
			return true
		}
	}
	return false
}

// forget removes a stream from the table. c.mu held.
func (c *h2Conn) forget(st *h2Stream) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	c.recent[c.recentN%len(c.recent)] = st.id
	c.recentN++
	if len(c.streams) == 0 {
		// The connection is idle from now: the reader may be waiting
		// without a deadline, while the stream was open.
		c.idleAt = nowNano()
		c.setReadDL()
	}
}

// resetStream sends RST_STREAM and ends the stream if it is open.
func (c *h2Conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		st.abort(errStreamReset)
		c.forget(st)
	} else if id > c.maxSeen.Load() {
		c.maxSeen.Store(id)
		c.recent[c.recentN%len(c.recent)] = id
		c.recentN++
	}
	c.mu.Unlock()
	c.writeReset(id, code)
}

var connHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true,
}

func (c *h2Conn) onHeaders(f *h2Head) http2.ErrCode {
	id := f.id
	if id%2 == 0 {
		return http2.ErrCodeProtocol
	}
	c.mu.Lock()
	st := c.streams[id]
	recent := c.closedRecently(id)
	c.mu.Unlock()
	if st != nil {
		return c.onTrailers(st, f)
	}
	if id <= c.maxSeen.Load() {
		if recent {
			return http2.ErrCodeStreamClosed
		}
		return http2.ErrCodeProtocol
	}
	c.maxSeen.Store(id)
	if f.prio && f.dep == id {
		c.resetStream(id, http2.ErrCodeProtocol)
		return 0
	}
	if c.goAwaySent.Load() {
		c.resetStream(id, http2.ErrCodeRefusedStream)
		return 0
	}
	c.mu.Lock()
	full := len(c.streams) >= int(c.s.cfg.H2MaxConcurrentStreams) || c.workers >= int(c.s.cfg.H2MaxConcurrentStreams)
	c.mu.Unlock()
	if full {
		// A refusal costs the client a reset token: opening streams
		// past the limit in a loop ends in a GOAWAY.
		if !c.resets.take(nowNano()) {
			return http2.ErrCodeEnhanceYourCalm
		}
		c.resetStream(id, http2.ErrCodeRefusedStream)
		return 0
	}
	st = newH2Stream(c, id)
	status := 0
	if f.truncated {
		c.badHeaders++
		if c.badHeaders > h2BadHeaderLimit {
			return http2.ErrCodeEnhanceYourCalm
		}
		status = 431
	} else if !st.parseHead(f) {
		c.putStream(st)
		c.resetStream(id, http2.ErrCodeProtocol)
		return 0
	}
	st.status0 = status
	if sb := c.hc.info.Streams; sb != nil {
		if !sb.TakeStream() {
			// The tenant's streams in flight are at their bound: refused
			// here, on the reading goroutine, before a worker starts.
			// Like any refusal it costs the client a reset token.
			c.putStream(st)
			if !c.resets.take(nowNano()) {
				return http2.ErrCodeEnhanceYourCalm
			}
			c.resetStream(id, http2.ErrCodeRefusedStream)
			return 0
		}
	}
	c.mu.Lock()
	c.streams[id] = st
	c.workers++
	c.active.Add(1)
	if f.end {
		st.remoteClosed = true
	}
	c.mu.Unlock()
	// An idle worker of the server takes the stream, or a new one
	// starts.
	c.wg.Add(1)
	select {
	case c.s.h2work <- st:
	default:
		c.s.h2started.Add(1)
		go c.s.h2Worker(st)
	}
	return 0
}

// onTrailers handles a second HEADERS frame on a stream: trailers.
func (c *h2Conn) onTrailers(st *h2Stream, f *h2Head) http2.ErrCode {
	c.mu.Lock()
	closed := st.remoteClosed
	c.mu.Unlock()
	if closed {
		c.resetStream(st.id, http2.ErrCodeStreamClosed)
		return 0
	}
	if !f.end || f.truncated {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return 0
	}
	for _, hf := range f.fields {
		if hf.IsPseudo() || connHeaders[hf.Name] {
			c.resetStream(st.id, http2.ErrCodeProtocol)
			return 0
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.declLen >= 0 && st.gotLen != st.declLen {
		st.abort(errBodyLength)
		c.forget(st)
		c.mu.Unlock()
		c.resetStream(st.id, http2.ErrCodeProtocol)
		c.mu.Lock()
		return 0
	}
	// The body's reader copies them into the request at its end; only
	// the fields trailerKept keeps are taken.
	var kept []hpack.HeaderField
	for _, hf := range f.fields {
		if trailerKept(unsafeBytes(hf.Name), c.hc.ca.certField, nil) {
			kept = append(kept, hf)
		}
	}
	st.trailer = kept
	st.remoteClosed = true
	st.cond.Broadcast()
	return 0
}

// allIn reports whether every byte of s is in the set.
func allIn(set *[256]bool, s string) bool {
	for i := 0; i < len(s); i++ {
		if !set[s[i]] {
			return false
		}
	}
	return true
}

// parseHead checks a request head (RFC 9113 section 8.3) and keeps its
// fields; false is a malformed request.
func (st *h2Stream) parseHead(f *h2Head) bool {
	st.fields = append(st.fields[:0], f.fields...)
	st.declLen = -1
	st.endHeaders = f.end
	var seen [4]bool
	for _, hf := range st.fields {
		if hf.IsPseudo() {
			var p *string
			var k int
			switch hf.Name {
			case ":method":
				p, k = &st.method, 0
			case ":scheme":
				p, k = &st.scheme, 1
			case ":path":
				p, k = &st.path, 2
			case ":authority":
				p, k = &st.authority, 3
			default:
				return false
			}
			if seen[k] || hf.Value == "" {
				return false
			}
			seen[k] = true
			*p = hf.Value
			continue
		}
		switch {
		case connHeaders[hf.Name]:
			return false
		case hf.Name == "te":
			if hf.Value != "trailers" {
				return false
			}
		case hf.Name == "content-length":
			n, ok := parseContentLength(unsafeBytes(hf.Value))
			if !ok || (st.declLen >= 0 && n != st.declLen) {
				return false
			}
			st.declLen = n
		}
	}
	// The method and the path go into an HTTP/1.1 member's request
	// line: a token, and target bytes (no blank, no control byte), as an
	// HTTP/1.x client's must be.
	if !seen[0] || !allIn(&tchar, st.method) || !allIn(&tgtchar, st.path) {
		return false
	}
	if st.method == http.MethodConnect {
		if !seen[3] || seen[1] || seen[2] {
			return false
		}
	} else if !seen[1] || !seen[2] || (st.path[0] != '/' && (st.path != "*" || st.method != http.MethodOptions)) {
		return false
	}
	if st.endHeaders && st.declLen > 0 {
		return false
	}
	if st.authority == "" {
		for _, hf := range st.fields {
			if hf.Name == "host" {
				st.authority = hf.Value
				break
			}
		}
	}
	return true
}

// buildRequest builds the net/http request of the stream for the paths
// that need one; false is a target net/url refuses.
func (st *h2Stream) buildRequest() bool {
	c := st.c
	hdr := h2NetHeader(st.fields)
	var u *url.URL
	switch {
	case st.method == http.MethodConnect:
		u = &url.URL{Host: st.authority}
	case st.path == "*":
		u = &url.URL{Path: "*"}
	default:
		var err error
		if u, err = url.ParseRequestURI(st.path); err != nil {
			return false
		}
	}
	r := &http.Request{
		Method:     st.method,
		URL:        u,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     hdr,
		Host:       st.authority,
		RemoteAddr: c.hc.client.String(),
		RequestURI: st.path,
	}
	if c.hc.info.TLS {
		r.TLS = &c.cs
	}
	if st.endHeaders {
		r.Body = http.NoBody
	} else {
		// net/http's body writer (h2rt.go) is not waited for: it
		// reads through a handle that the stream's recycling voids.
		r.Body = &h2ReqBody{c: c, st: st, gen: st.gen}
		r.ContentLength = st.declLen
		r.Trailer = http.Header{}
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	st.cancel = cancel
	if st.err != nil {
		cancel()
	}
	c.mu.Unlock()
	st.req = r.WithContext(ctx)
	return true
}

func (c *h2Conn) onData(f *http2.DataFrame) http2.ErrCode {
	id := f.StreamID
	n := int64(f.Length)
	if !c.recv.take(n) {
		return http2.ErrCodeFlowControl
	}
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() && !c.control.take(nowNano()) {
		return http2.ErrCodeEnhanceYourCalm
	}
	c.mu.Lock()
	st := c.streams[id]
	if st == nil || st.remoteClosed {
		c.mu.Unlock()
		if st == nil && id > c.maxSeen.Load() {
			return http2.ErrCodeProtocol
		}
		c.resetStream(id, http2.ErrCodeStreamClosed)
		return c.refundConn()
	}
	if n > st.recvWindow {
		c.mu.Unlock()
		c.resetStream(id, http2.ErrCodeFlowControl)
		return c.refundConn()
	}
	st.recvWindow -= n
	// Padding is returned to the stream window at once.
	st.unacked += n - int64(len(data))
	st.gotLen += int64(len(data))
	bad := st.declLen >= 0 && (st.gotLen > st.declLen || (f.StreamEnded() && st.gotLen != st.declLen))
	if bad {
		st.abort(errBodyLength)
		c.forget(st)
		c.mu.Unlock()
		c.resetStream(id, http2.ErrCodeProtocol)
		return c.refundConn()
	}
	if !c.holdBody(len(data)) {
		// The tenant's buffered bodies are at their bound: this
		// stream ends, and what it held is given back at once (its
		// handler may run on a while); its tenant's neighbours are not
		// touched.
		st.abort(errTenantBodies)
		c.forget(st)
		c.mu.Unlock()
		c.resetStream(id, http2.ErrCodeEnhanceYourCalm)
		return c.refundConn()
	}
	st.rbuf = append(st.rbuf, data...)
	if f.StreamEnded() {
		st.remoteClosed = true
	}
	st.cond.Broadcast()
	c.mu.Unlock()
	return c.refundConn()
}

// refundConn gives the connection window back as it is consumed.
func (c *h2Conn) refundConn() http2.ErrCode {
	c.recv.refund(&c.h2Wire, h2ConnWindow)
	return 0
}

func (c *h2Conn) onSettings(f *http2.SettingsFrame) http2.ErrCode {
	if f.IsAck() {
		return 0
	}
	if !c.control.take(nowNano()) {
		return http2.ErrCodeEnhanceYourCalm
	}
	return answerSettings(&c.h2Wire, &c.mu, f, &c.h2Flow, c.streams, nil)
}

func (c *h2Conn) onWindowUpdate(f *http2.WindowUpdateFrame) http2.ErrCode {
	if !c.control.take(nowNano()) {
		return http2.ErrCodeEnhanceYourCalm
	}
	c.mu.Lock()
	code, open, overflow := addWindow(&c.h2Flow, c.streams, f.StreamID, int64(f.Increment))
	c.mu.Unlock()
	switch {
	case overflow:
		c.resetStream(f.StreamID, http2.ErrCodeFlowControl)
	case !open && f.StreamID > c.maxSeen.Load():
		return http2.ErrCodeProtocol
	}
	return code
}

func (c *h2Conn) onReset(f *http2.RSTStreamFrame) http2.ErrCode {
	if f.StreamID > c.maxSeen.Load() {
		return http2.ErrCodeProtocol
	}
	if !c.resets.take(nowNano()) {
		return http2.ErrCodeEnhanceYourCalm
	}
	c.mu.Lock()
	if st := c.streams[f.StreamID]; st != nil {
		st.abort(errStreamReset)
		c.forget(st)
	}
	c.mu.Unlock()
	return 0
}

// h2Stream is one request. Its fields are guarded by c.mu unless noted.
type h2Stream struct {
	c      *h2Conn
	id     uint32
	cancel context.CancelFunc // of the request's context, on the net/http path
	up     *upConn            // the member connection in use, fast path
	upCut  bool               // abort set a deadline on up behind its back
	h2up   *h2UpStream        // the HTTP/2 member stream in use
	cond   *sync.Cond
	timer  *time.Timer
	// deadline of the current wait (UnixNano)
	deadline int64
	// dec is the routing decision of serveFast that left the request to
	// the net/http path (decided), which acts on it without asking again.
	dec     decision
	decided bool

	// Request head.
	fields                          []hpack.HeaderField
	method, scheme, path, authority string
	endHeaders                      bool
	hostBuf, pathBuf, head, hblk    []byte
	// view, sink, hsink and fw make the head sent to a member
	// (appendHead, appendUpBlock).
	view  reqView
	sink  h1Sink
	hsink hpackSink
	fw    fwdScratch
	// rs: the scratch of responseFields.
	rs respScratch

	// Request body.
	req          *http.Request
	rbuf         []byte
	rr           int
	recvWindow   int64
	unacked      int64
	remoteClosed bool
	err          error
	declLen      int64
	gotLen       int64
	trailer      []hpack.HeaderField // received, not yet read
	reqTrailer   []hpack.HeaderField // read: the body ended
	bodyDone     chan error          // the request body's writer, fast path
	stopBody     bool                // the request body is not wanted any more
	finished     bool                // the handler returned: Read ends (run)
	readers      int                 // goroutines in Read
	gen          uint32              // counts the stream's recyclings (h2ReqBody)
	tooLarge     bool                // the request body's writer hit the limit
	rawHead      bool                // hblk holds the encoded response head
	holding      bool                // flush holds the connection's writes
	stats        RequestStats        // of the fast path

	sendWindow int64

	// Response, owned by the handler's goroutine.
	status0  int // answer with this status without a handler (431)
	rh       http.Header
	wrote    bool
	sentHead bool
	ended    bool
	status   int
	trailers []string
	wbuf     []byte
	wbp      *[]byte // wbuf's pool entry
}

func newH2Stream(c *h2Conn, id uint32) *h2Stream {
	c.mu.Lock()
	var st *h2Stream
	if n := len(c.free); n > 0 {
		st = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		st = &h2Stream{c: c, cond: sync.NewCond(&c.mu)}
	}
	st.id, st.recvWindow, st.declLen, st.sendWindow = id, h2InitialWindow, -1, c.peerWindow
	c.mu.Unlock()
	return st
}

// putStream recycles a stream that no goroutine refers to any more.
// A few streams keep their response buffer; the others give it back.
func (c *h2Conn) putStream(st *h2Stream) {
	if st.timer != nil {
		st.timer.Stop()
	}
	c.mu.Lock() // a late timer reads the stream under c.mu
	defer c.mu.Unlock()
	c.releaseBody(len(st.rbuf) - st.rr) // what no one read
	keep := len(c.free) < h2KeepStreams
	wbp := st.wbp
	if wbp != nil && len(c.free) >= h2KeepBuffers {
		// Response buffers stay with a few streams.
		*wbp = st.wbuf[:0]
		h2bufs.Put(wbp)
		wbp = nil
	}
	fields := st.fields[:0]
	if cap(fields) > 64 {
		fields = nil
	}
	*st = h2Stream{
		c: c, cond: st.cond, timer: st.timer, wbp: wbp, fields: fields, gen: st.gen + 1,
		// A large request's buffers are not kept idle.
		hostBuf: smallBuf(st.hostBuf), pathBuf: smallBuf(st.pathBuf), head: smallBuf(st.head),
		hblk: smallBuf(st.hblk), sink: h1Sink{cookie: smallBuf(st.sink.cookie)}, fw: fwdScratch{fwd: smallBuf(st.fw.fwd)}, rbuf: smallBuf(st.rbuf), trailers: st.trailers[:0],
	}
	if wbp != nil {
		st.wbuf = (*wbp)[:0]
	}
	if keep {
		c.free = append(c.free, st)
	}
}

// h2KeepStreams is how many finished streams a connection keeps for reuse.
const h2KeepStreams = 16

// h2KeepBuffers is how many of them keep a response buffer.
const h2KeepBuffers = 4

// h2KeepBody is the largest buffer (request body, heads) a finished
// stream keeps.
const h2KeepBody = 4 << 10

// smallBuf empties b, or drops it when it is larger than h2KeepBody.
func smallBuf(b []byte) []byte {
	if cap(b) > h2KeepBody {
		return nil
	}
	return b[:0]
}

// abort ends the stream's body and cancels its request. c.mu held. What
// the client sent and no reader took yet is dropped and given back to its
// tenant at once: the request is dead (its client reset it or is gone, or
// its body broke a rule), so a relay to a member that still reads gets no
// more of it (readLocked returns err).
func (st *h2Stream) abort(err error) {
	if st.err == nil {
		st.err = err
	}
	if n := len(st.rbuf) - st.rr; n > 0 {
		st.c.releaseBody(n)
		st.rbuf, st.rr = st.rbuf[:0], 0
	}
	if st.cancel != nil {
		st.cancel()
	}
	if st.up != nil {
		_ = st.up.nc.SetDeadline(aLongTimeAgo)
		st.upCut = true
	}
	if st.h2up != nil {
		st.h2up.cancel()
	}
	st.cond.Broadcast()
}

func (st *h2Stream) addSendWindow(d int64) bool {
	st.sendWindow += d
	st.cond.Broadcast()
	return st.sendWindow <= h2MaxWindow
}

// wait waits on the stream's condition until it is signalled or the
// deadline (UnixNano) passes; false once it passed. c.mu held.
func (st *h2Stream) wait(deadline int64) bool {
	d := time.Duration(deadline - nowNano())
	if d <= 0 {
		return false
	}
	st.deadline = deadline
	if st.timer == nil {
		c, cond := st.c, st.cond
		st.timer = time.AfterFunc(d, func() {
			c.mu.Lock()
			if nowNano() >= st.deadline {
				cond.Broadcast()
			}
			c.mu.Unlock()
		})
	} else {
		st.timer.Reset(d)
	}
	st.cond.Wait()
	return nowNano() < deadline
}

// startBlock begins a header block. The framer guarantees that only
// CONTINUATION frames of the same stream follow until it ends.
func (c *h2Conn) startBlock(f *http2.HeadersFrame) http2.ErrCode {
	return c.beginBlock(f.StreamID, f.StreamEnded(), f.HasPriority(), f.Priority.StreamDep, f.HeaderBlockFragment(), f.HeadersEnded())
}

// beginBlock begins the header block of stream id with the fragment of
// its HEADERS frame.
func (c *h2Conn) beginBlock(id uint32, end, prio bool, dep uint32, frag []byte, ended bool) http2.ErrCode {
	h := c.begin(id, end, c.s.cfg.MaxHeaderBytes)
	if prio {
		h.prio, h.dep = true, dep
	}
	return c.continueBlock(frag, ended)
}

// continueBlock decodes a fragment of the header block; at its end the
// request head is handled.
func (c *h2Conn) continueBlock(frag []byte, ended bool) http2.ErrCode {
	if code := c.decode(frag, ended); code != 0 || !ended {
		return code
	}
	h := &c.head
	if h.invalid {
		c.mu.Lock()
		st := c.streams[h.id]
		c.mu.Unlock()
		if st == nil && h.id%2 == 1 && h.id > c.maxSeen.Load() {
			c.maxSeen.Store(h.id)
		}
		c.resetStream(h.id, http2.ErrCodeProtocol)
		return 0
	}
	return c.onHeaders(h)
}

// h2NetHeader returns the header of a stream's net/http request: the
// regular fields but Host, the cookie fields joined with "; ".
// h2Request.Header reads the same fields in place.
func h2NetHeader(fields []hpack.HeaderField) http.Header {
	hdr := make(http.Header, len(fields))
	var cookies []string
	for _, hf := range fields {
		switch {
		case hf.IsPseudo(), hf.Name == "host":
			continue
		case hf.Name == "cookie":
			cookies = append(cookies, hf.Value)
			continue
		}
		k := http.CanonicalHeaderKey(hf.Name)
		hdr[k] = append(hdr[k], hf.Value)
	}
	if len(cookies) > 0 {
		hdr["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	return hdr
}
