package l7

import (
	"errors"
	"time"
)

// startBody streams the request body to up on a second goroutine while
// the connection's goroutine waits for the response, so that interim
// responses (100 Continue) and early final responses get through.
func (c *clientConn) startBody(up *upConn, limit int64) {
	if c.bodyCh == nil {
		c.bodyCh = make(chan error, 1)
	}
	go func() {
		c.bodyCh <- c.copyBody(up, limit)
	}()
}

// stopBody interrupts the body copier and returns its result. A copier
// that already sent everything returns nil.
func (c *clientConn) stopBody(up *upConn) error {
	c.bodyAbort.Store(true)
	_ = c.nc.SetReadDeadline(aLongTimeAgo)
	_ = up.nc.SetWriteDeadline(aLongTimeAgo)
	err := <-c.bodyCh
	c.bodyAbort.Store(false)
	c.rdl, up.wdl = 0, 0
	c.settleBody(err)
	return err
}

// finishBody collects the copier's result once the response was relayed:
// a body still unsent then is cut short.
func (c *clientConn) finishBody(up *upConn) error {
	select {
	case err := <-c.bodyCh:
		c.settleBody(err)
		return err
	default:
		return c.stopBody(up)
	}
}

// settleBody records what remains of the request body in the connection.
func (c *clientConn) settleBody(err error) {
	c.stats.RequestBytes += c.bodyN
	c.bodyN = 0
	if err != nil {
		c.closing = true
		return
	}
	c.h.chunked, c.h.contentLength = false, 0
}

func isClientBodyError(err error) bool {
	return errors.Is(err, errBodyTooLarge) || errors.Is(err, errBadChunk) ||
		errors.Is(err, errBodyTimeout) || errors.Is(err, errClientGone)
}

// bodyError answers a request whose body failed.
func (c *clientConn) bodyError(err error) {
	c.closing = true
	switch {
	case errors.Is(err, errBodyTooLarge):
		c.reject(413)
	case errors.Is(err, errBadChunk):
		c.reject(400)
	case errors.Is(err, errBodyTimeout):
		c.reject(408)
	default:
		c.finish(0, OutcomeAborted)
	}
}

// readBody reads more request body into the empty client buffer.
func (c *clientConn) readBody(bt time.Duration) error {
	c.r, c.w = 0, 0
	if err := c.setReadDeadline(nowNano(), bt); err != nil {
		return errClientGone
	}
	if err := c.fill(); err != nil {
		if isTimeout(err) && !c.draining() {
			return errBodyTimeout
		}
		return errClientGone
	}
	return nil
}

// copyBody streams the request body from the client to up. On a failure
// of the client's side it closes up, so that the response wait ends.
func (c *clientConn) copyBody(up *upConn, limit int64) error {
	h := &c.h
	bt := c.s.cfg.BodyTimeout
	fail := func(err error) error {
		// Decide before closing up: the connection's goroutine learns of
		// the failure through that close, and only then may abort us.
		if (errors.Is(err, errBodyTimeout) || errors.Is(err, errClientGone)) && c.bodyAbort.Load() {
			err = errBodyAborted // our own deadline, not the client's fault
		}
		up.close()
		return err
	}
	if h.chunked {
		var ck chunked
		c.trailer.holding = false
		for {
			if c.r == c.w {
				if err := c.readBody(bt); err != nil {
					return fail(err)
				}
			}
			if in := c.rb[c.r:c.w]; c.trailer.holds(&ck, in) {
				k, done, err := c.trailer.take(&ck, in, c.ca.certField, c.h.conn.names)
				c.r += k
				c.reqM.add(c.info.CPU, c.cpuW, int64(k)) // read, held and scanned as the body's bytes
				if err != nil {
					return fail(err)
				}
				if !done {
					continue
				}
				if err := c.writeUp(up, c.trailer.buf, bt); err != nil {
					return err
				}
				c.trailer.sent()
				c.bodyN = ck.total
				return nil
			}
			k, err := ck.scanBody(c.rb[c.r:c.w])
			if err != nil {
				return fail(err)
			}
			if limit > 0 && ck.total > limit {
				return fail(errBodyTooLarge)
			}
			if err := c.writeUp(up, c.rb[c.r:c.r+k], bt); err != nil {
				return err
			}
			c.r += k
			c.reqM.add(c.info.CPU, c.cpuW, int64(k))
			if ck.done() {
				c.bodyN = ck.total
				return nil
			}
		}
	}
	remaining := h.contentLength
	for remaining > 0 {
		if c.r == c.w {
			if remaining >= spliceMin && c.tcp != nil && up.tcp != nil {
				k, err := c.spliceN(up.tcp, c.tcp, remaining, bt, &c.reqLR, &c.reqM)
				c.rdl, up.wdl = 0, 0
				remaining -= k
				c.bodyN += k
				if err != nil {
					switch {
					case isTimeout(err):
						return fail(errBodyTimeout)
					case up.closedByPeer():
						return err // the member hung up, not the client
					}
					return fail(errClientGone)
				}
				continue
			}
			if err := c.readBody(bt); err != nil {
				return fail(err)
			}
		}
		k := int(min(remaining, int64(c.w-c.r)))
		if err := c.writeUp(up, c.rb[c.r:c.r+k], bt); err != nil {
			return err
		}
		c.r += k
		remaining -= int64(k)
		c.bodyN += int64(k)
		c.reqM.add(c.info.CPU, c.cpuW, int64(k))
	}
	return nil
}

func (c *clientConn) writeUp(up *upConn, b []byte, bt time.Duration) error {
	if err := up.setWriteDeadline(nowNano(), bt); err != nil {
		return err
	}
	_, err := up.nc.Write(b)
	return err
}
