package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// The HTTP/2 server. One goroutine per connection reads and dispatches
// frames; each request runs on a goroutine of its own only while it waits
// on a member. Writes from every goroutine go through one locked framer
// and one buffered writer; the last writer out flushes, so responses that
// finish together leave in one write(2).

const (
	h2InitialWindow  = 65535   // stream window advertised (the default: no setting sent)
	h2ConnWindow     = 1 << 20 // connection receive window
	h2MaxFrame       = 16384   // SETTINGS_MAX_FRAME_SIZE advertised (the default)
	h2MaxContinue    = 16      // CONTINUATION frames allowed in one header block
	h2BadHeaderLimit = 8       // oversized header lists before a GOAWAY
	h2WriteBufSize   = 32 << 10
	h2ReadBufSize    = 32 << 10
	h2MaxWindow      = 1<<31 - 1
)

// errH2Calm is returned by the frame reader when a client exceeds a
// budget; the connection then gets a GOAWAY with ENHANCE_YOUR_CALM.
var errH2Calm = errors.New("http2: client exceeded a frame budget")

// bucket is a token bucket refilled at rate per second up to burst.
type bucket struct {
	rate, burst, tokens float64
	last                int64
}

func (b *bucket) init(rate, burst int) {
	b.rate, b.burst, b.tokens = float64(rate), float64(burst), float64(burst)
}

// take takes one token at time now (UnixNano); false when empty.
func (b *bucket) take(now int64) bool {
	if b.last != 0 {
		b.tokens = min(b.burst, b.tokens+float64(now-b.last)/1e9*b.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// frameScan follows the frame boundaries of what a client sends, below
// the framer, and bounds the CONTINUATION frames of one header block (the
// framer reads them itself; empty ones would otherwise never end).
type frameScan struct {
	r       io.Reader
	hdr     [9]byte
	hn      int
	skip    int
	conts   int
	preface int
	calm    bool
}

func (s *frameScan) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	b := p[:n]
	for len(b) > 0 {
		switch {
		case s.preface > 0:
			k := min(s.preface, len(b))
			s.preface -= k
			b = b[k:]
		case s.skip > 0:
			k := min(s.skip, len(b))
			s.skip -= k
			b = b[k:]
		default:
			k := copy(s.hdr[s.hn:], b)
			s.hn += k
			b = b[k:]
			if s.hn < len(s.hdr) {
				continue
			}
			s.hn = 0
			s.skip = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			switch http2.FrameType(s.hdr[3]) {
			case http2.FrameContinuation:
				s.conts++
				if s.conts > h2MaxContinue {
					s.calm = true
					return n, errH2Calm
				}
			case http2.FrameHeaders:
				s.conts = 0
			}
		}
	}
	return n, err
}

// h2Conn is one HTTP/2 client connection.
type h2Conn struct {
	s      *Server
	hc     *h2conn
	raw    net.Conn // the transport under it, closed to unblock writers
	ctx    context.Context
	cancel context.CancelFunc
	scan   frameScan
	br     *bufio.Reader
	cs     tls.ConnectionState
	// pool is the member pool of the last request the fast path sent
	// (pools.poolOf).
	pool atomic.Pointer[memberPool]

	// Write side (h2Wire), flushed within WriteTimeout.
	h2Wire

	// mu guards the streams, the send windows (h2Flow) and the stream
	// buffers.
	mu      sync.Mutex
	streams map[uint32]*h2Stream
	h2Flow
	closed     bool
	stalled    bool         // a stream waited past WriteTimeout for window
	workers    int          // requests whose handler still runs
	bodyHeld   int          // request body bytes buffered, charged to the tenant
	bodiesDone bool         // the connection ended: bodyHeld was given back
	active     atomic.Int32 // requests whose handler still runs, for unlockW
	free       []*h2Stream
	wg         sync.WaitGroup // streams whose worker has not finished

	maxSeen    atomic.Uint32 // highest client stream id seen
	goAwaySent atomic.Bool
	peerGoAway atomic.Bool
	finished   atomic.Bool // the last frames are out and a FIN follows

	// The tenant's CPU budget (info.CPU): cpuW is what a unit of body
	// bytes counts; outM counts the DATA sent (wmu), inM the DATA read
	// and ctrl the control frames read (the reading goroutine).
	cpuW      int64
	outM, inM meter
	ctrl      int

	// Read side, owned by the reading goroutine.
	recv       h2Recv     // the connection receive window
	recent     [64]uint32 // ids of recently closed streams (c.mu)
	recentN    int
	resets     bucket
	control    bucket
	badHeaders int
	h2Blocks
	idle time.Duration

	// Read deadlines (c.mu): rdl is the one set on the connection (0:
	// none; -1: pinned by stall or linger, left alone); headDL ends an
	// unfinished header block, or the preface and first SETTINGS, at
	// HeaderTimeout after it began; idleAt is when the last stream
	// closed (or the connection began), and the connection ends at
	// idleAt + idle while it has no stream. Control frames move neither.
	rdl    int64
	headDL int64
	idleAt int64
}

// serveH2 serves an HTTP/2 client on a TLS connection that negotiated h2.
func (s *Server) serveH2(ctx context.Context, tc *tls.Conn, info *ConnInfo, client, local netip.AddrPort) {
	s.serveH2Conn(ctx, tc, tc.NetConn(), tc.ConnectionState(), info, client, local)
}

// serveH2Conn serves HTTP/2 on nc, whose transport is raw (nc itself
// without TLS: HTTP/2 with prior knowledge, info.TLS false).
func (s *Server) serveH2Conn(ctx context.Context, nc, raw net.Conn, cs tls.ConnectionState, info *ConnInfo, client, local netip.AddrPort) {
	idle := info.IdleTimeout
	if idle <= 0 {
		idle = s.cfg.IdleTimeout
	}
	c := &h2Conn{
		s: s, raw: raw, idle: idle,
		hc: &h2conn{
			s: s, info: info, client: client,
			ca:    newClientAddrs(client, info.TLS, s.trusted(info)),
			scope: &connScope{s: s, pp: proxyAddrs{src: client, dst: local}, cpu: info.CPU, cpuW: cpuWeight(info)},
		},
		streams: make(map[uint32]*h2Stream),
		h2Flow:  newH2Flow(),
		recv:    h2Recv{left: h2ConnWindow},
		cs:      cs,
		cpuW:    cpuWeight(info),
	}
	c.hc.ca.clientCert(info)
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	now := nowNano()
	c.idleAt, c.headDL = now, now+int64(s.cfg.HeaderTimeout)
	c.scan = frameScan{r: nc, preface: len(http2.ClientPreface)}
	c.br = bufio.NewReaderSize(&c.scan, h2ReadBufSize)
	c.initWire(nc, c.br, s.cfg.MaxHeaderBytes, s.cfg.WriteTimeout, &c.active)
	c.initBlocks(s.cfg.MaxHeaderBytes)
	c.resets.init(s.cfg.H2MaxResetsPerSecond, s.cfg.H2ResetBurst)
	c.control.init(s.cfg.H2MaxControlFramesPerSecond, 2*s.cfg.H2MaxControlFramesPerSecond)
	stop := context.AfterFunc(ctx, c.drain)
	defer stop()
	c.serve()
	c.hc.scope.close()
}

// drain sends a GOAWAY: open streams finish, new ones are refused.
func (c *h2Conn) drain() {
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteGoAway(c.lastID(), http2.ErrCodeNo, nil)
		c.goAwaySent.Store(true)
	}
	c.unlockW()
	c.closeIfDone()
}

// lastID is the last stream the client opened, for GOAWAY.
func (c *h2Conn) lastID() uint32 { return c.maxSeen.Load() }

// serve reads frames until the connection ends.
func (c *h2Conn) serve() {
	defer c.shutdown()
	var preface [len(http2.ClientPreface)]byte
	c.armRead() // the preface and the first SETTINGS: HeaderTimeout
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		c.lockW()
		c.werr = c.fr.WriteGoAway(0, http2.ErrCodeProtocol, nil)
		c.unlockW()
		return
	}
	c.lockW()
	c.werr = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.cfg.H2MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(c.s.cfg.MaxHeaderBytes)},
	)
	if c.werr == nil {
		c.werr = c.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	}
	c.unlockW()
	first := true
	for {
		c.armRead()
		fh, err := c.fr.ReadFrameHeader()
		if err != nil {
			c.readError(err)
			return
		}
		if fh.Type == http2.FrameHeaders && (!fh.Flags.Has(http2.FlagHeadersEndHeaders) || c.br.Buffered() < int(fh.Length)) {
			// A header block begins that may wait on the client: it
			// has HeaderTimeout to end, its frames' payloads included.
			// (A whole block already read needs no deadline.)
			c.beginHead()
		}
		var code http2.ErrCode
		if !first && plainHeaders(fh) {
			// The common HEADERS frame is read here: the framer would
			// allocate a HeadersFrame for it.
			frag, err := c.readPayload(c.br, fh.Length)
			if err != nil {
				c.readError(err)
				return
			}
			code = c.beginBlock(fh.StreamID, fh.Flags.Has(http2.FlagHeadersEndStream), false, 0, frag, fh.Flags.Has(http2.FlagHeadersEndHeaders))
		} else {
			f, err := c.fr.ReadFrameForHeader(fh)
			if err != nil {
				c.readError(err)
				return
			}
			if first {
				if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
					c.goAway(http2.ErrCodeProtocol)
					return
				}
				first = false
				c.endHead()
			}
			code = c.dispatch(f)
		}
		if fh.Flags.Has(http2.FlagHeadersEndHeaders) && (fh.Type == http2.FrameHeaders || fh.Type == http2.FrameContinuation) {
			c.endHead()
		}
		if code == 0 {
			c.charge(fh)
		}
		if code != 0 {
			c.goAway(code)
			return
		}
		if c.wfail.Load() {
			if c.finished.Load() {
				c.linger()
			}
			return
		}

	}
}

// charge counts a frame the client sent in its tenant's CPU budget, and
// waits there while the tenant is over it (this connection reads no
// more meanwhile): a DATA frame's bytes as body bytes; a PING or a
// SETTINGS that the server answers WorkAnsweredFrame; any other frame
// that carries neither a request nor a body byte (WINDOW_UPDATE,
// RST_STREAM, PRIORITY, CONTINUATION, an empty DATA, an ACK, an unknown
// type) as a control frame, a unit per WorkControlFrames of them. A
// HEADERS frame's request counts where it is routed.
func (c *h2Conn) charge(fh http2.FrameHeader) {
	cpu := c.hc.info.CPU
	if cpu == nil {
		return
	}
	switch {
	case fh.Type == http2.FrameData && fh.Length > 0:
		c.inM.add(cpu, c.cpuW, int64(fh.Length))
	case fh.Type == http2.FrameHeaders:
	case (fh.Type == http2.FramePing || fh.Type == http2.FrameSettings) && !fh.Flags.Has(http2.FlagPingAck):
		// FlagSettingsAck is the same bit.
		cpu.Relay(WorkAnsweredFrame)
	default:
		if c.ctrl++; c.ctrl >= WorkControlFrames {
			c.ctrl = 0
			cpu.Relay(1)
		}
	}
}

// dispatch handles a frame the framer read. It returns a connection error
// code, or 0 to go on.
func (c *h2Conn) dispatch(f http2.Frame) (code http2.ErrCode) {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		code = c.startBlock(f)
	case *http2.ContinuationFrame:
		code = c.continueBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.DataFrame:
		code = c.onData(f)
	case *http2.SettingsFrame:
		code = c.onSettings(f)
	case *http2.WindowUpdateFrame:
		code = c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		code = c.onReset(f)
	case *http2.PingFrame:
		if !c.control.take(nowNano()) {
			code = http2.ErrCodeEnhanceYourCalm
		} else if !f.IsAck() {
			c.writePing(true, f.Data)
		}
	case *http2.PriorityFrame:
		switch {
		case !c.control.take(nowNano()):
			code = http2.ErrCodeEnhanceYourCalm
		case f.StreamDep == f.StreamID:
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.GoAwayFrame:
		c.peerGoAway.Store(true)
		c.closeIfDone()
	case *http2.PushPromiseFrame:
		code = http2.ErrCodeProtocol
	default:
		// Unknown frame types are ignored but counted.
		if !c.control.take(nowNano()) {
			code = http2.ErrCodeEnhanceYourCalm
		}
	}
	return code
}

// armRead sets the read deadline before a frame: the end of an
// unfinished header block, or the idle deadline while no stream is open;
// none while requests are in flight (their own timeouts apply) and no
// header block is open. Only a change costs a SetReadDeadline.
func (c *h2Conn) armRead() {
	c.mu.Lock()
	c.setReadDL()
	c.mu.Unlock()
}

// setReadDL sets the read deadline that the state asks for. c.mu held.
func (c *h2Conn) setReadDL() {
	if c.rdl < 0 {
		return
	}
	want := c.headDL
	if len(c.streams) == 0 {
		if d := c.idleAt + int64(c.idle); want == 0 || d < want {
			want = d
		}
	}
	if want == c.rdl {
		return
	}
	c.rdl = want
	if want == 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
		return
	}
	_ = c.nc.SetReadDeadline(time.Unix(0, want))
}

// beginHead starts the HeaderTimeout of a header block, unless one runs.
func (c *h2Conn) beginHead() {
	c.mu.Lock()
	if c.headDL == 0 {
		c.headDL = nowNano() + int64(c.s.cfg.HeaderTimeout)
		c.setReadDL()
	}
	c.mu.Unlock()
}

// endHead ends the HeaderTimeout of a header block (or of the preface).
func (c *h2Conn) endHead() {
	c.mu.Lock()
	c.headDL = 0
	c.mu.Unlock()
}

// pinRead sets a read deadline that the stream bookkeeping leaves alone.
func (c *h2Conn) pinRead(t time.Time) {
	c.mu.Lock()
	c.rdl = -1
	_ = c.nc.SetReadDeadline(t)
	c.mu.Unlock()
}

func (c *h2Conn) openStreams() int {
	c.mu.Lock()
	n := len(c.streams)
	c.mu.Unlock()
	return n
}

// readError ends the connection after a failed frame read.
func (c *h2Conn) readError(err error) {
	var ce http2.ConnectionError
	var se http2.StreamError
	c.mu.Lock()
	stalled := c.stalled
	c.mu.Unlock()
	switch {
	case stalled:
		c.linger()
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.timedOut()
	case c.scan.calm || errors.Is(err, errH2Calm):
		c.goAway(http2.ErrCodeEnhanceYourCalm)
	case errors.As(err, &ce):
		c.goAway(http2.ErrCode(ce))
	case errors.As(err, &se):
		// Only returned for frames the framer could not hand over.
		c.goAway(se.Code)
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize)
	}
}

// Debug data of the GOAWAY frames that end a connection on a timeout.
var (
	h2HeaderTimeoutDebug = []byte("header timeout")
	h2IdleTimeoutDebug   = []byte("idle timeout")
)

// timedOut ends a connection whose read deadline passed: a header block
// (or the preface and SETTINGS) unfinished after HeaderTimeout gets a
// GOAWAY with ENHANCE_YOUR_CALM, an idle connection one with NO_ERROR.
func (c *h2Conn) timedOut() {
	c.mu.Lock()
	head := c.headDL != 0
	c.mu.Unlock()
	if head {
		c.goAwayDebug(http2.ErrCodeEnhanceYourCalm, h2HeaderTimeoutDebug)
		return
	}
	c.goAwayDebug(http2.ErrCodeNo, h2IdleTimeoutDebug)
}

// goAway sends a GOAWAY with code and lets the client read it.
func (c *h2Conn) goAway(code http2.ErrCode) { c.goAwayDebug(code, nil) }

// goAwayDebug sends a GOAWAY with code and debug data, and lets the
// client read it.
func (c *h2Conn) goAwayDebug(code http2.ErrCode, debug []byte) {
	c.sendGoAway(code, debug)
	c.linger()
}

// sendGoAway sends a GOAWAY with code and debug data now.
func (c *h2Conn) sendGoAway(code http2.ErrCode, debug []byte) {
	c.lockW()
	if c.werr == nil {
		c.werr = c.fr.WriteGoAway(c.lastID(), code, debug)
		c.goAwaySent.Store(true)
		if c.werr == nil {
			c.werr = c.flushLocked() // before the close, whoever else writes
		}
	}
	c.unlockW()
}

// linger reads and discards for a moment so that the close does not
// reset the connection under the last frames.
func (c *h2Conn) linger() {
	c.pinRead(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, c.nc, 1<<20)
}

// shutdown ends every stream and waits for the handlers.
func (c *h2Conn) shutdown() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.streams {
		st.abort(errClientGone)
	}
	c.mu.Unlock()
	c.cancel()
	// Unblock writers stuck on a client that does not read.
	_ = c.raw.Close()
	c.wg.Wait()
	c.releaseBodies()
	_ = c.nc.Close()
}
