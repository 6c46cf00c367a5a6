package l7

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
)

// h1RoundTripper sends net/http requests (from HTTP/2 clients) to HTTP/1.1
// members over the shared member pools, on the caller's goroutine: no
// reader or writer goroutine per connection, unlike http.Transport.
type h1RoundTripper struct {
	s *Server
}

var wbufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (rt h1RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	s := rt.s
	ctx := req.Context()
	opts, _ := ctx.Value(optsKey{}).(*BackendOptions)
	if opts == nil {
		opts = &BackendOptions{}
	}
	ap, err := netip.ParseAddrPort(req.URL.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnect, err)
	}
	key := keyOf(ap, opts.Protocol, opts)
	bp := wbufs.Get().(*[]byte)
	head := appendHTTPRequest((*bp)[:0], req)
	*bp = head
	defer wbufs.Put(bp)

	now := nowNano()
	u, p := s.takeIdle(key, now, nil)
	reused := true
	if u == nil {
		if u, err = s.dial(ctx, key, opts, nil); err != nil {
			return nil, err
		}
		reused = false
	}
	// A cancelled request (stream reset) unblocks the member connection.
	stop := context.AfterFunc(ctx, func() { _ = u.nc.SetDeadline(aLongTimeAgo) })
	hasBody := req.Body != nil && req.Body != http.NoBody
	interim := interimOf(ctx)
	for {
		u.got, u.r, u.w = 0, 0, 0
		u.resp.reset()
		var bodyDone chan error
		err = u.setWriteDeadline(now, s.cfg.BodyTimeout)
		if err == nil {
			_, err = u.nc.Write(head)
		}
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
		}
		if err == nil && hasBody {
			bodyDone = make(chan error, 1)
			go func() { bodyDone <- writeH1Body(u, req, s.cfg.BodyTimeout) }()
		}
		if err == nil {
			err = readH1Head(u, now, rht(opts, s), s.cfg.MaxHeaderBytes, interim)
		}
		if err == nil {
			return h1Response(s, req, u, p, bodyDone, stop), nil
		}
		u.close()
		if bodyDone != nil {
			<-bodyDone
		}
		if reused && !hasBody && u.got == 0 && !isTimeout(err) && ctx.Err() == nil {
			reused = false
			if u, err = s.dial(ctx, key, opts, nil); err != nil {
				stop()
				return nil, err
			}
			continue
		}
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
}

func rht(opts *BackendOptions, s *Server) time.Duration {
	if opts.ResponseHeaderTimeout > 0 {
		return opts.ResponseHeaderTimeout
	}
	return s.cfg.ResponseHeaderTimeout
}

// appendHTTPRequest appends the HTTP/1.1 head of req. Field values with
// line breaks cannot come from the HTTP/2 server; they are refused there.
func appendHTTPRequest(b []byte, req *http.Request) []byte {
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, req.Host...)
	b = append(b, "\r\n"...)
	for k, vv := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, sanitizeValue(v)...)
			b = append(b, "\r\n"...)
		}
	}
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		if req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
			b = append(b, "Content-Length: 0\r\n"...)
		}
	case req.ContentLength >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
		b = append(b, "\r\n"...)
	default:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(b, "\r\n"...)
}

// writeH1Body streams a request body, chunked when its length is unknown,
// with the request's trailers.
func writeH1Body(u *upConn, req *http.Request, bt time.Duration) error {
	return sendH1Body(u, req.Body, req.ContentLength < 0, 0, bt, func(end []byte) []byte {
		for k, vv := range req.Trailer {
			for _, v := range vv {
				end = append(end, k+": "+sanitizeValue(v)+"\r\n"...)
			}
		}
		return end
	})
}

// readH1Head reads a final response head, skipping interim responses;
// interim, when not nil, is told the bytes of each (to charge them).
func readH1Head(u *upConn, now int64, rht time.Duration, max int, interim func(n int64)) error {
	if err := u.setReadDeadline(now, rht); err != nil {
		return err
	}
	for {
		done, ok := u.resp.parse(u.rb[u.r:u.w], max)
		if !ok {
			return ErrUpstreamProtocol
		}
		if done {
			if u.resp.status >= 200 {
				return nil
			}
			if u.resp.status == 101 {
				return ErrUpstreamProtocol
			}
			if interim != nil {
				interim(int64(u.resp.n))
			}
			u.r += u.resp.n
			u.resp.reset()
			continue
		}
		if err := u.fill(); err != nil {
			return upstreamReadError(err)
		}
	}
}

// h1Response turns the parsed head on u into an http.Response whose body
// reads from u and hands u back to its pool at the end.
func h1Response(s *Server, req *http.Request, u *upConn, p *memberPool, bodyDone chan error, stop func() bool) *http.Response {
	rh := &u.resp
	b := u.rb[u.r : u.r+rh.n]
	hdr := make(http.Header, len(rh.fields))
	for i := range rh.fields {
		f := &rh.fields[i]
		if f.drop {
			continue
		}
		k := textproto.CanonicalMIMEHeaderKey(string(f.name(b)))
		hdr[k] = append(hdr[k], string(f.value(b)))
	}
	delete(hdr, "Transfer-Encoding")
	resp := &http.Response{
		Status:        strconv.Itoa(rh.status) + " " + http.StatusText(rh.status),
		StatusCode:    rh.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hdr,
		ContentLength: -1,
		Request:       req,
	}
	body := &h1RespBody{s: s, u: u, p: p, bodyDone: bodyDone, stop: stop, resp: resp, framing: rh.framing(req.Method == http.MethodHead)}
	if body.framing == bodyLength {
		resp.ContentLength = rh.contentLength
		body.left = rh.contentLength
	}
	if body.framing == bodyNone {
		resp.ContentLength = 0
	}
	if vv := hdr["Trailer"]; len(vv) > 0 {
		resp.Trailer = http.Header{}
		for _, v := range vv {
			for _, k := range strings.Split(v, ",") {
				// A name the Connection fields list is not announced
				// (trailerKept; copyResponse filters the rest).
				if k = strings.TrimSpace(k); k != "" && trailerKept(unsafeBytes(k), "", rh.conn.names) {
					resp.Trailer[http.CanonicalHeaderKey(k)] = nil
				}
			}
		}
		delete(hdr, "Trailer")
	}
	u.r += rh.n
	resp.Body = body
	body.reusable = rh.reusable() && body.framing != bodyClose
	return resp
}

// h1RespBody is the body of a response from a pooled member connection.
type h1RespBody struct {
	s        *Server
	u        *upConn
	p        *memberPool
	resp     *http.Response
	bodyDone chan error
	stop     func() bool
	framing  uint8
	left     int64
	ck       chunked
	trailer  []byte
	// unsent: the bytes of a chunked body read and parsed but not
	// returned as data (chunk-size lines with their extensions, the
	// CRLFs, the trailer section); copyResponse charges them, as no
	// writer sends them as body.
	unsent   int64
	reusable bool
	err      error
	closed   bool
}

func (b *h1RespBody) Read(out []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	u := b.u
	for {
		switch b.framing {
		case bodyNone:
			return 0, b.end(nil)
		case bodyLength:
			if b.left == 0 {
				return 0, b.end(nil)
			}
		}
		if u.r == u.w {
			u.r, u.w = 0, 0
			err := u.setReadDeadline(nowNano(), b.s.cfg.BodyTimeout)
			if err == nil {
				err = u.fill()
			}
			if err != nil {
				if b.framing == bodyClose && errors.Is(err, io.EOF) {
					return 0, b.end(nil)
				}
				return 0, b.end(upstreamReadError(err))
			}
		}
		in := u.rb[u.r:u.w]
		switch b.framing {
		case bodyLength:
			n := copy(out, in[:min(int64(len(in)), b.left)])
			u.r += n
			b.left -= int64(n)
			return n, nil
		case bodyClose:
			n := copy(out, in)
			u.r += n
			return n, nil
		}
		if len(in) > len(out) {
			in = in[:len(out)]
		}
		inTrailer := b.ck.inTrailer()
		n, data, err := b.ck.step(in)
		if inTrailer {
			b.trailer = append(b.trailer, in[:n]...)
		}
		if !data {
			b.unsent += int64(n)
		}
		u.r += n
		if err != nil {
			return 0, b.end(ErrUpstreamProtocol)
		}
		if data {
			copy(out, in[:n])
			return n, nil
		}
		if b.ck.done() {
			b.parseTrailer()
			return 0, b.end(nil)
		}
	}
}

// parseTrailer fills resp.Trailer from the trailer section, without the
// fields the head's Connection fields name (copyResponse filters the
// rest).
func (b *h1RespBody) parseTrailer() {
	t := b.trailer
	for len(t) > 2 {
		i := strings.Index(string(t), "\r\n")
		if i < 0 {
			break
		}
		line := t[:i]
		t = t[i+2:]
		k, v, ok := strings.Cut(string(line), ":")
		if !ok || !trailerKept(unsafeBytes(textproto.TrimString(k)), "", b.u.resp.conn.names) {
			continue
		}
		if b.resp.Trailer == nil {
			b.resp.Trailer = http.Header{}
		}
		b.resp.Trailer.Add(textproto.TrimString(k), textproto.TrimString(v))
	}
}

// end settles the connection once the body ended or failed.
func (b *h1RespBody) end(err error) error {
	if b.err != nil {
		return b.err
	}
	if err == nil {
		b.err = io.EOF
	} else {
		b.err = err
	}
	u := b.u
	// A stop that comes too late means a cancellation has set or is
	// setting a past deadline on u: do not reuse it.
	stopped := b.stop()
	reusable := stopped && err == nil && b.reusable && u.r == u.w
	if b.bodyDone != nil {
		if !reusable {
			u.close()
		}
		if berr := <-b.bodyDone; berr != nil {
			reusable = false
		}
	}
	if reusable {
		u.idleAt = nowNano()
		// Disarm the deadlines of an idle connection: armed timers of
		// hundreds of pooled connections cost more than re-arming.
		_ = u.nc.SetDeadline(time.Time{})
		u.rdl, u.wdl = 0, 0
		if kept, _ := b.p.put(u, b.s.cfg.MaxIdlePerMember); kept {
			return b.err
		}
	}
	u.close()
	return b.err
}

func (b *h1RespBody) Close() error {
	if b.err == nil {
		_ = b.end(errors.New("body closed early"))
		b.u.close()
	}
	return nil
}
