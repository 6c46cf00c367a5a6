package l7

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/splice"
)

// tunnel relays the member's 101 response and then the bytes of both
// connections until either side ends or the tunnel idles out.
func (c *clientConn) tunnel(m Member, up *upConn, d time.Duration) {
	c.closing = true
	c.info.State.upgraded()
	// The 101 head and whatever the member sent after it.
	err := c.write(up.rb[up.r:up.w])
	up.r = up.w
	if err == nil && c.r < c.w {
		err = c.writeUp(up, c.rb[c.r:c.w], c.s.cfg.WriteTimeout)
		c.r = c.w
	}
	c.stats.Status = 101
	if err == nil {
		pipe(c.nc, c.tcp, up.nc, up.tcp, c.s.cfg.TunnelTimeout, c.s.pipes.Load(), c.info.CPU, c.cpuW)
	}
	up.close()
	m.Done(nil, 101, d)
	c.finish(101, OutcomeOK)
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pipe copies both ways between a and b (aTCP and bTCP are the same
// connections when they are bare TCP, so that the kernel splices). A
// direction that ends half-closes the other side. The tunnel closes when
// both directions saw no byte for a whole timeout window (idle between one
// and two timeouts). With cpu, each direction counts its bytes there as
// they move (weight units per unit of bytes), bodyQuantum at most
// between two counts, and waits there while the tenant is over budget.
func pipe(a net.Conn, aTCP *net.TCPConn, b net.Conn, bTCP *net.TCPConn, timeout time.Duration, pl *splice.Pool, cpu CPU, weight int64) {
	var idle [2]atomic.Bool
	done := make(chan struct{})
	go func() {
		pipeDir(b, bTCP, a, aTCP, timeout, &idle[0], &idle[1], a, b, pl, cpu, weight)
		close(done)
	}()
	pipeDir(a, aTCP, b, bTCP, timeout, &idle[1], &idle[0], a, b, pl, cpu, weight)
	<-done
	_ = a.Close()
	_ = b.Close()
}

type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

func pipeDir(dst net.Conn, dstTCP *net.TCPConn, src net.Conn, srcTCP *net.TCPConn, timeout time.Duration, mine, other *atomic.Bool, a, b net.Conn, pl *splice.Pool, cpu CPU, weight int64) {
	var buf *[]byte
	var sp *splice.Splicer
	if pl != nil && dstTCP != nil && srcTCP != nil {
		sp = splice.New(pl, dstTCP, srcTCP)
		if cpu != nil {
			sp.SetQuantum(bodyQuantum)
		}
	}
	var m meter
	var lr io.LimitedReader
	defer func() {
		mine.Store(true)
		if buf != nil {
			copyBufs.Put(buf)
		}
		if sp != nil {
			sp.Close()
		}
	}()
	for {
		dl := time.Now().Add(timeout)
		_ = src.SetReadDeadline(dl)
		_ = dst.SetWriteDeadline(dl)
		var n int64
		var err error
		more := false // the quantum moved: count it and go on
		switch {
		case sp != nil:
			n, err = sp.Move()
			if errors.Is(err, splice.ErrQuantum) {
				more, err = true, nil
			}
		case dstTCP != nil && srcTCP != nil && cpu == nil:
			n, err = io.Copy(dstTCP, srcTCP)
		case dstTCP != nil && srcTCP != nil:
			lr.R, lr.N = srcTCP, bodyQuantum
			n, err = dstTCP.ReadFrom(&lr)
			more = err == nil && lr.N == 0
		default:
			if buf == nil {
				buf = copyBufs.Get().(*[]byte)
			}
			var r io.Reader = onlyReader{src}
			if cpu != nil {
				lr.R, lr.N = r, bodyQuantum
				r = &lr
			}
			n, err = io.CopyBuffer(onlyWriter{dst}, r, *buf)
			more = cpu != nil && err == nil && lr.N == 0
		}
		m.add(cpu, weight, n)
		if more {
			mine.Store(false)
			continue
		}
		if err == nil {
			// src ended: pass the end on and let the other direction run.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			} else {
				_ = dst.Close()
			}
			return
		}
		if !isTimeout(err) {
			_ = a.Close()
			_ = b.Close()
			return
		}
		mine.Store(n == 0)
		if n == 0 && other.Load() {
			_ = a.Close()
			_ = b.Close()
			return
		}
	}
}
