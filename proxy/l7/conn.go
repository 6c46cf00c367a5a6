package l7

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Connection states, for draining.
const (
	connIdle int32 = iota
	connActive
	connDrain
)

const (
	clientBufSize = 8 << 10
	// smallBody is the largest body coalesced with its head into one write.
	smallBody = 16 << 10
	// spliceMin is the smallest body remainder worth a splice between two
	// bare TCP connections.
	spliceMin = 64 << 10
	// lingerTime and lingerBytes bound the draining of a refused request.
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

var (
	aLongTimeAgo = time.Unix(1, 0)
	slash        = []byte("/")
	errBufFull   = errors.New("buffer full")
	errRawRead   = errors.New("client read inside the socket's read callback")
)

// clientConn is one HTTP/1.x client connection. Its goroutine reads a
// request, proxies it and loops; a second goroutine exists only while a
// request body streams to a member.
type clientConn struct {
	s      *Server
	ctx    context.Context
	nc     net.Conn
	tcp    *net.TCPConn // nc when it is bare TCP (splice)
	info   *ConnInfo
	client netip.AddrPort
	local  netip.AddrPort
	ca     clientAddrs
	idle   time.Duration

	state   atomic.Int32
	drainWG sync.WaitGroup

	readBuf
	wb []byte
	h  reqHead
	// up is the member connection kept from the previous request.
	up *upConn
	// scope holds what belongs to this connection alone (h2c transports
	// for PROXY protocol backends).
	scope *connScope

	hostBuf, pathBuf []byte
	// view, sink and fw make the head sent to a member (appendRequestHead).
	view      reqView
	sink      h1Sink
	fw        fwdScratch
	rdl, wdl  int64
	closing   bool
	linger    bool  // unread request bytes may follow: drain before closing
	start     int64 // nowNano when the request's first bytes came
	headAt    int64 // nowNano when its head was complete
	end       int64 // nowNano when its response was out (finish); 0 before
	bodyCh    chan error
	bodyAbort atomic.Bool // stopBody is interrupting the copier
	bodyN     int64       // body bytes the copier sent
	trailer   heldTrailer // a chunked request's trailer section (copyBody)
	// rs: the scratch of responseFields.
	rs respScratch
	// respTrailer: a chunked response's trailer section (relayBody).
	respTrailer heldTrailer
	bufs        net.Buffers
	bufArr      [2][]byte
	stats       RequestStats
	// rx serves a bare TCP connection from its RawConn.Read callback.
	rx rawServe
	// cpuW is what a unit of the connection's body bytes counts in its
	// tenant's CPU budget (info.CPU); reqM and respM count them, the
	// request's on the goroutine that sends it, the response's on the
	// connection's; reqLR and respLR are the splices' readers.
	cpuW          int64
	reqM, respM   meter
	reqLR, respLR io.LimitedReader
}

func (c *clientConn) serve() {
	c.drainWG.Add(1)
	stop := context.AfterFunc(c.ctx, func() {
		defer c.drainWG.Done()
		c.drain()
	})
	defer func() {
		if stop() {
			c.drainWG.Done()
		}
		c.drainWG.Wait() // a running drain must not touch a recycled conn
	}()
	if c.ctx.Err() != nil {
		// Accepted during a drain: the first request is answered with
		// Connection: close, whenever the drain above gets to run.
		c.drain()
	}
	for c.next() {
		c.handle()
		if c.closing {
			return
		}
		c.info.State.idle()
		// A drain that came after the response's head went out (without
		// Connection: close) leaves the state at connDrain: the client may
		// be sending its next request already, so it is read, within the
		// drain's grace, and answered with Connection: close.
		c.state.CompareAndSwap(connActive, connIdle)
	}
}

// drain makes a busy connection close after its response, and an idle one
// after its next response (with Connection: close) or, when no request
// comes within DrainIdleGrace, at the end of the grace.
func (c *clientConn) drain() {
	for {
		switch c.state.Load() {
		case connIdle:
			if c.state.CompareAndSwap(connIdle, connDrain) {
				_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.DrainIdleGrace))
				return
			}
		case connActive:
			if c.state.CompareAndSwap(connActive, connDrain) {
				return
			}
		default:
			return
		}
	}
}

// next returns with the next request's head parsed, for handle, or
// false when the connection is done. On a bare TCP connection the
// requests that read nothing more from the client are served inside it.
func (c *clientConn) next() bool {
	if c.rx.rc != nil {
		return c.nextRaw()
	}
	return c.readRequest()
}

func (c *clientConn) draining() bool { return c.state.Load() == connDrain }

// reqCtx is the context of the request being served: a drain ends the
// connection's context, never the request it lets finish.
func (c *clientConn) reqCtx() context.Context { return context.WithoutCancel(c.ctx) }

// fill reads more client bytes into rb.
func (c *clientConn) fill() error {
	if c.rx.on {
		// Inside the RawConn.Read callback a read through nc would wait
		// for the read lock the callback holds: rawSafe keeps requests
		// that read more outside, this keeps a mistake from hanging.
		return errRawRead
	}
	_, err := c.fillFrom(c.nc, errBufFull)
	return err
}

func (c *clientConn) setReadDeadline(now int64, d time.Duration) error {
	return setDeadline(c.nc.SetReadDeadline, &c.rdl, now, d)
}

// write writes b to the client under the write timeout.
func (c *clientConn) write(b []byte) error { return c.writeAt(b, nowNano()) }

// writeAt is write with the clock read at now (nowNano), shortly before.
func (c *clientConn) writeAt(b []byte, now int64) error {
	if err := setDeadline(c.nc.SetWriteDeadline, &c.wdl, now, c.s.cfg.WriteTimeout); err != nil {
		return err
	}
	if c.rx.on && c.rx.tr == nil {
		// Inside the read callback (rawclient.go), which holds the
		// socket: write directly; net.Conn waits out a full buffer.
		// TLS records go out through crypto/tls and the TCP connection.
		rest, err := writeRawClient(c.rx.fd, b)
		if err != nil || len(rest) == 0 {
			return rawWriteError(err)
		}
		b = rest
	}
	_, err := c.nc.Write(b)
	return err
}

// writev writes a and b with one system call where the connection allows;
// now is as for writeAt.
func (c *clientConn) writev(a, b []byte, now int64) error {
	if err := setDeadline(c.nc.SetWriteDeadline, &c.wdl, now, c.s.cfg.WriteTimeout); err != nil {
		return err
	}
	c.bufArr[0], c.bufArr[1] = a, b
	c.bufs = c.bufArr[:]
	_, err := c.bufs.WriteTo(c.nc)
	c.bufArr[0], c.bufArr[1] = nil, nil
	return err
}

// readRequest waits for the next request and parses its head. It reports
// false when the connection is done.
func (c *clientConn) readRequest() bool {
	c.h.reset()
	now := nowNano()
	if c.r == c.w {
		c.emptyBuf()
		if !c.armIdle(now) {
			return false
		}
		if err := c.fill(); err != nil {
			return false // idle timeout, close or drain: nothing to answer
		}
		now = nowNano()
	}
	if !c.claim(now) {
		return false // closed by its owner while idle
	}
	headerDeadline := false
	for {
		done, st := c.h.parse(c.rb[c.r:c.w], c.s.cfg.MaxHeaderBytes, c.s.cfg.MaxHeaderCount)
		if st != 0 {
			c.reject(st)
			return false
		}
		if done {
			c.headAt = now
			return true
		}
		if !headerDeadline {
			headerDeadline = true
			c.rdl = 0
			if c.setReadDeadline(c.start, c.s.cfg.HeaderTimeout) != nil {
				return false
			}
		}
		c.growHead()
		if err := c.fill(); err != nil {
			if isTimeout(err) && !c.draining() {
				c.reject(408)
			}
			return false
		}
		now = nowNano()
	}
}

// emptyBuf resets the empty read buffer, dropping one grown for a big head.
func (c *clientConn) emptyBuf() {
	c.r, c.w = 0, 0
	if len(c.rb) > clientBufSize {
		c.rb = make([]byte, clientBufSize)
	}
}

// growHead makes room for a head that fills the read buffer.
func (c *clientConn) growHead() {
	if c.w == len(c.rb) && c.r == 0 {
		c.rb = append(make([]byte, 0, c.s.cfg.MaxHeaderBytes+4096), c.rb[:c.w]...)[:c.s.cfg.MaxHeaderBytes+4096]
	}
}

// armIdle sets the read deadline for the wait for a next request.
func (c *clientConn) armIdle(now int64) bool {
	if c.setReadDeadline(now, c.idle) != nil {
		return false
	}
	if c.draining() {
		// Drained before the idle deadline was set: the grace holds.
		c.rdl = 0
		if c.nc.SetReadDeadline(timeAt(now+int64(c.s.cfg.DrainIdleGrace))) != nil {
			return false
		}
	}
	return true
}

// claim marks the connection busy with a request whose first bytes came
// at now. It reports false when the connection's owner closed it while
// it was idle (ConnState.CloseIfIdle): no request may start.
func (c *clientConn) claim(now int64) bool {
	if !c.info.State.busy() {
		return false
	}
	if !c.state.CompareAndSwap(connIdle, connActive) {
		// Drained while idle: serve this request, then close. The drain
		// set the read deadline of its grace.
		c.closing = true
		c.rdl = 0
	}
	c.start, c.headAt, c.end = now, now, 0
	return true
}

// handle serves one request whose head is parsed.
func (c *clientConn) handle() {
	h := &c.h
	b := c.rb[c.r : c.r+h.n]
	c.r += h.n // b stays valid until the next fill
	c.view = h.view(b)
	startFigures(&c.stats, c.info, c.client, false, false, &c.view)
	isHead := h.method(b) == "HEAD"

	host, ok := normalizeHost(c.hostBuf, h.hostValue(b))
	if !ok {
		c.reject(400)
		return
	}
	c.hostBuf = host
	path := b[h.pS:h.pE]
	if len(path) == 0 {
		path = slash
	}
	cleaned := needsClean(path)
	if cleaned {
		c.pathBuf = cleanPath(c.pathBuf, path)
		path = c.pathBuf
	}
	d := c.s.decide(c.info, &c.ca, (*h1Request)(c), &c.view, &c.fw, unsafeString(host), unsafeString(path), h.upgradeTo(b) != nil)
	if d.route != nil {
		c.stats.Route = d.route.Name
	}
	switch d.act {
	case actFail:
		c.localError(d.status, d.out, isHead)
	case actExt, actLocal:
		c.bridge(b, &d, path, cleaned)
	case actRedirect:
		c.redirect(d.route, b, host, path, cleaned, isHead)
	default:
		if d.limit > 0 && h.contentLength > d.limit {
			c.reject(413)
			return
		}
		if d.act != actHTTP1 {
			// HTTP/2 members take net/http values.
			c.bridge(b, &d, path, cleaned)
			return
		}
		c.proxy(b, d.be, d.opts, d.limit, path, cleaned, isHead)
	}
}

// skipBody consumes a request body that is already buffered, or marks the
// connection for closing when it is not.
func (c *clientConn) skipBody() {
	h := &c.h
	if !h.hasBody() {
		return
	}
	if !h.chunked && int64(c.w-c.r) >= h.contentLength {
		c.r += int(h.contentLength)
		h.contentLength = 0
		return
	}
	c.closing = true
}

// local answers with an error page without a member.
func (c *clientConn) localError(code int, out Outcome, isHead bool) {
	c.skipBody()
	c.writeError(code, isHead)
	c.finish(code, out)
}

// reject refuses a request that cannot be read to its end, and closes.
func (c *clientConn) reject(code int) {
	c.closing, c.linger = true, true
	c.writeError(code, false)
	c.finish(code, OutcomeClientError)
}

func (c *clientConn) writeError(code int, isHead bool) {
	p := pageFor(code)
	if closesConn(code) || !c.h.keepAlive() || c.h.minor == 0 || c.draining() {
		c.closing = true
	}
	msg := p.keep
	if c.closing {
		msg = p.close
	}
	if isHead {
		msg = msg[:len(msg)-p.bodyLen]
	}
	if c.write(msg) != nil {
		c.closing = true
	}
}

// redirect answers with a redirect to the same target over HTTPS.
func (c *clientConn) redirect(route *Route, b, host, path []byte, cleaned, isHead bool) {
	h := &c.h
	if len(host) == 0 {
		c.localError(400, OutcomeClientError, isHead)
		return
	}
	c.skipBody()
	if c.draining() || !h.keepAlive() || h.minor == 0 {
		c.closing = true
	}
	code, line := httpsRedirect(h.method(b)), "HTTP/1.1 308 Permanent Redirect\r\nLocation: "
	if code == 301 {
		line = "HTTP/1.1 301 Moved Permanently\r\nLocation: "
	}
	w := append(c.wb[:0], line...)
	w = appendHTTPSOrigin(w, host, route.HTTPSPort)
	switch {
	case cleaned:
		w = append(w, path...)
		w = append(w, b[h.qS:h.tE]...)
	case h.form == formAsterisk:
		w = append(w, '/')
	case h.pS == h.tE || b[h.pS] != '/':
		w = append(w, '/')
		w = append(w, b[h.pS:h.tE]...)
	default:
		w = append(w, b[h.pS:h.tE]...)
	}
	w = append(w, "\r\nContent-Length: 0\r\n"...)
	if c.closing {
		w = append(w, "Connection: close\r\n"...)
	}
	w = append(w, "\r\n"...)
	c.wb = w
	if c.write(w) != nil {
		c.closing = true
	}
	c.finish(code, OutcomeRedirect)
}

func (c *clientConn) finish(status int, out Outcome) {
	c.stats.Status = status
	c.stats.Outcome = out
	c.end = nowNano()
	c.stats.Duration = time.Duration(c.end - c.start)
	c.s.cfg.Metrics.Request(c.stats)
}

// release returns a member connection to its pool, or closes it.
func (c *clientConn) release(u *upConn) {
	if u.private || !c.s.pools.putBack(u, c.s.cfg.MaxIdlePerMember) {
		u.close()
	}
}

// acquire returns a connection to a member: the one kept from the previous
// request, an idle one from the member's pool, or a new one. reused
// reports that the connection served requests before.
func (c *clientConn) acquire(addr netip.AddrPort, opts *BackendOptions, now int64) (u *upConn, reused bool, err error) {
	key := keyOf(addr, opts.Protocol, opts)
	private := opts.ProxyProtocol != 0
	maxIdle := int64(c.s.cfg.UpstreamIdleTimeout)
	if u = c.up; u != nil {
		c.up = nil
		idle := now - u.idleAt
		switch {
		case idle >= maxIdle || (idle >= staleAfter && u.closedByPeer()):
			u.close()
		case u.key == key && u.private == private:
			return u, true, nil
		default:
			c.release(u)
		}
	}
	if !private {
		p := c.s.pools.get(key)
		for u = p.take(now, c.s.cfg.UpstreamIdleTimeout); u != nil; u = p.take(now, c.s.cfg.UpstreamIdleTimeout) {
			if now-u.idleAt < staleAfter || !u.closedByPeer() {
				return u, true, nil
			}
			u.close()
		}
	}
	var pp *proxyAddrs
	if private {
		pp = &proxyAddrs{src: c.client, dst: c.local}
	}
	u, err = c.s.dial(c.reqCtx(), key, opts, pp)
	return u, false, err
}

// close ends the connection and gives its buffers back.
func (c *clientConn) close() {
	if c.up != nil {
		c.release(c.up)
		c.up = nil
	}
	if c.scope != nil {
		c.scope.close()
		c.scope = nil
	}
	if c.linger && c.tcp != nil {
		// Let the client read the error page: closing with unread
		// bytes in the socket would reset the connection.
		_ = c.tcp.CloseWrite()
		_ = c.tcp.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, c.tcp, lingerBytes)
	}
	_ = c.nc.Close()
}

// readBuf is a connection's read buffer: rb[r:w] read and not yet
// parsed. The client's and the member's connections fill theirs the same
// way.
type readBuf struct {
	rb   []byte
	r, w int
}

// fillFrom reads more of nc into rb, moving what is unparsed to the front
// first when rb is full to its end; full is the error when rb holds
// nothing but unparsed bytes. It returns the bytes read: at least one,
// or an error.
func (b *readBuf) fillFrom(nc net.Conn, full error) (int, error) {
	if b.w == len(b.rb) {
		if b.r == 0 {
			return 0, full
		}
		b.w = copy(b.rb, b.rb[b.r:b.w])
		b.r = 0
	}
	for {
		n, err := nc.Read(b.rb[b.w:])
		b.w += n
		if n > 0 {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}
