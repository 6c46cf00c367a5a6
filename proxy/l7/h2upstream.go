package l7

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Streams of the HTTP/2 client: the caller's side. A stream is opened on
// a connection with a reserved slot, its request body written with write
// (from any one goroutine), its response read with awaitHead and read
// (from one other goroutine), and it ends with close, exactly once.

var (
	// errH2SendStopped: the member answered in full and reset the
	// stream: the rest of the request body is not wanted.
	errH2SendStopped = errors.New("http2: member needs no more request body")
	errH2Cancelled   = errors.New("http2: request cancelled")
)

// h2UpStream is one request to a member. Fields are guarded by c.mu
// unless noted.
type h2UpStream struct {
	c            *h2UpConn
	id           uint32
	rwake, wwake chan struct{} // signalled on response events / window changes
	rtimer       *time.Timer   // the response reader's
	wtimer       *time.Timer   // the body writer's
	cancelled    atomic.Bool   // the caller gave up (its client went away)

	// Response.
	status  int
	fields  []hpack.HeaderField
	gotHead bool
	// unsent: the bytes of header blocks received (interim responses,
	// the head, the trailers) not charged yet: awaitHead charges those
	// before the head and the head's, the body's reader the trailers'
	// (takeUnsent).
	unsent  int64
	rbuf    []byte
	rr      int
	held    int64 // bytes received and not yet returned to the member's window
	charged int64 // bytes in rbuf, charged to the tenant's member budget
	unacked int64 // bytes read (and padding) not yet returned
	trailer []hpack.HeaderField
	end     bool // END_STREAM received
	err     error

	// Request.
	sendWindow int64
	sentEnd    bool
	stopSend   bool
}

var h2UpStreams = sync.Pool{New: func() any {
	return &h2UpStream{rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1)}
}}

func newH2UpStream(c *h2UpConn) *h2UpStream {
	st := h2UpStreams.Get().(*h2UpStream)
	st.c = c
	return st
}

func (st *h2UpStream) addSendWindow(d int64) bool {
	st.sendWindow += d
	st.signal()
	return st.sendWindow <= h2MaxWindow
}

// signal wakes the response reader and the body writer.
func (st *h2UpStream) signal() { h2Wake{st.rwake, st.wwake}.send() }

// fail ends the stream with err. c.mu held.
func (st *h2UpStream) fail(err error) {
	if st.err == nil && err != nil {
		st.err = err
	}
	st.signal()
}

// cancel is called when the caller's client went away; it may run on any
// goroutine, under any lock.
func (st *h2UpStream) cancel() {
	st.cancelled.Store(true)
	st.signal()
}

// waitOn waits for a signal on ch until deadline (UnixNano); false when
// it passed.
func waitOn(ch chan struct{}, t **time.Timer, deadline int64) bool {
	d := time.Duration(deadline - nowNano())
	if d <= 0 {
		return false
	}
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	select {
	case <-ch:
		(*t).Stop()
		return true
	case <-(*t).C:
		return false
	}
}

// start opens the stream with the encoded request head. With body set
// (the whole request body), HEADERS and DATA leave in one write when the
// member's windows allow; sent reports whether they did. end without body
// ends the stream with the head.
func (st *h2UpStream) start(block []byte, end bool, body []byte) (sent bool, err error) {
	c := st.c
	c.lockW()
	c.mu.Lock()
	if c.dead != nil || c.goAway {
		c.mu.Unlock()
		c.unlockW()
		return false, errH2Refused // the member never saw it
	}
	st.id = c.nextID
	c.nextID += 2
	exhausted := c.nextID >= 1<<31-1
	if exhausted {
		c.goAway = true
	}
	st.sendWindow = c.peerWindow
	c.streams[st.id] = st
	frame := c.peerFrame
	n := int64(len(body))
	sent = body != nil && n <= st.sendWindow && n <= c.sendWindow && len(body) <= frame
	if sent {
		st.sendWindow -= n
		c.sendWindow -= n
	}
	st.sentEnd = sent || (end && body == nil)
	c.mu.Unlock()
	if c.werr == nil {
		c.writeBlock(st.id, block, end && body == nil, frame)
	}
	if c.werr == nil && sent {
		c.werr = c.fr.WriteData(st.id, true, body)
	}
	err = c.werr
	c.unlockW()
	if exhausted {
		c.pool.remove(c)
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
	}
	return sent, nil
}

// write sends request body bytes within the member's windows; end ends
// the stream with the last frame. A member that keeps a window closed for
// BodyTimeout fails the stream.
func (st *h2UpStream) write(p []byte, end bool) error {
	c := st.c
	bt := int64(c.cl.s.cfg.BodyTimeout)
	for {
		c.mu.Lock()
		var n int
		deadline := nowNano() + bt
		for {
			switch {
			case st.stopSend:
				c.mu.Unlock()
				return errH2SendStopped
			case st.err != nil:
				err := st.err
				c.mu.Unlock()
				return err
			case st.cancelled.Load():
				c.mu.Unlock()
				return errH2Cancelled
			}
			if n = c.take(&st.sendWindow, len(p)); n > 0 || len(p) == 0 {
				break
			}
			c.mu.Unlock()
			if !waitOn(st.wwake, &st.wtimer, deadline) {
				return fmt.Errorf("%w: member kept its http2 window closed", ErrUpstreamTimeout)
			}
			c.mu.Lock()
		}
		last := end && n == len(p)
		if last {
			st.sentEnd = true
			c.closeIfDoneLocked(st)
		}
		c.mu.Unlock()
		c.lockW()
		err := c.werr
		if err == nil {
			err = c.fr.WriteData(st.id, last, p[:n])
			c.werr = err
		}
		c.unlockW()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// writeTrailers ends the request with a trailer section.
func (st *h2UpStream) writeTrailers(fields []hpack.HeaderField, scratch []byte) error {
	c := st.c
	for _, f := range fields {
		scratch = appendLiteral(scratch, f.Name, f.Value, false)
	}
	c.mu.Lock()
	if st.err != nil || st.stopSend {
		c.mu.Unlock()
		return errH2SendStopped
	}
	st.sentEnd = true
	c.closeIfDoneLocked(st)
	frame := c.peerFrame
	c.mu.Unlock()
	c.lockW()
	if c.werr == nil {
		c.writeBlock(st.id, scratch, true, frame)
	}
	err := c.werr
	c.unlockW()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
	}
	return nil
}

// awaitHead waits for the response head until deadline (UnixNano). A
// member that does not answer in time is probed with a PING. The bytes
// of the interim responses before the head, and the head's, are told to
// interim as they come, when it is not nil (to charge them).
func (st *h2UpStream) awaitHead(deadline int64, interim func(n int64)) error {
	c := st.c
	for {
		c.mu.Lock()
		got, err, n := st.gotHead, st.err, st.unsent
		st.unsent = 0
		c.mu.Unlock()
		if n > 0 && interim != nil {
			interim(n)
		}
		switch {
		case got:
			return nil
		case err != nil:
			return err
		case st.cancelled.Load():
			return errH2Cancelled
		}
		if !waitOn(st.rwake, &st.rtimer, deadline) {
			c.probeDead()
			c.mu.Lock()
			n, st.unsent = st.unsent, 0
			c.mu.Unlock()
			if n > 0 && interim != nil {
				interim(n)
			}
			return fmt.Errorf("%w: no http2 response head", ErrUpstreamTimeout)
		}
	}
}

// ready reports whether read would not block.
func (st *h2UpStream) ready() bool {
	c := st.c
	c.mu.Lock()
	ok := st.rr < len(st.rbuf) || st.end || st.err != nil
	c.mu.Unlock()
	return ok || st.cancelled.Load()
}

// takeUnsent returns the bytes of header blocks received and not charged
// yet (the trailers', once read returned io.EOF), as charged from then.
func (st *h2UpStream) takeUnsent() int64 {
	st.c.mu.Lock()
	n := st.unsent
	st.unsent = 0
	st.c.mu.Unlock()
	return n
}

// read reads response body bytes; io.EOF once the stream ended (the
// trailers are then in st.trailer). Each wait for data is bounded by
// BodyTimeout.
func (st *h2UpStream) read(p []byte) (int, error) {
	c := st.c
	deadline := nowNano() + int64(c.cl.s.cfg.BodyTimeout)
	c.mu.Lock()
	for st.rr == len(st.rbuf) {
		var err error
		switch {
		case st.end:
			err = io.EOF
		case st.err != nil:
			err = st.err
		case st.cancelled.Load():
			err = errH2Cancelled
		}
		if err != nil {
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Unlock()
		if !waitOn(st.rwake, &st.rtimer, deadline) {
			return 0, fmt.Errorf("%w: http2 response body", ErrUpstreamTimeout)
		}
		c.mu.Lock()
	}
	n := copy(p, st.rbuf[st.rr:])
	st.rr += n
	if st.rr == len(st.rbuf) {
		st.rbuf, st.rr = st.rbuf[:0], 0
	}
	st.charged -= int64(n)
	c.pool.key.budget.releaseResponse(int64(n))
	st.unacked += int64(n)
	var upd int64
	if st.unacked >= h2UpWindow/4 && !st.end && c.streams[st.id] == st {
		upd = st.unacked
		st.held -= upd
		st.unacked = 0
	}
	c.mu.Unlock()
	if upd > 0 {
		c.writeWindowUpdate(st.id, upd)
	}
	return n, nil
}

// close ends the stream, resetting it when either side is still open,
// gives its slot back and recycles it. Nothing may use st afterwards.
func (st *h2UpStream) close() {
	c := st.c
	c.mu.Lock()
	open := st.id != 0 && c.streams[st.id] == st
	if open {
		delete(c.streams, st.id)
	}
	c.mu.Unlock()
	if open {
		c.writeReset(st.id, http2.ErrCodeCancel)
	}
	c.mu.Lock()
	c.pool.key.budget.releaseResponse(st.charged) // what no client took
	c.mu.Unlock()
	c.release()
	rbuf := st.rbuf[:0]
	if cap(rbuf) > 32<<10 {
		rbuf = nil
	}
	*st = h2UpStream{rwake: st.rwake, wwake: st.wwake, rtimer: st.rtimer, wtimer: st.wtimer, rbuf: rbuf,
		fields: keptFields(st.fields), trailer: keptFields(st.trailer)}
	select {
	case <-st.rwake:
	default:
	}
	select {
	case <-st.wwake:
	default:
	}
	h2UpStreams.Put(st)
}

// keptFields empties a recycled stream's fields, or drops them when
// they are many: the reader decodes the next response's into them.
func keptFields(f []hpack.HeaderField) []hpack.HeaderField {
	if cap(f) > 32 {
		return nil
	}
	clear(f[:cap(f)])
	return f[:0]
}

// appendIndexedName appends a literal field without indexing whose name
// is entry idx of the static table (RFC 7541 section 6.2.2).
func appendIndexedName(dst []byte, idx uint64, value ...string) []byte {
	dst = appendHpackInt(dst, 0, 4, idx)
	n := 0
	for _, v := range value {
		n += len(v)
	}
	dst = appendHpackInt(dst, 0, 7, uint64(n))
	for _, v := range value {
		dst = append(dst, v...)
	}
	return dst
}

// appendPseudo appends the request pseudo-header fields.
func appendPseudo(dst []byte, method, scheme, authority, path, query string) []byte {
	switch method {
	case "GET":
		dst = append(dst, 0x82)
	case "POST":
		dst = append(dst, 0x83)
	default:
		dst = appendIndexedName(dst, 2, method)
	}
	if scheme == "https" {
		dst = append(dst, 0x87)
	} else {
		dst = append(dst, 0x86)
	}
	if authority != "" {
		dst = appendIndexedName(dst, 1, authority)
	}
	if path == "/" && query == "" {
		return append(dst, 0x84)
	}
	return appendIndexedName(dst, 4, path, query)
}
