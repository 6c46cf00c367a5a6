package l7

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The round-trip path serves HTTP/2 clients, and HTTP/1.x clients whose
// backend speaks h2c or whose route has a local Handler. It works on
// net/http values; the HTTP/1.1 fast path does not come here.

type optsKey struct{}

// dialConn dials a member for the net/http transports: the backend's
// options travel in the request context.
func (s *Server) dialConn(ctx context.Context, addr string, pp *proxyAddrs, tlsDial bool) (net.Conn, error) {
	opts, _ := ctx.Value(optsKey{}).(*BackendOptions)
	if opts == nil {
		opts = &BackendOptions{}
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnect, err)
	}
	proto := HTTP1
	if tlsDial && opts.Protocol == HTTP1TLS {
		proto = HTTP1TLS
	}
	u, err := s.dial(ctx, keyOf(ap, proto, opts), opts, pp)
	if err != nil {
		return nil, err
	}
	mc := &memberConn{Conn: u.nc}
	if opts.Budget != nil {
		mc.u = u
	}
	return mc, nil
}

// memberConn is a member connection of the net/http transports. It
// counts the bytes read off it (interimTrace tells the interim responses'
// from them) and, with u, gives its descriptor back to its budget when
// it closes.
type memberConn struct {
	net.Conn
	u    *upConn
	read atomic.Int64
}

func (c *memberConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *memberConn) Close() error {
	if c.u == nil {
		return c.Conn.Close()
	}
	c.u.close()
	return nil
}

// h1TransportReadBuf is the read buffer of the net/http transports' member
// connections: what they may have read past a response head.
const h1TransportReadBuf = 4 << 10

// newH1Transport returns the HTTP/1.1 transport for round trips; pp is set
// for the private transport of one client connection.
func (s *Server) newH1Transport(pp *proxyAddrs) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return s.dialConn(ctx, addr, pp, false)
		},
		DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return s.dialConn(ctx, addr, pp, true)
		},
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableCompression:     true,
		MaxIdleConnsPerHost:    s.cfg.MaxIdlePerMember,
		IdleConnTimeout:        s.cfg.UpstreamIdleTimeout,
		MaxResponseHeaderBytes: int64(s.cfg.MaxHeaderBytes),
		ReadBufferSize:         h1TransportReadBuf,
		ExpectContinueTimeout:  time.Second,
	}
}

// connScope holds the transports private to one client connection: those
// of PROXY protocol backends, whose connections carry the client's address.
type connScope struct {
	s  *Server
	pp proxyAddrs
	// cpu is the connection's tenant's CPU budget (ConnInfo.CPU, may be
	// nil): the engine counts there the work it adds of its own, the
	// copies of mirrored requests, and the interim responses members
	// send on the round-trip path (interimCharge), whose units of bytes
	// count cpuW (cpuWeight; WorkTLSBytes for HTTP/3).
	cpu  CPU
	cpuW int64
	mu   sync.Mutex
	h1   *http.Transport
	h2   *h2Client
}

func (sc *connScope) transport(opts *BackendOptions) http.RoundTripper {
	h2 := opts.Protocol == H2C || opts.Protocol == H2TLS
	if opts.ProxyProtocol == 0 {
		if h2 {
			return h2Transport{sc.s.h2up}
		}
		return h1RoundTripper{sc.s}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if h2 {
		if sc.h2 == nil {
			sc.h2 = newH2Client(sc.s, &sc.pp)
		}
		return h2Transport{sc.h2}
	}
	if sc.h1 == nil {
		sc.h1 = sc.s.newH1Transport(&sc.pp)
	}
	return sc.h1
}

func (sc *connScope) close() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.h1 != nil {
		sc.h1.CloseIdleConnections()
	}
	if sc.h2 != nil {
		sc.h2.close()
	}
}

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Transfer-Encoding",
	"Upgrade", "Proxy-Authorization", "Proxy-Authenticate", "Http2-Settings",
}

// removeHop deletes the hop-by-hop fields of h and the ones its
// Connection field lists.
func removeHop(h http.Header) {
	for _, v := range h["Connection"] {
		for _, t := range strings.Split(v, ",") {
			if t = textproto.TrimString(t); t != "" {
				switch http.CanonicalHeaderKey(t) {
				case "Host", "Content-Length":
				default:
					h.Del(t)
				}
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// limitedBody fails a request body that grows past its limit.
type limitedBody struct {
	io.ReadCloser
	left int64
	hit  atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Read one byte more to tell an exact fit from an excess.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			b.hit.Store(true)
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// rtRequest is an inbound request on the round-trip path.
type rtRequest struct {
	// cpu, when set, counts the response body's bytes in the tenant's
	// CPU budget as they are copied (HTTP/3: no codec of ours does).
	cpu     CPU
	r       *http.Request
	host    string // normalised, for the forwarding fields: the raw Host
	path    string // escaped path to forward
	ca      *clientAddrs
	scope   *connScope
	stats   *RequestStats
	limit   int64
	retries int
	// reqEdit changes the fields sent to the member, then beEdit (the
	// backend's); upHost replaces the Host; deadline bounds all attempts
	// (zero: none); retry sends failed attempts again (nil: never).
	reqEdit, beEdit *HeaderEdit
	upHost          string
	deadline        time.Time
	retry           *Retry
	// fw is the request's scratch that decide used (nil: none), which
	// holds the request id route matching saw.
	fw *fwdScratch
	// interim charges the interim responses of every attempt.
	interim interimCharge
}

// interimKey is the context key of a round trip's *interimCharge.
type interimKey struct{}

// interimCharge charges the tenant of a round trip for the interim (1xx)
// responses members send before the final one, which no writer sends
// on: a member may send them until the response head timeout. Our
// transports read them on the caller's goroutine, net/http's on its
// connection's reader, and attempts may overlap: the count is atomic,
// and each call charges the units of 1<<WorkBytesShift bytes its bytes
// complete.
type interimCharge struct {
	cpu  CPU
	cpuW int64
	n    atomic.Int64
}

// add charges k bytes of interim responses (and may wait there).
func (ic *interimCharge) add(k int64) {
	if ic == nil || ic.cpu == nil || k <= 0 {
		return
	}
	n := ic.n.Add(k)
	if u := n>>WorkBytesShift - (n-k)>>WorkBytesShift; u > 0 {
		ic.cpu.Relay(u * ic.cpuW)
	}
}

// interimOf returns the interim charge of the round trip of ctx, nil
// when none is set.
func interimOf(ctx context.Context) func(n int64) {
	ic, _ := ctx.Value(interimKey{}).(*interimCharge)
	if ic == nil || ic.cpu == nil {
		return nil
	}
	return ic.add
}

// interimTrace tells net/http's transport to report the interim
// responses it reads for one attempt to ic, which charges their bytes:
// those read off the member connection (memberConn) from the attempt's
// start to each interim head, less what the connection's buffer may hold
// past it (counted again as the final head or body), or their fields as
// HTTP/1.1 lines when those are more. The transport does not give a
// head's bytes, and its fields leave out some (a reason phrase, the
// blanks around a value). With the trace, the transport no longer counts
// the interim heads against MaxResponseHeaderBytes together with the
// final one: each head is bounded by it, and their number by the
// response head timeout, as on our transports.
func interimTrace(ctx context.Context, ic *interimCharge) context.Context {
	// GotConn runs before the transport hands the request to the
	// connection's reader, which runs Got1xxResponse.
	var conn *memberConn
	var base, lines, charged int64
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if mc, ok := info.Conn.(*memberConn); ok {
				conn, base = mc, mc.read.Load()
			}
		},
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			lines += int64(len("HTTP/1.1 100 \r\n\r\n"))
			for k, vv := range h {
				for _, v := range vv {
					lines += int64(len(k) + len(": \r\n") + len(v))
				}
			}
			n := lines
			if conn != nil {
				n = max(n, conn.read.Load()-base-h1TransportReadBuf)
			}
			ic.add(n - charged)
			charged = n
			return nil
		},
	})
}

// proxyHTTP forwards r to a member of be through a net/http transport and
// copies the response to w, flushing as data arrives (streaming, gRPC).
func (s *Server) proxyHTTP(w http.ResponseWriter, q *rtRequest, be Backend, opts *BackendOptions) {
	r := q.r
	if q.limit > 0 && r.ContentLength > q.limit {
		s.failHTTP(w, q, 413, OutcomeClientError)
		return
	}
	rtr, ok := s.newRetrier(q, q.retry)
	if !ok {
		s.failHTTP(w, q, 400, OutcomeClientError)
		return
	}
	defer rtr.done()
	var body io.ReadCloser
	var lb *limitedBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = r.Body
		if q.limit > 0 {
			lb = &limitedBody{ReadCloser: r.Body, left: q.limit}
			body = lb
		}
	}
	scheme := "http"
	if opts.Protocol == HTTP1TLS || opts.Protocol == H2TLS {
		scheme = "https"
	}
	rht := opts.ResponseHeaderTimeout
	if rht <= 0 {
		rht = s.cfg.ResponseHeaderTimeout
	}
	unescaped, err := url.PathUnescape(q.path)
	if err != nil {
		s.failHTTP(w, q, 400, OutcomeClientError)
		return
	}
	fw := q.fw
	if fw == nil {
		fw = new(fwdScratch)
	}
	var key []byte
	if name := opts.HashHeader; name != "" {
		// Host and a forwarding field are hashed as the member receives
		// them, by the rule of the fast paths (routeRequest.hashKey) on
		// this request's fields, before this route's edits.
		v := reqView{authority: unsafeBytes(r.Host), fieldsView: fieldsView{hdr: r.Header}}
		rr := routeRequest{v: &v, ca: q.ca, fw: fw}
		var decided bool
		if key, decided = rr.hashKey(name); !decided {
			if v := r.Header.Get(name); v != "" {
				key = []byte(v)
			}
		}
	}
	hdr, id := forwardHeader(r.Header, q.ca, r.Host, fw)
	if q.stats.AccessLog > 0 {
		q.stats.RequestID = id
	}
	if q.reqEdit != nil {
		q.reqEdit.apply(hdr)
	}
	if q.beEdit != nil {
		q.beEdit.apply(hdr)
	}
	upHost := r.Host
	if q.upHost != "" {
		upHost = q.upHost
	}
	rt := q.scope.transport(opts)
	q.interim.cpu, q.interim.cpuW = q.scope.cpu, q.scope.cpuW
	// What every attempt's context carries, made once.
	actx := context.WithValue(context.WithValue(r.Context(), optsKey{}, opts), interimKey{}, &q.interim)
	_, netHTTP := rt.(*http.Transport)
	for retries := q.retries; ; retries-- {
		m, ok := be.Pick(q.ca.addr, key)
		if !ok {
			s.failHTTP(w, q, 503, OutcomeNoMember)
			return
		}
		q.stats.Member, q.stats.Pool = m.Addr(), opts.Pool
		body := trailerFiltered(rtr.nextBody(body), r.Trailer, q.ca.certField)
		out := &http.Request{
			Method:        r.Method,
			URL:           &url.URL{Scheme: scheme, Host: m.Addr().String(), Path: unescaped, RawPath: q.path, RawQuery: r.URL.RawQuery},
			Proto:         "HTTP/1.1",
			ProtoMajor:    1,
			ProtoMinor:    1,
			Header:        hdr,
			Body:          body,
			ContentLength: r.ContentLength,
			Host:          upHost,
			Trailer:       r.Trailer,
		}
		if body == nil {
			out.ContentLength = 0
		}
		wait := rht
		if !q.deadline.IsZero() {
			if wait = min(rht, time.Until(q.deadline)); wait <= 0 {
				m.Done(nil, 0, 0)
				s.failHTTP(w, q, 504, OutcomeUpstreamTimeout)
				return
			}
		}
		ctx := actx
		if netHTTP {
			ctx = interimTrace(ctx, &q.interim)
		}
		ctx, cancel := context.WithCancel(ctx)
		var timedOut atomic.Bool
		timer := time.AfterFunc(wait, func() { timedOut.Store(true); cancel() })
		t0 := time.Now()
		resp, err := rt.RoundTrip(out.WithContext(ctx))
		timer.Stop()
		d := time.Since(t0)
		if err != nil {
			cancel()
			switch {
			case lb != nil && lb.hit.Load():
				m.Done(nil, 0, d)
				s.failHTTP(w, q, 413, OutcomeClientError)
				return
			case timedOut.Load():
				err = fmt.Errorf("%w: %w", ErrUpstreamTimeout, err)
			case r.Context().Err() != nil:
				m.Done(nil, 0, d)
				q.stats.Outcome = abortedOutcome(w, r.Body)
				return
			case !errors.Is(err, ErrConnect) && !errors.Is(err, ErrUpstreamTimeout) &&
				!errors.Is(err, ErrUpstreamClosed) && !errors.Is(err, ErrUpstreamProtocol):
				err = fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
			}
			m.Done(err, 0, d)
			if errors.Is(err, ErrConnect) && retries > 0 {
				continue
			}
			if retriesError(err) && rtr.may(q) {
				if !rtr.again(q) {
					q.stats.Outcome = OutcomeAborted
					return
				}
				continue
			}
			s.failHTTP(w, q, statusFor(err), outcomeFor(err))
			return
		}
		if rtr != nil && rtr.pol.retriesStatus(resp.StatusCode) && rtr.may(q) {
			discardResponse(w, resp, q.cpu)
			cancel()
			m.Done(nil, resp.StatusCode, d)
			if !rtr.again(q) {
				q.stats.Outcome = OutcomeAborted
				return
			}
			continue
		}
		q.stats.Upstream = d
		if !respHeader(w.Header(), resp) {
			discardResponse(w, resp, q.cpu)
			cancel()
			m.Done(ErrUpstreamProtocol, resp.StatusCode, d)
			s.failHTTP(w, q, 502, OutcomeUpstreamError)
			return
		}
		n, upErr := copyResponse(w, resp, q.cpu)
		cancel()
		q.stats.Status = resp.StatusCode
		q.stats.ResponseBytes = n
		q.stats.Outcome = relayOutcome(upErr)
		m.Done(nil, resp.StatusCode, d)
		return
	}
}

func (s *Server) failHTTP(w http.ResponseWriter, q *rtRequest, code int, out Outcome) {
	writeErrorPage(w, code)
	q.stats.Status = code
	q.stats.Outcome = out
}

// copyResponse relays a member's response to w, whose fields respHeader
// filled, trailers included (those trailerKept keeps); with cpu its body
// bytes count there (QUIC's crypto: WorkTLSBytes).
func copyResponse(w http.ResponseWriter, resp *http.Response, cpu CPU) (int64, error) {
	var m meter
	defer resp.Body.Close()
	h := w.Header()
	var declared map[string]bool
	for _, k := range h["Trailer"] {
		if declared == nil {
			declared = map[string]bool{}
		}
		declared[k] = true
	}
	w.WriteHeader(resp.StatusCode)
	// A body of unknown length may be a stream (gRPC, server-sent
	// events): flush every piece. Otherwise let the server coalesce.
	stream := resp.ContentLength < 0
	rc := http.NewResponseController(w)
	if stream {
		_ = rc.Flush()
	}
	bufp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bufp)
	buf := *bufp
	var n int64
	var err error
	// The framing and trailer section of an HTTP/1.1 member's chunked
	// body, and an HTTP/2 member's trailers, are read and parsed as the
	// body's bytes, whether or not anything of them goes on: charged
	// after each read.
	hb, _ := resp.Body.(unsentBody)
	var unsent int64
	for {
		k, rerr := resp.Body.Read(buf)
		if hb != nil {
			if u := hb.unsentBytes(); u > unsent {
				if cpu != nil {
					m.add(cpu, WorkTLSBytes, u-unsent)
				} else {
					chargeRead(w, u-unsent)
				}
				unsent = u
			}
		}
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			m.add(cpu, WorkTLSBytes, int64(k))
			if stream && rerr == nil {
				_ = rc.Flush()
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				err = rerr
			}
			break
		}
	}
	filterRespTrailer(resp.Trailer, resp.Header)
	for k, vv := range resp.Trailer {
		if declared[k] {
			h[k] = vv
		} else {
			h[http.TrailerPrefix+k] = vv
		}
	}
	return n, err
}

// unsentBody is a member's response body that reads bytes it does not
// return as data (chunk framing, trailers): unsentBytes counts them so
// far.
type unsentBody interface{ unsentBytes() int64 }

func (b *h1RespBody) unsentBytes() int64 { return b.unsent }
func (b *h2RespBody) unsentBytes() int64 { return b.unsent }

// readCharger is a writer of a codec of ours that charges the tenant
// for bytes read off a member that it does not send as body.
type readCharger interface{ chargeRead(n int64) }

// chargeRead charges n such bytes to the writer under w's wrappers.
func chargeRead(w http.ResponseWriter, n int64) {
	for {
		if rc, ok := w.(readCharger); ok {
			rc.chargeRead(n)
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// trailerBody filters a request's trailers (the Trailer map its body's
// reader fills at the end of the body) in place when the body ends, to
// the fields trailerKept keeps, before the transport reads them.
type trailerBody struct {
	io.ReadCloser
	trailer   http.Header
	certField string
}

// trailerFiltered wraps body in a trailerBody when it may carry trailers.
func trailerFiltered(body io.ReadCloser, trailer http.Header, certField string) io.ReadCloser {
	if body == nil || trailer == nil {
		return body
	}
	return &trailerBody{ReadCloser: body, trailer: trailer, certField: certField}
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		filterTrailer(b.trailer, b.certField)
	}
	return n, err
}

// filterTrailer deletes the fields of h that trailerKept does not keep.
func filterTrailer(h http.Header, certField string) {
	for k := range h {
		if !trailerKept(unsafeBytes(k), certField, nil) {
			delete(h, k)
		}
	}
}
