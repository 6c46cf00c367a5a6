package l7

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
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
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteRSTStream(id, code)
	}
	c.unlockW()
}

var connHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true,
}

func (c *h2Conn) onHeaders(f *http2.MetaHeadersFrame) http2.ErrCode {
	id := f.StreamID
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
	if f.HasPriority() && f.Priority.StreamDep == id {
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
		if !c.resets.take(time.Now().UnixNano()) {
			return http2.ErrCodeEnhanceYourCalm
		}
		c.resetStream(id, http2.ErrCodeRefusedStream)
		return 0
	}
	st = newH2Stream(c, id)
	status := 0
	if f.Truncated {
		c.badHeaders++
		if c.badHeaders > h2BadHeaderLimit {
			return http2.ErrCodeEnhanceYourCalm
		}
		status = 431
	} else if !st.buildRequest(f) {
		c.resetStream(id, http2.ErrCodeProtocol)
		return 0
	}
	st.status0 = status
	c.mu.Lock()
	c.streams[id] = st
	c.workers++
	if f.StreamEnded() {
		st.remoteClosed = true
	}
	c.mu.Unlock()
	c.wg.Add(1)
	go st.run()
	return 0
}

// onTrailers handles a second HEADERS frame on a stream: trailers.
func (c *h2Conn) onTrailers(st *h2Stream, f *http2.MetaHeadersFrame) http2.ErrCode {
	c.mu.Lock()
	closed := st.remoteClosed
	c.mu.Unlock()
	if closed {
		c.resetStream(st.id, http2.ErrCodeStreamClosed)
		return 0
	}
	if !f.StreamEnded() || f.Truncated {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return 0
	}
	for _, hf := range f.Fields {
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
	// The body's reader copies them into the request at its end.
	st.trailer = f.Fields
	st.remoteClosed = true
	st.cond.Broadcast()
	return 0
}

// buildRequest checks the request head and builds st.req; false is a
// malformed request (RFC 9113 section 8.1.1).
func (st *h2Stream) buildRequest(f *http2.MetaHeadersFrame) bool {
	var method, scheme, path, authority string
	hdr := make(http.Header, len(f.Fields))
	declLen := int64(-1)
	var cookies []string
	for _, hf := range f.Fields {
		if hf.IsPseudo() {
			var p *string
			switch hf.Name {
			case ":method":
				p = &method
			case ":scheme":
				p = &scheme
			case ":path":
				p = &path
			case ":authority":
				p = &authority
			default:
				return false
			}
			if *p != "" || hf.Value == "" {
				return false
			}
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
			n, err := strconv.ParseUint(hf.Value, 10, 63)
			if err != nil || (declLen >= 0 && int64(n) != declLen) {
				return false
			}
			declLen = int64(n)
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
	if method == "" {
		return false
	}
	var u *url.URL
	if method == http.MethodConnect {
		if authority == "" || scheme != "" || path != "" {
			return false
		}
		u = &url.URL{Host: authority}
	} else {
		if scheme == "" || path == "" {
			return false
		}
		var err error
		if path == "*" {
			u = &url.URL{Path: "*"}
		} else if u, err = url.ParseRequestURI(path); err != nil || path[0] != '/' {
			return false
		}
	}
	host := authority
	if host == "" {
		host = hdr.Get("Host")
	}
	delete(hdr, "Host")
	c := st.c
	r := &http.Request{
		Method:     method,
		URL:        u,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     hdr,
		Host:       host,
		RemoteAddr: c.hc.client.String(),
		RequestURI: path,
		TLS:        &c.cs,
	}
	st.declLen = declLen
	if f.StreamEnded() {
		if declLen > 0 {
			return false
		}
		r.Body = http.NoBody
	} else {
		r.Body = st
		r.ContentLength = declLen
		r.Trailer = http.Header{}
	}
	st.req = r.WithContext(st.ctx)
	return true
}

func (c *h2Conn) onData(f *http2.DataFrame) http2.ErrCode {
	id := f.StreamID
	n := int64(f.Length)
	if n > c.recvWindow {
		return http2.ErrCodeFlowControl
	}
	c.recvWindow -= n
	c.recvUnack += n
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() && !c.control.take(time.Now().UnixNano()) {
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
	st.rbuf = append(st.rbuf, data...)
	if f.StreamEnded() {
		st.remoteClosed = true
	}
	st.cond.Broadcast()
	c.mu.Unlock()
	return c.refundConn()
}

// refundConn returns consumed bytes to the connection window once a
// quarter of it is used: stream windows bound what each stream buffers.
func (c *h2Conn) refundConn() http2.ErrCode {
	if c.recvUnack < h2ConnWindow/4 {
		return 0
	}
	k := c.recvUnack
	c.recvUnack = 0
	c.recvWindow += k
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteWindowUpdate(0, uint32(k))
	}
	c.unlockW()
	return 0
}

func (c *h2Conn) onSettings(f *http2.SettingsFrame) http2.ErrCode {
	if f.IsAck() {
		return 0
	}
	if !c.control.take(time.Now().UnixNano()) {
		return http2.ErrCodeEnhanceYourCalm
	}
	var code http2.ErrCode
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			} else {
				code = http2.ErrCodeProtocol
			}
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > h2MaxWindow {
					code = http2.ErrCodeFlowControl
				}
				st.cond.Broadcast()
			}
			c.mu.Unlock()
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.peerFrame = int(s.Val)
			c.mu.Unlock()
		case http2.SettingHeaderTableSize:
			c.lockW()
			c.henc.SetMaxDynamicTableSizeLimit(min(s.Val, 4096))
			c.unlockW()
		}
		if code != 0 {
			return errors.New("stop")
		}
		return nil
	})
	if code != 0 {
		return code
	}
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteSettingsAck()
	}
	c.unlockW()
	return 0
}

func (c *h2Conn) onWindowUpdate(f *http2.WindowUpdateFrame) http2.ErrCode {
	if !c.control.take(time.Now().UnixNano()) {
		return http2.ErrCodeEnhanceYourCalm
	}
	inc := int64(f.Increment)
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > h2MaxWindow {
			return http2.ErrCodeFlowControl
		}
		for _, st := range c.streams {
			st.cond.Broadcast()
		}
		return 0
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxSeen.Load() {
			return http2.ErrCodeProtocol
		}
		return 0
	}
	st.sendWindow += inc
	if st.sendWindow > h2MaxWindow {
		c.mu.Unlock()
		c.resetStream(f.StreamID, http2.ErrCodeFlowControl)
		c.mu.Lock()
		return 0
	}
	st.cond.Broadcast()
	return 0
}

func (c *h2Conn) onReset(f *http2.RSTStreamFrame) http2.ErrCode {
	if f.StreamID > c.maxSeen.Load() {
		return http2.ErrCodeProtocol
	}
	if !c.resets.take(time.Now().UnixNano()) {
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
	ctx    context.Context
	cancel context.CancelFunc
	cond   sync.Cond
	timer  *time.Timer
	// deadline of the current wait (UnixNano)
	deadline int64

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
	trailer      []hpack.HeaderField

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
}

func newH2Stream(c *h2Conn, id uint32) *h2Stream {
	st := &h2Stream{c: c, id: id, recvWindow: h2InitialWindow, declLen: -1}
	st.cond.L = &c.mu
	c.mu.Lock()
	st.sendWindow = c.peerWindow
	c.mu.Unlock()
	st.ctx, st.cancel = context.WithCancel(c.ctx)
	return st
}

// abort ends the stream's body and cancels its request. c.mu held.
func (st *h2Stream) abort(err error) {
	if st.err == nil {
		st.err = err
	}
	st.cancel()
	st.cond.Broadcast()
}

// wait waits on the stream's condition until it is signalled or the
// deadline (UnixNano) passes; false once it passed. c.mu held.
func (st *h2Stream) wait(deadline int64) bool {
	d := time.Duration(deadline - time.Now().UnixNano())
	if d <= 0 {
		return false
	}
	st.deadline = deadline
	if st.timer == nil {
		st.timer = time.AfterFunc(d, func() {
			st.c.mu.Lock()
			if time.Now().UnixNano() >= st.deadline {
				st.cond.Broadcast()
			}
			st.c.mu.Unlock()
		})
	} else {
		st.timer.Reset(d)
	}
	st.cond.Wait()
	return time.Now().UnixNano() < deadline
}
