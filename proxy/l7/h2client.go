package l7

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 client to h2c and h2 (TLS) members. A member gets a few
// connections, each carrying many streams; one goroutine per connection
// reads frames and hands them to the streams, and every writer goes
// through one locked framer and one buffered writer, the last one out
// flushing (as on the server side).

const (
	h2UpWindow     = 128 << 10 // stream receive window advertised to members
	h2UpConnWindow = 1 << 20   // connection receive window
	h2UpMaxConns   = 4         // connections per member
	h2UpMaxStreams = 128       // streams per connection, whatever the member allows
)

// errH2Refused: the member did not process the stream (REFUSED_STREAM, or
// a GOAWAY below its id); it may be sent again elsewhere.
var errH2Refused = fmt.Errorf("%w: http2 stream refused before processing", ErrUpstreamClosed)

// h2Client holds the HTTP/2 connections to members: the server's shared
// one, or one connection scope's for PROXY protocol members.
type h2Client struct {
	s  *Server
	pp *proxyAddrs

	mu     sync.Mutex
	pools  map[poolKey]*h2Pool
	closed bool
}

func newH2Client(s *Server, pp *proxyAddrs) *h2Client {
	return &h2Client{s: s, pp: pp, pools: make(map[poolKey]*h2Pool)}
}

// h2Pool is the connections to one member.
type h2Pool struct {
	cl      *h2Client
	key     poolKey
	mu      sync.Mutex
	conns   []*h2UpConn
	dialing int
	waiters int
	wake    chan struct{} // closed and replaced when a slot may have freed
	gone    bool          // forgotten by the client: look it up again
}

func (cl *h2Client) pool(key poolKey) (*h2Pool, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return nil, fmt.Errorf("%w: proxy closing", ErrConnect)
	}
	p := cl.pools[key]
	if p == nil {
		p = &h2Pool{cl: cl, key: key, wake: make(chan struct{})}
		cl.pools[key] = p
	}
	return p, nil
}

// reserveFree takes a stream slot on a connection of key's pool that
// has one, without waiting or dialling; nil when none has (acquire).
func (cl *h2Client) reserveFree(key poolKey) *h2UpConn {
	p, err := cl.pool(key)
	if err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return nil
	}
	return p.reserveLocked()
}

// reserveLocked takes a stream slot on the first connection with one.
// p.mu held.
func (p *h2Pool) reserveLocked() *h2UpConn {
	for _, c := range p.conns {
		if c.reserve() {
			return c
		}
	}
	return nil
}

// notify wakes the streams waiting for a slot. p.mu held. A waiter
// counts itself (waiters) before it takes wake, under p.mu: with none,
// the channel stays.
func (p *h2Pool) notify() {
	if p.waiters == 0 {
		return
	}
	close(p.wake)
	p.wake = make(chan struct{})
}

// remove takes c out of the pool; the client forgets an empty pool.
func (p *h2Pool) remove(c *h2UpConn) {
	p.mu.Lock()
	for i, x := range p.conns {
		if x == c {
			n := len(p.conns)
			copy(p.conns[i:], p.conns[i+1:])
			p.conns[n-1] = nil
			p.conns = p.conns[:n-1]
			break
		}
	}
	empty := len(p.conns) == 0 && p.dialing == 0 && p.waiters == 0
	p.notify()
	p.mu.Unlock()
	if !empty {
		return
	}
	cl := p.cl
	cl.mu.Lock()
	p.mu.Lock()
	if len(p.conns) == 0 && p.dialing == 0 && p.waiters == 0 && cl.pools[p.key] == p {
		p.gone = true
		delete(cl.pools, p.key)
	}
	p.mu.Unlock()
	cl.mu.Unlock()
}

// acquire returns a connection to the member with a stream slot reserved
// for the caller, dialling one when every connection is full and fewer
// than h2UpMaxConns exist; otherwise it waits until deadline.
func (cl *h2Client) acquire(ctx context.Context, key poolKey, opts *BackendOptions, deadline time.Time) (*h2UpConn, error) {
	for {
		p, err := cl.pool(key)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		if p.gone {
			p.mu.Unlock()
			continue
		}
		if c := p.reserveLocked(); c != nil {
			p.mu.Unlock()
			return c, nil
		}
		if len(p.conns)+p.dialing < h2UpMaxConns {
			p.dialing++
			p.mu.Unlock()
			c, err := cl.dialConn(ctx, key, opts, p)
			p.mu.Lock()
			p.dialing--
			if err == nil {
				c.reserve()
				p.conns = append(p.conns, c)
			}
			p.notify()
			p.mu.Unlock()
			if err != nil {
				p.remove(nil)
			}
			return c, err
		}
		p.waiters++
		wake := p.wake
		p.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		var werr error
		select {
		case <-wake:
		case <-t.C:
			werr = fmt.Errorf("%w: every http2 stream to the member is busy", ErrUpstreamTimeout)
		case <-ctx.Done():
			werr = fmt.Errorf("%w: %w", ErrUpstreamClosed, ctx.Err())
		}
		t.Stop()
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
		if werr != nil {
			p.remove(nil)
			return nil, werr
		}
	}
}

// close ends every connection: idle ones at once, busy ones after their
// streams.
func (cl *h2Client) close() {
	cl.mu.Lock()
	cl.closed = true
	var all []*h2UpConn
	for _, p := range cl.pools {
		p.mu.Lock()
		all = append(all, p.conns...)
		p.mu.Unlock()
	}
	cl.mu.Unlock()
	for _, c := range all {
		c.drain()
	}
}

// h2UpConn is one HTTP/2 connection to a member.
type h2UpConn struct {
	cl   *h2Client
	pool *h2Pool
	up   *upConn // nc's dial: closing it gives its descriptor back

	// Write side (h2Wire), flushed within BodyTimeout; a failed write
	// kills the connection.
	h2Wire
	inflight atomic.Int32 // streams reserved or open, for unlockW

	// mu guards what follows.
	mu         sync.Mutex
	streams    map[uint32]*h2UpStream
	nextID     uint32
	active     int // streams reserved or open
	maxStreams int // the member's SETTINGS_MAX_CONCURRENT_STREAMS, capped
	h2Flow
	goAway  bool // no new streams: GOAWAY received or sent, ids used up
	dead    error
	idleAt  int64
	probing bool

	ready     chan struct{} // closed at the member's first SETTINGS
	gone      chan struct{} // closed when the reader ends
	closeOnce sync.Once
	idle      *time.Timer
	probe     *time.Timer

	// Read side, owned by the reading goroutine.
	recv h2Recv
	// br is the framer's input, which readPayload and frameBuffered
	// read too.
	br *bufio.Reader
	// late counts the header blocks the member sent for streams this
	// side had ended or reset (onBlock).
	late int64
	// ctrl counts the control frames read and not charged yet, dropM
	// the DATA bytes no stream took (chargeFrame, onData); smallConts
	// the CONTINUATION frames of the block being read that carried
	// less than h2SmallFrame bytes.
	ctrl       int
	dropM      meter
	smallConts int
	// wakes are the streams a response event (head, body bytes,
	// trailers) was read for, not woken yet: they are woken together
	// once no whole frame is left in the read buffer (read), so that a
	// response read at once (HEADERS, DATA and trailers in one read)
	// wakes its request once, not three times.
	wakes []h2Wake
	// The header blocks the member sends (h2Blocks) and the wire bytes
	// of the one being read.
	h2Blocks
	blockWire int64
}

// h2Wake is a stream's wake-up channels: a stream may be recycled
// before the reader wakes it, and its channels stay with it (a late
// wake is one its waits re-check).
type h2Wake struct{ r, w chan struct{} }

// wakeLater queues the wake of st for when the read buffer holds no
// whole frame. c.mu held; on the reading goroutine.
func (c *h2UpConn) wakeLater(st *h2UpStream) {
	if n := len(c.wakes); n > 0 && c.wakes[n-1].r == st.rwake {
		return
	}
	c.wakes = append(c.wakes, h2Wake{st.rwake, st.wwake})
}

// send wakes the response reader and the body writer of a stream.
func (w h2Wake) send() {
	select {
	case w.r <- struct{}{}:
	default:
	}
	select {
	case w.w <- struct{}{}:
	default:
	}
}

// wakeQueued wakes the queued streams.
func (c *h2UpConn) wakeQueued() {
	for i, w := range c.wakes {
		w.send()
		c.wakes[i] = h2Wake{}
	}
	c.wakes = c.wakes[:0]
}

// frameBuffered reports whether the read buffer holds the next frame
// whole (a HEADERS frame that ends its header block), so that reading
// it does not wait on the member.
func (c *h2UpConn) frameBuffered() bool {
	r := c.br
	if r.Buffered() < 9 {
		return false
	}
	h, _ := r.Peek(9)
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if http2.FrameType(h[3]) == http2.FrameHeaders && http2.Flags(h[4])&http2.FlagHeadersEndHeaders == 0 {
		return false
	}
	return r.Buffered() >= 9+n
}

// maxLateHeaderBlocks is how many header blocks beyond two per stream
// opened a member connection may send for streams this side had ended or
// reset before the connection ends (ENHANCE_YOUR_CALM).
const maxLateHeaderBlocks = 16

// h2SmallFrame: a member's header block may go on in at most
// h2MaxContinue CONTINUATION frames of fewer bytes than this (an encoder
// splits a block into frames of the largest size, only its last frame is
// short); one more ends the connection (ENHANCE_YOUR_CALM), as a block of
// empty frames would never end.
const h2SmallFrame = 1024

// h2BlockSlack: a member's header block may take twice MaxHeaderBytes on
// the wire and this much more (its frames' headers); past that its bytes
// decode to nothing a response carries, and the connection ends
// (ENHANCE_YOUR_CALM).
const h2BlockSlack = 4096

// dialConn connects to a member, sends the preface and waits for the
// member's SETTINGS.
func (cl *h2Client) dialConn(ctx context.Context, key poolKey, opts *BackendOptions, p *h2Pool) (*h2UpConn, error) {
	s := cl.s
	u, err := s.dial(ctx, key, opts, cl.pp)
	if err != nil {
		return nil, err
	}
	c := &h2UpConn{
		cl: cl, pool: p, up: u,
		streams:    make(map[uint32]*h2UpStream),
		nextID:     1,
		maxStreams: h2UpMaxStreams,
		h2Flow:     newH2Flow(),
		recv:       h2Recv{left: h2UpConnWindow},
		ready:      make(chan struct{}), gone: make(chan struct{}),
	}
	c.br = bufio.NewReaderSize(u.nc, h2ReadBufSize)
	c.initWire(u.nc, c.br, s.cfg.MaxHeaderBytes, s.cfg.BodyTimeout, &c.inflight)
	c.failed = c.kill
	// Before the first write: a failed write kills the connection, which
	// stops the timer.
	c.idle = time.AfterFunc(time.Hour, c.idleCheck)
	c.idle.Stop()
	c.initBlocks(s.cfg.MaxHeaderBytes)
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = s.cfg.ConnectTimeout
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	c.lockW()
	_, c.werr = c.bw.WriteString(http2.ClientPreface)
	if c.werr == nil {
		c.werr = c.fr.WriteSettings(
			http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2UpWindow},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(s.cfg.MaxHeaderBytes)},
		)
	}
	if c.werr == nil {
		c.werr = c.fr.WriteWindowUpdate(0, h2UpConnWindow-65535)
	}
	c.unlockW()
	go c.readLoop()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.ready:
		return c, nil
	case <-c.gone:
		c.mu.Lock()
		err = fmt.Errorf("%w: http2 connection ended before SETTINGS: %w", ErrConnect, c.dead)
		c.mu.Unlock()
		return nil, err
	case <-t.C:
		err = fmt.Errorf("%w: %w: no http2 SETTINGS from the member", ErrConnect, ErrUpstreamTimeout)
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrConnect, ctx.Err())
	}
	c.kill(err)
	// A failure before SETTINGS leaves nothing for the reader to fail.
	c.mu.Lock()
	if c.dead != nil && !errors.Is(err, ErrUpstreamTimeout) && ctx.Err() == nil {
		err = fmt.Errorf("%w: %w", ErrConnect, c.dead)
	}
	c.mu.Unlock()
	return nil, err
}

// reserve takes a stream slot. The pool's mutex is held.
func (c *h2UpConn) reserve() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil || c.goAway || c.active >= c.maxStreams {
		return false
	}
	c.active++
	c.inflight.Add(1)
	c.idle.Stop()
	return true
}

// release gives a stream slot back.
func (c *h2UpConn) release() {
	c.mu.Lock()
	c.active--
	c.inflight.Add(-1)
	last := c.active == 0
	done := last && (c.goAway || c.dead != nil)
	if last {
		c.idleAt = nowNano()
		c.idle.Reset(c.cl.s.cfg.UpstreamIdleTimeout)
	}
	c.mu.Unlock()
	if done {
		c.shut()
	}
	p := c.pool
	p.mu.Lock()
	p.notify()
	p.mu.Unlock()
}

// idleCheck closes a connection left without streams.
func (c *h2UpConn) idleCheck() {
	c.mu.Lock()
	idle := c.active == 0 && nowNano()-c.idleAt >= int64(c.cl.s.cfg.UpstreamIdleTimeout)-int64(time.Millisecond)
	if idle {
		c.goAway = true
	}
	c.mu.Unlock()
	if idle {
		c.pool.remove(c)
		c.shut()
	}
}

// drain stops new streams and closes the connection after the open ones.
func (c *h2UpConn) drain() {
	c.mu.Lock()
	c.goAway = true
	idle := c.active == 0
	c.mu.Unlock()
	c.pool.remove(c)
	if idle {
		c.shut()
	}
}

// shut says goodbye and closes the connection; the reader fails what is
// left.
func (c *h2UpConn) shut() {
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}
	c.unlockW()
	c.kill(net.ErrClosed)
}

// kill closes the connection; the reader then fails every open stream.
func (c *h2UpConn) kill(err error) {
	c.mu.Lock()
	if c.dead == nil {
		c.dead = err
	}
	c.mu.Unlock()
	c.closeOnce.Do(func() {
		c.idle.Stop()
		c.up.close() // closes nc and gives its descriptor back
	})
}

// writeBlock writes a header block as HEADERS and CONTINUATION frames.
// wmu held.
func (c *h2UpConn) writeBlock(id uint32, b []byte, end bool, max int) error {
	c.werr = writeHeaderBlock(c.fr, id, b, end, max)
	return c.werr
}

// readLoop reads the member's frames until the connection ends.
func (c *h2UpConn) readLoop() {
	defer close(c.gone)
	err := c.read()
	c.kill(err)
	c.pool.remove(c)
	c.mu.Lock()
	if c.dead != nil {
		err = c.dead
	}
	var rerr error
	switch {
	case errors.Is(err, ErrUpstreamProtocol), errors.Is(err, ErrUpstreamTimeout), errors.Is(err, ErrConnect):
		rerr = err
	case isTimeout(err):
		rerr = fmt.Errorf("%w: %w", ErrUpstreamTimeout, err)
	default:
		rerr = fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
	}
	for id, st := range c.streams {
		if !st.end {
			st.fail(rerr)
		} else {
			st.stopSend = true
			st.signal()
		}
		delete(c.streams, id)
	}
	c.mu.Unlock()
}

// read dispatches frames; it returns why the connection ended.
func (c *h2UpConn) read() error {
	defer c.wakeQueued()
	first := true
	for {
		if len(c.wakes) > 0 && !c.frameBuffered() {
			c.wakeQueued()
		}
		fh, err := c.fr.ReadFrameHeader()
		if err != nil {
			return c.readError(err)
		}
		if !first {
			// The member's first SETTINGS ends the dial, within its
			// connect timeout: it is not waited for in the budget.
			c.chargeFrame(fh)
		}
		if !first && plainHeaders(fh) {
			// The common HEADERS frame is read here: the framer would
			// allocate a HeadersFrame for it.
			frag, err := c.readPayload(c.br, fh.Length)
			if err != nil {
				return err
			}
			if code := c.beginBlock(fh.StreamID, fh.Flags.Has(http2.FlagHeadersEndStream), frag, fh.Flags.Has(http2.FlagHeadersEndHeaders), fh.Length); code != 0 {
				c.goAwayWith(code)
				return fmt.Errorf("%w: http2 connection error %v", ErrUpstreamProtocol, code)
			}
			continue
		}
		f, err := c.fr.ReadFrameForHeader(fh)
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A malformed frame of a stream: the stream fails, the
				// connection goes on.
				c.resetStream(se.StreamID, se.Code, fmt.Errorf("%w: %w", ErrUpstreamProtocol, se))
				continue
			}
			return c.readError(err)
		}
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				return fmt.Errorf("%w: member did not start with SETTINGS", ErrUpstreamProtocol)
			}
		}
		switch f.(type) {
		case *http2.HeadersFrame, *http2.ContinuationFrame, *http2.DataFrame:
		default:
			// A frame that may have this goroutine write (an ACK, a
			// reset): what it read before is woken first, not kept
			// behind a writer that waits on the member.
			c.wakeQueued()
		}
		var code http2.ErrCode
		switch f := f.(type) {
		case *http2.HeadersFrame:
			code = c.beginBlock(f.StreamID, f.StreamEnded(), f.HeaderBlockFragment(), f.HeadersEnded(), fh.Length)
		case *http2.ContinuationFrame:
			if fh.Length < h2SmallFrame {
				if c.smallConts++; c.smallConts > h2MaxContinue {
					code = http2.ErrCodeEnhanceYourCalm
					break
				}
			}
			code = c.continueBlock(f.HeaderBlockFragment(), f.HeadersEnded(), fh.Length)
		case *http2.DataFrame:
			code = c.onData(f)
		case *http2.SettingsFrame:
			code = c.onSettings(f)
			if first && code == 0 {
				close(c.ready)
				first = false
			}
		case *http2.WindowUpdateFrame:
			code = c.onWindowUpdate(f)
		case *http2.RSTStreamFrame:
			c.onReset(f)
		case *http2.PingFrame:
			if f.IsAck() {
				c.mu.Lock()
				c.probing = false
				c.mu.Unlock()
				continue
			}
			c.writePing(true, f.Data)
		case *http2.GoAwayFrame:
			c.onGoAway(f)
		case *http2.PushPromiseFrame:
			code = http2.ErrCodeProtocol
		}
		if code != 0 {
			c.goAwayWith(code)
			return fmt.Errorf("%w: http2 connection error %v", ErrUpstreamProtocol, code)
		}
	}
}

// readError is why the connection ends after a failed read: a
// connection error the framer found is told to the member.
func (c *h2UpConn) readError(err error) error {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		c.goAwayWith(http2.ErrCode(ce))
		return fmt.Errorf("%w: %w", ErrUpstreamProtocol, err)
	}
	return err
}

// goAwayWith tells the member why the connection ends.
func (c *h2UpConn) goAwayWith(code http2.ErrCode) {
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteGoAway(0, code, nil)
	}
	c.unlockW()
}

// resetStream fails a stream and sends RST_STREAM with code.
func (c *h2UpConn) resetStream(id uint32, code http2.ErrCode, err error) {
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		st.fail(err)
		delete(c.streams, id)
	}
	c.mu.Unlock()
	c.writeReset(id, code)
}

// malformedLocked ends the stream id of a member's malformed response
// (why): the request fails with ErrUpstreamProtocol and the member's stream
// is reset. c.mu is held, and released while the reset is written.
func (c *h2UpConn) malformedLocked(st *h2UpStream, id uint32, why string) http2.ErrCode {
	st.fail(fmt.Errorf("%w: %s", ErrUpstreamProtocol, why))
	delete(c.streams, id)
	c.mu.Unlock()
	c.resetStream(id, http2.ErrCodeProtocol, nil)
	c.mu.Lock()
	return 0
}

// beginBlock begins the header block of stream id with the fragment of
// its HEADERS frame, of length bytes.
func (c *h2UpConn) beginBlock(id uint32, end bool, frag []byte, ended bool, length uint32) http2.ErrCode {
	c.begin(id, end, c.cl.s.cfg.MaxHeaderBytes)
	c.blockWire, c.smallConts = 0, 0
	return c.continueBlock(frag, ended, length)
}

// continueBlock decodes a fragment of the header block, from a frame of
// length bytes; at its end the block is handled (onBlock).
func (c *h2UpConn) continueBlock(frag []byte, ended bool, length uint32) http2.ErrCode {
	c.blockWire += int64(length) + 9
	if c.blockWire > 2*int64(c.cl.s.cfg.MaxHeaderBytes)+h2BlockSlack {
		// Its fields are bounded (MaxHeaderBytes, each counted with
		// the 32 bytes of RFC 7541 section 4.1, more than a literal's
		// encoding adds), not the bytes that decode to none.
		return http2.ErrCodeEnhanceYourCalm
	}
	if code := c.decode(frag, ended); code != 0 || !ended {
		return code
	}
	return c.onBlock(&c.head, c.blockWire)
}

// onBlock takes a header block the member sent in wire bytes (its
// HEADERS and CONTINUATION frames). Its fields are copied to the
// stream: the next block reuses h's.
func (c *h2UpConn) onBlock(h *h2Head, wire int64) http2.ErrCode {
	id := h.id
	if id%2 == 0 {
		return http2.ErrCodeProtocol
	}
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st == nil {
		next := c.lastOpened()
		if id >= next {
			return http2.ErrCodeProtocol
		}
		// A stream this side ended or reset: the member may have sent
		// its head and trailers before it saw that. More than two
		// blocks a stream opened is a member that has the proxy decode
		// header blocks for no request, which no tenant is charged for:
		// the connection ends.
		c.late++
		if c.late > 2*int64(next/2)+maxLateHeaderBlocks {
			return http2.ErrCodeEnhanceYourCalm
		}
		return 0
	}
	if h.invalid {
		// A field broke the rules of RFC 9113 section 8.2: the
		// response is malformed, the connection goes on.
		c.resetStream(id, http2.ErrCodeProtocol, fmt.Errorf("%w: malformed header field in the response", ErrUpstreamProtocol))
		return 0
	}
	if h.truncated {
		c.resetStream(id, http2.ErrCodeCancel, fmt.Errorf("%w: response head over the size limit", ErrUpstreamProtocol))
		return 0
	}
	// Pseudo-fields come first (h2Blocks.emit).
	pseudo := 0
	for pseudo < len(h.fields) && h.fields[pseudo].IsPseudo() {
		pseudo++
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[id] != st {
		// Its request ended it meanwhile, and st may serve another
		// one now: a late block.
		c.late++
		if c.late > 2*int64(c.nextID/2)+maxLateHeaderBlocks {
			return http2.ErrCodeEnhanceYourCalm
		}
		return 0
	}
	switch {
	case st.end:
		return http2.ErrCodeStreamClosed
	case !st.gotHead:
		// A response head has one pseudo-field, :status (RFC 9113
		// section 8.3.2).
		status := 0
		if pseudo == 1 && h.fields[0].Name == ":status" {
			status = parseStatus(h.fields[0].Value)
		}
		if status < 100 || status > 999 {
			return c.malformedLocked(st, id, "bad :status")
		}
		if status < 200 {
			if h.end {
				st.fail(fmt.Errorf("%w: stream ended on an informational status", ErrUpstreamProtocol))
				delete(c.streams, id)
			}
			// Informational: not relayed, but read and decoded for the
			// request's tenant, which awaitHead charges.
			st.unsent += interimBytes(h.fields, wire)
			select {
			case st.rwake <- struct{}{}:
			default:
			}
			return 0
		}
		st.status, st.gotHead = status, true
		st.fields = append(st.fields[:0], h.fields[pseudo:]...)
		// Its fields are bounded (MaxHeaderBytes), not the frames they
		// come in: a block may go on in CONTINUATION frames that decode
		// to no field.
		st.unsent += wire
	case !h.end:
		return c.malformedLocked(st, id, "trailers without END_STREAM")
	case pseudo > 0:
		// Malformed trailers (RFC 9113 section 8.1): the response is
		// broken, not relayed whole without them.
		return c.malformedLocked(st, id, "pseudo-field in trailers")
	default:
		st.trailer = append(st.trailer[:0], h.fields...)
		st.unsent += wire
	}
	if h.end {
		st.end = true
		c.closeIfDoneLocked(st)
	}
	c.wakeLater(st)
	return 0
}

// interimBytes is what an interim response's header block counts: its
// wire bytes (HEADERS and CONTINUATION frames, which may carry bytes that
// decode to no field, as dynamic table size updates), or those of its
// fields as HTTP/1.1 lines when they decode to more (a field from the
// dynamic table costs its decoded length).
func interimBytes(fields []hpack.HeaderField, wire int64) int64 {
	var decoded int64
	for _, hf := range fields {
		decoded += int64(len(hf.Name) + len(": \r\n") + len(hf.Value))
	}
	return max(wire, decoded)
}

// lastOpened is the next stream id to open: ids below it were used.
func (c *h2UpConn) lastOpened() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextID
}

// closeIfDoneLocked forgets a stream closed both ways. c.mu held.
func (c *h2UpConn) closeIfDoneLocked(st *h2UpStream) {
	if st.end && st.sentEnd && c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
}

// parseStatus parses a three-digit status; 0 when it is not one.
func parseStatus(v string) int {
	if len(v) != 3 {
		return 0
	}
	n := 0
	for i := 0; i < 3; i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0
		}
		n = n*10 + int(v[i]-'0')
	}
	return n
}

func (c *h2UpConn) onData(f *http2.DataFrame) http2.ErrCode {
	id := f.StreamID
	n := int64(f.Length)
	if !c.recv.take(n) {
		return http2.ErrCodeFlowControl
	}
	data := f.Data()
	c.mu.Lock()
	st := c.streams[id]
	// dropped is the bytes read that no client takes: a frame no stream
	// takes, or a frame's padding.
	dropped := n
	switch {
	case st == nil:
		c.mu.Unlock()
		if id >= c.lastOpened() || id%2 == 0 {
			return http2.ErrCodeProtocol
		}
	case st.end || !st.gotHead:
		c.mu.Unlock()
		c.resetStream(id, http2.ErrCodeStreamClosed, fmt.Errorf("%w: DATA out of place", ErrUpstreamProtocol))
	case st.held+n > h2UpWindow:
		c.mu.Unlock()
		c.resetStream(id, http2.ErrCodeFlowControl, fmt.Errorf("%w: member overran the stream window", ErrUpstreamProtocol))
	case !c.pool.key.budget.holdResponse(int64(len(data))):
		// The tenant's buffered responses are at their bound: this
		// stream ends, and what it held is given back at once.
		c.pool.key.budget.releaseResponse(st.charged)
		st.charged, st.rbuf, st.rr = 0, st.rbuf[:0], 0
		c.mu.Unlock()
		c.resetStream(id, http2.ErrCodeEnhanceYourCalm, errTenantResponses)
	default:
		dropped = n - int64(len(data))
		st.charged += int64(len(data))
		st.held += n
		// Padding goes back to the stream window with the next update.
		st.unacked += n - int64(len(data))
		st.rbuf = append(st.rbuf, data...)
		if f.StreamEnded() {
			st.end = true
			c.closeIfDoneLocked(st)
		}
		c.wakeLater(st)
		c.mu.Unlock()
	}
	if dropped > 0 {
		// Bytes no client will be charged for as it takes them: the
		// member's tenant pays for them here (they were read, and their
		// window is given back), and for a frame no stream takes as for
		// a control frame too (chargeFrame passed it as body bytes).
		u := c.dropM.take(dropped) * c.cpuWeight()
		if dropped == n {
			u += c.countControl()
		}
		c.relay(u)
	}
	if c.recv.due(h2UpConnWindow) {
		c.wakeQueued() // before the WINDOW_UPDATE's write
	}
	c.recv.refund(&c.h2Wire, h2UpConnWindow)
	return 0
}

// chargeFrame counts a frame the member sent in its tenant's CPU budget
// (MemberBudget.cpu) and waits there while the tenant is over it: this
// connection, which only that tenant's requests use, reads no more
// meanwhile. A PING or a SETTINGS the proxy answers counts
// WorkAnsweredFrame; any other frame that carries neither a response
// head nor body bytes (WINDOW_UPDATE, RST_STREAM, PRIORITY, CONTINUATION,
// an empty DATA, an ACK, GOAWAY, an unknown type) a unit per
// WorkControlFrames of them. A response's head and body bytes count where
// they are relayed (awaitHead, the client connection's meter); the bytes
// of DATA that no stream takes, and padding, in onData.
func (c *h2UpConn) chargeFrame(fh http2.FrameHeader) {
	if c.pool.key.budget.tenantCPU() == nil {
		return
	}
	switch {
	case fh.Type == http2.FrameData && fh.Length > 0, fh.Type == http2.FrameHeaders:
	case (fh.Type == http2.FramePing || fh.Type == http2.FrameSettings) && !fh.Flags.Has(http2.FlagPingAck):
		// FlagSettingsAck is the same bit.
		c.relay(WorkAnsweredFrame)
	default:
		c.relay(c.countControl())
	}
}

// countControl counts a control frame and returns the units it completes
// (a unit per WorkControlFrames).
func (c *h2UpConn) countControl() int64 {
	if c.ctrl++; c.ctrl < WorkControlFrames {
		return 0
	}
	c.ctrl = 0
	return 1
}

// relay charges units to the member's tenant, and waits there while the
// tenant is over its budget, unless the connection is dead or its PING
// probe is out (the member's answer must not be held past the probe's
// timeout). What was read before is woken first, not kept behind a wait.
func (c *h2UpConn) relay(units int64) {
	cpu := c.pool.key.budget.tenantCPU()
	if units <= 0 || cpu == nil {
		return
	}
	c.mu.Lock()
	skip := c.dead != nil || c.probing
	c.mu.Unlock()
	if skip {
		return
	}
	c.wakeQueued()
	cpu.Relay(units)
}

// cpuWeight is the units of work a unit of bytes read off the member
// counts: WorkTLSBytes over TLS, else 1.
func (c *h2UpConn) cpuWeight() int64 {
	if c.pool.key.proto == H2TLS {
		return WorkTLSBytes
	}
	return 1
}

func (c *h2UpConn) onSettings(f *http2.SettingsFrame) http2.ErrCode {
	if f.IsAck() {
		return 0
	}
	code := answerSettings(&c.h2Wire, &c.mu, f, &c.h2Flow, c.streams, func(s http2.Setting) {
		if s.ID == http2.SettingMaxConcurrentStreams {
			c.maxStreams = int(min(s.Val, h2UpMaxStreams))
		}
	})
	if code != 0 {
		return code
	}
	if p := c.pool; p != nil {
		p.mu.Lock()
		p.notify() // more streams may be allowed now
		p.mu.Unlock()
	}
	return 0
}

func (c *h2UpConn) onWindowUpdate(f *http2.WindowUpdateFrame) http2.ErrCode {
	c.mu.Lock()
	code, _, overflow := addWindow(&c.h2Flow, c.streams, f.StreamID, int64(f.Increment))
	c.mu.Unlock()
	if overflow {
		c.resetStream(f.StreamID, http2.ErrCodeFlowControl, fmt.Errorf("%w: stream window overflow", ErrUpstreamProtocol))
	}
	return code
}

func (c *h2UpConn) onReset(f *http2.RSTStreamFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[f.StreamID]
	if st == nil {
		return
	}
	delete(c.streams, f.StreamID)
	switch {
	case st.end:
		// The response is complete; the member wants no more body.
		st.stopSend = true
		st.signal()
	case f.ErrCode == http2.ErrCodeRefusedStream && !st.gotHead:
		st.fail(errH2Refused)
	default:
		st.fail(fmt.Errorf("%w: member reset the stream (%v)", ErrUpstreamClosed, f.ErrCode))
	}
}

func (c *h2UpConn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	c.goAway = true
	for id, st := range c.streams {
		if id > f.LastStreamID {
			st.fail(errH2Refused)
			delete(c.streams, id)
		}
	}
	c.mu.Unlock()
	c.pool.remove(c)
}

// probeDead checks with a PING whether a connection whose member stopped
// answering is still alive, and closes it when the PING goes unanswered.
func (c *h2UpConn) probeDead() {
	c.mu.Lock()
	if c.probing || c.dead != nil {
		c.mu.Unlock()
		return
	}
	c.probing = true
	c.mu.Unlock()
	c.writePing(false, [8]byte{'p', 'r', 'o', 'b', 'e'})
	timeout := c.cl.s.cfg.ConnectTimeout
	c.probe = time.AfterFunc(timeout, func() {
		c.mu.Lock()
		dead := c.probing
		c.mu.Unlock()
		if dead {
			c.kill(fmt.Errorf("%w: no answer to PING", ErrUpstreamTimeout))
		}
	})
}
