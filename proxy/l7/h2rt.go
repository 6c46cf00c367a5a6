package l7

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"

	"golang.org/x/net/http2/hpack"
)

// h2Transport is the HTTP/2 client as an http.RoundTripper, for the
// round-trip path: HTTP/1.x clients of h2c and h2 members, and members
// with PROXY protocol.
type h2Transport struct{ cl *h2Client }

var _ http.RoundTripper = h2Transport{}

// RoundTrip implements http.RoundTripper. The backend's options travel in
// the request context (optsKey).
func (t h2Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	s := t.cl.s
	opts, _ := r.Context().Value(optsKey{}).(*BackendOptions)
	if opts == nil {
		opts = &BackendOptions{Protocol: H2C}
	}
	ap, err := netip.ParseAddrPort(r.URL.Host)
	if err != nil {
		closeBody(r)
		return nil, fmt.Errorf("%w: %w", ErrConnect, err)
	}
	key := keyOf(ap, opts.Protocol, opts)
	scheme := "http"
	if opts.Protocol == H2TLS {
		scheme = "https"
	}
	query := ""
	if r.URL.RawQuery != "" {
		query = "?" + r.URL.RawQuery
	}
	blk := appendPseudo(nil, r.Method, scheme, r.Host, r.URL.EscapedPath(), query)
	for k, vv := range r.Header {
		switch k {
		case "Host", "Content-Length", "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade":
			continue
		}
		for _, v := range vv {
			blk = appendLiteral(blk, k, v, true)
		}
	}
	hasBody := r.Body != nil && r.Body != http.NoBody
	if hasBody && r.ContentLength > 0 {
		blk = appendLiteral(blk, "content-length", strconv.FormatInt(r.ContentLength, 10), false)
	}
	ctx := r.Context()
	interim := interimOf(ctx)
	deadline := nowNano() + int64(rht(opts, s))
	for refusals := 0; ; refusals++ {
		uc, err := t.cl.acquire(ctx, key, opts, timeAt(deadline))
		if err != nil {
			closeBody(r)
			return nil, err
		}
		up := newH2UpStream(uc)
		b := &h2RespBody{up: up, cancelled: make(chan struct{})}
		b.stop = context.AfterFunc(ctx, func() {
			up.cancel()
			close(b.cancelled)
		})
		b.refs.Store(1)
		_, err = up.start(blk, !hasBody, nil)
		if err == nil && hasBody {
			b.refs.Add(1)
			go b.pump(r)
		}
		if err == nil {
			err = up.awaitHead(deadline, interim)
		}
		if err != nil {
			b.Close()
			if errors.Is(err, errH2Refused) && !hasBody && refusals < 2 {
				continue
			}
			if !hasBody {
				closeBody(r)
			}
			return nil, err
		}
		resp := &http.Response{
			Status: strconv.Itoa(up.status) + " " + http.StatusText(up.status), StatusCode: up.status,
			Proto: "HTTP/2.0", ProtoMajor: 2,
			Header: make(http.Header, len(up.fields)), ContentLength: -1,
			Body: b, Request: r,
		}
		for _, f := range up.fields {
			k := http.CanonicalHeaderKey(f.Name)
			resp.Header[k] = append(resp.Header[k], f.Value)
			switch f.Name {
			case "content-length":
				if n, ok := parseContentLength([]byte(f.Value)); ok {
					resp.ContentLength = n
				}
			case "trailer":
				for _, name := range splitList(f.Value) {
					if resp.Trailer == nil {
						resp.Trailer = make(http.Header)
					}
					resp.Trailer[http.CanonicalHeaderKey(name)] = nil
				}
			}
		}
		if r.Method == http.MethodHead {
			resp.ContentLength = 0
		}
		b.resp = resp
		return resp, nil
	}
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// splitList splits a comma-separated field value.
func splitList(v string) []string {
	var out []string
	for len(v) > 0 {
		var item string
		item, v, _ = cutByte(v, ',')
		if item = trimOWS(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func cutByte(s string, c byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// h2RespBody is a member's response body. The stream is closed when both
// the body is closed and the request body's writer is done.
type h2RespBody struct {
	up   *h2UpStream
	stop func() bool
	// cancelled is closed when the cancel that the request's context
	// started is done: st is recycled only after it.
	cancelled chan struct{}
	resp      *http.Response
	refs      atomic.Int32
	closed    atomic.Bool
	eof       bool
	// unsent: the bytes of the trailers' header block, read and not
	// returned as data (copyResponse charges them).
	unsent int64
}

func (b *h2RespBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.up.read(p)
	if err == io.EOF {
		b.eof = true
		b.unsent += b.up.takeUnsent()
		if b.resp != nil && len(b.up.trailer) > 0 {
			if b.resp.Trailer == nil {
				b.resp.Trailer = make(http.Header)
			}
			for _, f := range b.up.trailer {
				k := http.CanonicalHeaderKey(f.Name)
				b.resp.Trailer[k] = append(b.resp.Trailer[k], f.Value)
			}
		}
	}
	return n, err
}

// Close ends the stream unless it is done.
func (b *h2RespBody) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if !b.stop() {
		// The request's context ended and its cancel of up runs or ran;
		// up is not recycled under it.
		<-b.cancelled
	}
	if !b.eof {
		b.up.cancel()
	}
	b.unref()
	return nil
}

func (b *h2RespBody) unref() {
	if b.refs.Add(-1) == 0 {
		b.up.close()
	}
}

// pumpStarts, when set, is called by every pump as it starts: tests
// hold a pump back to start it after its stream ended.
var pumpStarts atomic.Pointer[func()]

// pump writes the request body, then its trailers, to the member.
func (b *h2RespBody) pump(r *http.Request) {
	defer b.unref()
	defer closeBody(r)
	if h := pumpStarts.Load(); h != nil {
		(*h)()
	}
	up := b.up
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := r.Body.Read(buf)
		if n > 0 {
			if err := up.write(buf[:n], false); err != nil {
				return
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			up.cancel() // the member must not take a truncated body
			return
		}
	}
	if len(r.Trailer) > 0 {
		var tf []hpack.HeaderField
		for k, vv := range r.Trailer {
			for _, v := range vv {
				tf = append(tf, hpack.HeaderField{Name: lowerASCII(k), Value: v})
			}
		}
		_ = up.writeTrailers(tf, buf[:0])
		return
	}
	_ = up.write(nil, true)
}

func lowerASCII(s string) string { return string(appendLower(nil, s)) }
