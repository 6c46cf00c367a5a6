package l7

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// What the HTTP/2 server's connections (h2Conn) and the client's (h2UpConn)
// do alike with frames: the write side, the flow-control windows, and the
// peer's SETTINGS, WINDOW_UPDATE and PING. What differs stays with each:
// the server's frame budgets, stream ids and GOAWAY lingering; the
// client's stream slots, refused streams and PING probes.

// h2Wire is the write side of an HTTP/2 connection: wmu serialises
// frames through one framer into one buffered writer; pending counts
// writers holding or waiting for wmu, and the last one out flushes.
type h2Wire struct {
	wmu     sync.Mutex
	pending atomic.Int32
	nc      net.Conn
	fr      *http2.Framer
	bw      *bufio.Writer
	wdl     int64
	werr    error
	wfail   atomic.Bool // werr is set
	// wt bounds a flush. busy counts the requests in flight on the
	// connection: a writer that would flush while others are yields
	// once first (unlockW). failed, when set, is told of a failed write
	// after wmu is released.
	wt     time.Duration
	busy   *atomic.Int32
	failed func(error)
}

// initWire sets the write side up on nc, and the framer, which reads
// from r: header lists up to maxHeader bytes, frames up to h2MaxFrame,
// frames reused. wt and busy are as in h2Wire.
func (w *h2Wire) initWire(nc net.Conn, r io.Reader, maxHeader int, wt time.Duration, busy *atomic.Int32) {
	w.nc, w.wt, w.busy = nc, wt, busy
	w.bw = bufio.NewWriterSize(nc, h2WriteBufSize)
	w.fr = http2.NewFramer(w.bw, r)
	w.fr.MaxHeaderListSize = uint32(maxHeader)
	w.fr.SetMaxReadFrameSize(h2MaxFrame)
	w.fr.SetReuseFrames()
}

// lockW takes the write lock.
func (w *h2Wire) lockW() {
	w.pending.Add(1)
	w.wmu.Lock()
}

// unlockW flushes when no other writer waits, and releases the lock.
func (w *h2Wire) unlockW() {
	if w.pending.Load() == 1 && w.werr == nil && w.bw.Buffered() > 0 && w.busy.Load() > 1 {
		// Other requests of this connection are in flight, and their
		// peers often answer in the same poll: let the goroutines that
		// are ready add their frames before the write(2). The count we
		// keep makes them leave the flush to us.
		w.wmu.Unlock()
		runtime.Gosched()
		w.wmu.Lock()
	}
	if w.pending.Add(-1) == 0 && w.werr == nil && w.bw.Buffered() > 0 {
		w.werr = w.flushLocked()
	}
	werr := w.werr
	if werr != nil {
		w.wfail.Store(true)
	}
	w.wmu.Unlock()
	if werr != nil && w.failed != nil {
		w.failed(werr)
	}
}

// flushLocked writes out the buffered frames within wt. wmu held.
func (w *h2Wire) flushLocked() error {
	now := nowNano()
	wt := int64(w.wt)
	if w.wdl-now < wt-wt/16 {
		w.wdl = now + wt
		_ = w.nc.SetWriteDeadline(time.Unix(0, w.wdl))
	}
	return w.bw.Flush()
}

// writeWindowUpdate sends a WINDOW_UPDATE of k bytes for stream id (0:
// the connection).
func (w *h2Wire) writeWindowUpdate(id uint32, k int64) {
	w.lockW()
	if w.werr == nil {
		w.werr = w.fr.WriteWindowUpdate(id, uint32(k))
	}
	w.unlockW()
}

// writeReset sends RST_STREAM with code.
func (w *h2Wire) writeReset(id uint32, code http2.ErrCode) {
	w.lockW()
	if w.werr == nil {
		w.werr = w.fr.WriteRSTStream(id, code)
	}
	w.unlockW()
}

// writePing sends a PING, or the acknowledgement of the peer's.
func (w *h2Wire) writePing(ack bool, data [8]byte) {
	w.lockW()
	if w.werr == nil {
		w.werr = w.fr.WritePing(ack, data)
	}
	w.unlockW()
}

// h2Recv is a connection's receive window (RFC 9113 section 6.9), owned
// by the reading goroutine: what the peer may still send, and what was
// consumed and not yet given back.
type h2Recv struct {
	left, unacked int64
}

// take counts a DATA frame of n bytes (padding included); false when the
// peer overran the window, a FLOW_CONTROL_ERROR of the connection.
func (r *h2Recv) take(n int64) bool {
	if n > r.left {
		return false
	}
	r.left -= n
	r.unacked += n
	return true
}

// due reports whether refund would write a WINDOW_UPDATE now.
func (r *h2Recv) due(window int64) bool { return r.unacked >= window/4 }

// refund gives back what was consumed, with a WINDOW_UPDATE, once a
// quarter of window is: stream windows bound what each stream buffers.
func (r *h2Recv) refund(w *h2Wire, window int64) {
	if !r.due(window) {
		return
	}
	k := r.unacked
	r.unacked = 0
	r.left += k
	w.writeWindowUpdate(0, k)
}

// h2Flow is a connection's send side of flow control, which the peer's
// SETTINGS and WINDOW_UPDATE frames move; the connection's mu guards it.
type h2Flow struct {
	sendWindow int64 // connection send window
	peerWindow int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int   // the peer's SETTINGS_MAX_FRAME_SIZE
}

// take returns how many of want bytes a stream whose send window is sw
// may send in one DATA frame now (its window, the connection's, the
// peer's frame size), and takes them from both windows; 0 while a
// window is closed, or below zero after the peer's SETTINGS lowered it
// (an empty DATA frame that ends the stream needs none). The
// connection's mu is held.
func (fl *h2Flow) take(sw *int64, want int) int {
	n := int(min(int64(want), *sw, fl.sendWindow, int64(fl.peerFrame)))
	if n <= 0 {
		return 0
	}
	*sw -= int64(n)
	fl.sendWindow -= int64(n)
	return n
}

func newH2Flow() h2Flow { return h2Flow{sendWindow: 65535, peerWindow: 65535, peerFrame: 16384} }

// h2Sender is a stream, the server's or the client's, as flow control
// sees it.
type h2Sender interface {
	// addSendWindow moves the stream's send window by d and wakes its
	// writer; false when the window passed its maximum.
	addSendWindow(d int64) bool
}

var errStopSettings = errors.New("stop")

// applySettings applies the peer's SETTINGS (RFC 9113 section 6.5.2) to
// fl and the open streams: each is validated (the error code of the
// first invalid one is returned), SETTINGS_INITIAL_WINDOW_SIZE moves
// every stream's send window, SETTINGS_MAX_FRAME_SIZE bounds the frames
// sent; other, when set, takes the rest. The connection's mu is held,
// and its write lock, so that the acknowledgement goes out before any
// frame sent under the new settings.
func applySettings[S h2Sender](f *http2.SettingsFrame, fl *h2Flow, streams map[uint32]S, other func(http2.Setting)) http2.ErrCode {
	var code http2.ErrCode
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			code = http2.ErrCodeProtocol
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			}
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - fl.peerWindow
			fl.peerWindow = int64(s.Val)
			for _, st := range streams {
				if !st.addSendWindow(delta) {
					code = http2.ErrCodeFlowControl
				}
			}
		case http2.SettingMaxFrameSize:
			fl.peerFrame = int(s.Val)
		default:
			if other != nil {
				other(s)
			}
		}
		if code != 0 {
			return errStopSettings
		}
		return nil
	})
	return code
}

// answerSettings applies the peer's SETTINGS (applySettings) under mu,
// the connection's, and acknowledges them unless one was invalid; it
// returns the connection error. The write lock is held from before they
// apply until the acknowledgement is written: a peer that waits for the
// ACK may drop what precedes it (h2spec 6.9.2/1 waits for the ACK, then
// for a DATA frame that a larger window released).
func answerSettings[S h2Sender](w *h2Wire, mu *sync.Mutex, f *http2.SettingsFrame, fl *h2Flow, streams map[uint32]S, other func(http2.Setting)) http2.ErrCode {
	w.lockW()
	mu.Lock()
	code := applySettings(f, fl, streams, other)
	mu.Unlock()
	if code == 0 && w.werr == nil {
		w.werr = w.fr.WriteSettingsAck()
	}
	w.unlockW()
	return code
}

// addWindow applies a WINDOW_UPDATE (RFC 9113 section 6.9.1) to the
// connection's send window (id 0), whose overflow is a connection error,
// or to stream id's. It reports whether the stream is open and whether
// its window overflowed, for the caller to reset it. The connection's
// mu is held.
func addWindow[S h2Sender](fl *h2Flow, streams map[uint32]S, id uint32, inc int64) (code http2.ErrCode, open, overflow bool) {
	if id == 0 {
		fl.sendWindow += inc
		if fl.sendWindow > h2MaxWindow {
			return http2.ErrCodeFlowControl, true, false
		}
		for _, st := range streams {
			st.addSendWindow(0)
		}
		return 0, true, false
	}
	st, ok := streams[id]
	if !ok {
		return 0, false, false
	}
	return 0, true, !st.addSendWindow(inc)
}
