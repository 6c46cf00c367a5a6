package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// RefusedTLSHandshake: a connection to a terminated server name of a
// tls-passthrough listener did not complete its TLS handshake within
// HelloTimeout, or this host has no certificates to offer (a reason for
// ConnRefused).
const RefusedTLSHandshake = "tls-handshake"

// StreamTLS is what the ConnHandler of the L7 listeners (Config.HTTP)
// implements when it can terminate TLS for server-name routes of
// tls-passthrough listeners (sniRoutes[].terminate): the configuration of
// one handshake on listener l, offering no ALPN protocol, whose
// certificate selection and handshake are charged to l's tenant like
// those of https listeners.
type StreamTLS interface {
	StreamConfig(l *snapshot.Listener) *tls.Config
}

// terminateBuf is one direction's copy buffer of a terminated stream:
// one TLS record's plaintext at most.
const terminateBuf = 16 << 10

var terminateBufs = sync.Pool{New: func() any { b := make([]byte, terminateBuf); return &b }}

// serveTerminated completes the TLS handshake of a tls-passthrough
// connection whose server name is routed with terminate (read: the bytes
// of the ClientHello already read), then forwards the decrypted stream to
// a member of pool as plain TCP, with the listener's idle timeout and the
// tenant's descriptor budget, as forwardTCP does.
func (p *Proxy) serveTerminated(l *ListenerSnapshot, c *net.TCPConn, pool *Pool, read []byte) {
	st, _ := p.cfg.HTTP.(StreamTLS)
	var cfg *tls.Config
	if st != nil {
		cfg = st.StreamConfig(l.Listener)
	}
	if cfg == nil {
		p.metrics.ConnRefused(l.LB, l.Name, RefusedTLSHandshake)
		refuse(c)
		return
	}
	tc := tls.Server(&replayConn{TCPConn: c, read: read}, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), HelloTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.metrics.ConnRefused(l.LB, l.Name, RefusedTLSHandshake)
		refuse(c)
		return
	}
	up, tg, done, ok := p.memberLeg(l, c, pool)
	if !ok {
		return
	}
	defer done()
	downWatch := closeOnDown(pool, tg)
	idle := l.Limits.IdleTimeout
	sp := &streamPipe{raw: c, tls: tc, up: up, idle: idle, tick: max(idle/4, 10*time.Millisecond), member: tg, downWatch: downWatch}
	if downWatch != nil {
		sp.tick = min(sp.tick, downPoll)
	}
	sp.last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Go(func() {
		var m byteMeter
		sp.copy(up, tc, func() error { return up.CloseWrite() }, func(n int64) {
			p.metrics.BytesIn(l.LB, l.Name, n)
			l.cpu.Relay(cpubudget.WorkTLSBytes * m.units(n))
		})
	})
	var m byteMeter
	sp.copy(tc, up, tc.CloseWrite, func(n int64) { p.metrics.BytesOut(l.LB, l.Name, n); l.cpu.Relay(cpubudget.WorkTLSBytes * m.units(n)) })
	wg.Wait()
	sp.end(false)
}

// replayConn reads the bytes already read from the client first.
type replayConn struct {
	*net.TCPConn
	read []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	if len(r.read) > 0 {
		n := copy(b, r.read)
		r.read = r.read[n:]
		return n, nil
	}
	return r.TCPConn.Read(b)
}

// streamPipe copies both ways between a terminated client and a member:
// a copy loop (the client side is TLS), with pipe's idle timeout and
// close-on-down rules.
type streamPipe struct {
	raw        *net.TCPConn
	tls        *tls.Conn
	up         *net.TCPConn
	idle, tick time.Duration
	member     *health.Target
	downWatch  *health.Target
	last       atomic.Int64
	once       sync.Once
	reset      atomic.Bool
}

// copy moves src to dst until src's half ends (then closeWrite ends
// dst's) or the pipe does.
func (sp *streamPipe) copy(dst io.Writer, src net.Conn, closeWrite func() error, count func(int64)) {
	bp := terminateBufs.Get().(*[]byte)
	defer terminateBufs.Put(bp)
	buf := *bp
	for {
		if err := src.SetReadDeadline(time.Now().Add(sp.tick)); err != nil {
			sp.end(true)
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				sp.failed()
				return
			}
			count(int64(n))
			sp.last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			_ = closeWrite()
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			if sp.downWatch != nil && sp.downWatch.CheckedDown() {
				sp.end(false)
				return
			}
			if time.Since(time.Unix(0, sp.last.Load())) >= sp.idle {
				sp.end(false)
				return
			}
		default:
			sp.failed()
			return
		}
	}
}

// failed ends the pipe with resets, counting a reset the member sent.
func (sp *streamPipe) failed() {
	if sp.member != nil && peerReset(sp.up) && sp.reset.CompareAndSwap(false, true) {
		sp.member.RecordFailure(health.OutcomeReset)
	}
	sp.end(true)
}

// end closes both sides once: with a reset after a failure, gracefully
// (a close_notify to the client) otherwise.
func (sp *streamPipe) end(reset bool) {
	sp.once.Do(func() {
		if reset {
			sp.raw.SetLinger(0)
			sp.up.SetLinger(0)
			sp.raw.Close()
		} else {
			sp.tls.Close()
		}
		sp.up.Close()
	})
}
