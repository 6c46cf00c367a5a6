package l7

import (
	"bytes"
	"context"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// sniffH2C reads the start of a cleartext connection into rb and reports
// whether the client speaks HTTP/2 with prior knowledge (it opens with the
// HTTP/2 client preface, as gRPC clients do without TLS). ok is false when
// the connection ended, timed out or was drained before it said which.
// What was read stays in rb for the HTTP/1.x parser.
func (c *clientConn) sniffH2C() (h2c, ok bool) {
	// A drained connection gets the drain's grace for its first bytes,
	// like an idle HTTP/1.x connection (drain), whether the drain comes
	// before this loop sets its deadline or while it waits.
	// The drain's function is done before this returns: the connection
	// goes back to the pool (its fields cleared) as soon as it ends, and
	// a function still running then would touch it (a drain that came as
	// the client's first bytes or its close did).
	grace := c.s.cfg.DrainIdleGrace
	nc := c.nc
	var running sync.WaitGroup
	running.Add(1)
	stop := context.AfterFunc(c.ctx, func() {
		defer running.Done()
		_ = nc.SetReadDeadline(time.Now().Add(grace))
	})
	defer func() {
		if stop() {
			running.Done()
		}
		running.Wait()
	}()
	pre := []byte(http2.ClientPreface)
	// After its first bytes the client has HeaderTimeout for the whole
	// preface, however it splits it, as for an HTTP/1.x request head.
	var deadline time.Time
	for {
		d := c.idle
		if !deadline.IsZero() {
			if d = time.Until(deadline); d <= 0 {
				return false, false
			}
		}
		if c.ctx.Err() != nil {
			d, c.rdl = min(d, grace), 0
		}
		if c.setReadDeadline(nowNano(), d) != nil {
			return false, false
		}
		if err := c.fill(); err != nil {
			return false, false
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(c.s.cfg.HeaderTimeout)
		}
		n := min(c.w-c.r, len(pre))
		if !bytes.Equal(c.rb[c.r:c.r+n], pre[:n]) {
			return false, true
		}
		if n == len(pre) {
			return true, true
		}
	}
}

// replayConn reads pre before the connection's next bytes.
type replayConn struct {
	net.Conn
	pre []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
