package l7

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// bridge serves an HTTP/1.x request through net/http values, as d says:
// an extended route, a local Handler, or a member of d.be (HTTP/2
// members, a client certificate field). b is the request head.
func (c *clientConn) bridge(b []byte, d *decision, path []byte, cleaned bool) {
	h := &c.h
	isHead := h.method(b) == "HEAD"
	target := string(b[h.tS:h.tE])
	if h.form == formAbsolute || cleaned {
		target = string(path) + string(b[h.qS:h.tE])
	}
	u, err := url.ParseRequestURI(target)
	if h.form == formAsterisk {
		u, err = &url.URL{Path: "*"}, nil
	}
	if err != nil {
		c.localError(400, OutcomeClientError, isHead)
		return
	}
	hdr := h.netHeader(b)
	body := &h1Body{c: c, chunked: h.chunked, left: max(h.contentLength, 0)}
	ctx, cancel := context.WithCancel(c.reqCtx())
	defer cancel()
	r := &http.Request{
		Method:        string(b[h.mS:h.mE]), // b changes once the body is read
		URL:           u,
		Proto:         "HTTP/1." + string('0'+rune(h.minor)),
		ProtoMajor:    1,
		ProtoMinor:    int(h.minor),
		Header:        hdr,
		Host:          string(h.hostValue(b)),
		RemoteAddr:    c.client.String(),
		RequestURI:    target,
		ContentLength: h.contentLength,
		Close:         !h.keepAlive(),
	}
	if h.chunked {
		r.ContentLength = -1
		r.Trailer = http.Header{}
		body.trailer = r.Trailer
	}
	if h.hasBody() {
		r.Body = body
	} else {
		r.Body = http.NoBody
		body.done = true
	}
	r = r.WithContext(ctx)
	w := &h1Writer{c: c, hdr: make(http.Header), isHead: isHead}
	if c.scope == nil {
		c.scope = &connScope{s: c.s, pp: proxyAddrs{src: c.client, dst: c.local}, cpu: c.info.CPU, cpuW: c.cpuW}
	}
	switch d.act {
	case actExt:
		q := &rtRequest{r: r, path: string(path), ca: &c.ca, scope: c.scope, stats: &c.stats, retries: c.s.cfg.Retries, fw: &c.fw}
		c.s.serveExt(w, q, d.route, string(c.hostBuf), c.info.TLS, c.local.Port())
	case actLocal:
		serveLocal(w, r, d.route.Handler, &c.stats)
	default:
		q := &rtRequest{r: r, path: string(path), ca: &c.ca, scope: c.scope, stats: &c.stats, limit: d.limit, retries: c.s.cfg.Retries, fw: &c.fw}
		c.s.proxyHTTP(w, q, d.be, d.opts)
	}
	w.finish()
	if !body.close() {
		c.closing = true
	}
	c.rdl = 0
	if w.err != nil {
		c.closing = true
	}
	out := c.stats.Outcome
	if w.err != nil {
		out = OutcomeAborted
	}
	c.stats.RequestBytes = body.n
	c.finish(w.status, out)
}

// h1Body reads a request body from an HTTP/1.x client connection for the
// round-trip path. A transport may read it from its own goroutine, even
// after the round trip; close stops it.
type h1Body struct {
	c       *clientConn
	mu      sync.Mutex
	chunked bool
	ck      chunked
	left    int64
	n       int64
	raw     int64 // bytes read off the connection not charged yet (framing and trailers too)
	done    bool  // read to its end
	// trailer receives the fields of a chunked body's trailer section
	// once it ended; tbuf holds the section.
	trailer http.Header
	tbuf    []byte
	closed  bool
	err     error
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.read(p)
	u := b.c.reqM.take(b.raw)
	b.raw = 0
	b.mu.Unlock()
	if u > 0 && b.c.info.CPU != nil {
		b.c.info.CPU.Relay(u * b.c.cpuW) // not under b.mu: close takes it
	}
	return n, err
}

// read is Read under b.mu.
func (b *h1Body) read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.err != nil {
		return 0, b.err
	}
	c := b.c
	for {
		if b.done {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if c.r == c.w {
			if err := c.readBody(c.s.cfg.BodyTimeout); err != nil {
				b.err = err
				return 0, err
			}
		}
		if !b.chunked {
			k := int(min(int64(len(p)), b.left, int64(c.w-c.r)))
			copy(p, c.rb[c.r:c.r+k])
			c.r += k
			b.raw += int64(k)
			b.left -= int64(k)
			b.n += int64(k)
			b.done = b.left == 0
			return k, nil
		}
		in := c.rb[c.r:c.w]
		if len(in) > len(p) {
			in = in[:len(p)]
		}
		inTrailer := b.ck.inTrailer()
		k, data, err := b.ck.step(in)
		if data {
			copy(p, in[:k])
		}
		if inTrailer {
			b.tbuf = append(b.tbuf, in[:k]...)
		}
		c.r += k
		b.raw += int64(k)
		if err != nil {
			b.err = err
			return 0, err
		}
		b.done = b.ck.done()
		if b.done && len(b.tbuf) > 2 && b.trailer != nil {
			// Those the head's Connection fields name are dropped here;
			// trailerFiltered filters the rest before a transport reads
			// them.
			for _, line := range bytes.SplitAfter(b.tbuf, []byte("\r\n")) {
				if k, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\r\n")), []byte(":")); ok && trailerKept(k, c.ca.certField, c.h.conn.names) {
					b.trailer.Add(string(k), string(bytes.TrimSpace(v)))
				}
			}
		}
		if data {
			b.n += int64(k)
			return k, nil
		}
	}
}

// Close implements io.Closer; the connection settles the body itself.
func (b *h1Body) Close() error { return nil }

// close stops readers and reports whether the body was read to its end.
func (b *h1Body) close() bool {
	if !b.mu.TryLock() {
		_ = b.c.nc.SetReadDeadline(aLongTimeAgo)
		b.mu.Lock()
	}
	b.closed = true
	done := b.done
	b.mu.Unlock()
	return done
}

// h1Writer is an http.ResponseWriter on an HTTP/1.x client connection.
type h1Writer struct {
	c       *clientConn
	hdr     http.Header
	isHead  bool
	wrote   bool
	status  int
	chunked bool
	noBody  bool
	err     error
}

func (w *h1Writer) Header() http.Header { return w.hdr }

func (w *h1Writer) WriteHeader(code int) {
	if w.wrote || w.err != nil {
		return
	}
	if code < 200 {
		if code != 101 && w.c.h.minor == 1 {
			w.err = w.c.write([]byte("HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n\r\n"))
		}
		return
	}
	w.wrote, w.status = true, code
	c := w.c
	removeHop(w.hdr)
	w.noBody = w.isHead || code == 204 || code == 304
	if len(w.hdr["Trailer"]) > 0 && c.h.minor == 1 && !w.noBody {
		delete(w.hdr, "Content-Length") // trailers need chunked framing
	}
	_, hasCL := w.hdr["Content-Length"]
	switch {
	case w.noBody, hasCL:
	case c.h.minor == 1:
		w.chunked = true
	default:
		c.closing = true
	}
	if !c.h.keepAlive() || c.draining() {
		c.closing = true
	}
	if c.info.AltSvc != "" {
		delete(w.hdr, "Alt-Svc") // the listener's is the one a client takes
	}
	bw := bufio.NewWriterSize(&connWriter{c}, 4096)
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n")
	for k, vv := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k + ": " + sanitizeValue(v) + "\r\n")
		}
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if v := c.info.AltSvc; v != "" {
		bw.WriteString("Alt-Svc: " + v + "\r\n")
	}
	switch {
	case c.closing:
		bw.WriteString(hdrConnClose)
	case c.h.minor == 0:
		bw.WriteString(hdrConnKeepAlive)
	}
	bw.WriteString("\r\n")
	w.err = bw.Flush()
}

// sanitizeValue keeps a header value on its line.
func sanitizeValue(v string) string {
	if strings.ContainsAny(v, "\r\n\x00") {
		return strings.NewReplacer("\r", " ", "\n", " ", "\x00", " ").Replace(v)
	}
	return v
}

// chargeRead counts n bytes read off a member and not written (chunk
// framing, a trailer section) as the body's bytes (readCharger).
func (w *h1Writer) chargeRead(n int64) { w.c.respM.add(w.c.info.CPU, w.c.cpuW, n) }

func (w *h1Writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(200)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody || len(p) == 0 {
		return len(p), nil
	}
	c := w.c
	if !w.chunked {
		if w.err = c.write(p); w.err != nil {
			return 0, w.err
		}
		c.respM.add(c.info.CPU, c.cpuW, int64(len(p)))
		return len(p), nil
	}
	c.wb = strconv.AppendInt(c.wb[:0], int64(len(p)), 16)
	c.wb = append(c.wb, "\r\n"...)
	if len(p) <= smallBody {
		c.wb = append(c.wb, p...)
		c.wb = append(c.wb, "\r\n"...)
		w.err = c.write(c.wb)
	} else if w.err = c.writev(c.wb, p, nowNano()); w.err == nil {
		w.err = c.write([]byte("\r\n"))
	}
	if w.err != nil {
		return 0, w.err
	}
	c.respM.add(c.info.CPU, c.cpuW, int64(len(p)))
	return len(p), nil
}

// Flush implements http.Flusher: nothing is buffered.
func (w *h1Writer) Flush() {
	if !w.wrote {
		w.WriteHeader(200)
	}
}

// finish ends the response: the last chunk and the trailers.
func (w *h1Writer) finish() {
	if !w.wrote {
		w.WriteHeader(200)
	}
	if w.err != nil || !w.chunked {
		return
	}
	bw := bufio.NewWriterSize(&connWriter{w.c}, 1024)
	bw.WriteString("0\r\n")
	declared := map[string]bool{}
	for _, v := range w.hdr["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			declared[http.CanonicalHeaderKey(strings.TrimSpace(k))] = true
		}
	}
	for k, vv := range w.hdr {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok && !declared[k] {
			continue
		}
		for _, v := range vv {
			bw.WriteString(name + ": " + sanitizeValue(v) + "\r\n")
		}
	}
	bw.WriteString("\r\n")
	w.err = bw.Flush()
}

// connWriter writes to a client connection under its write timeout.
type connWriter struct{ c *clientConn }

func (cw *connWriter) Write(p []byte) (int, error) {
	if err := cw.c.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// netHeader returns the fields of the net/http request the bridge builds:
// all but Host and the fields that are not forwarded, except Connection
// and TE. h1Request.Header reads the same fields in place.
func (h *reqHead) netHeader(b []byte) http.Header {
	hdr := make(http.Header, len(h.fields))
	for i := range h.fields {
		f := &h.fields[i]
		if !f.netField() {
			continue
		}
		k := http.CanonicalHeaderKey(string(f.name(b)))
		hdr[k] = append(hdr[k], string(f.value(b)))
	}
	return hdr
}

// netField reports whether the field is in the bridge's net/http request.
func (f *field) netField() bool {
	return f.kind != hHost && (!f.drop || f.kind == hConnection || f.kind == hTE)
}
