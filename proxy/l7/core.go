package l7

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// What the codecs share of serving a request, so that a behaviour is
// written once: the routing decision, local answers and their figures, the
// request body sent to an HTTP/1.1 member.

// action is what serves a request once its route is chosen (decide).
type action uint8

const (
	// actFail: answered locally with decision.status (no route, Select
	// chose none, no backend, no weighted backend to pick).
	actFail action = iota
	// actExt: the route changes, splits, inspects or redirects the
	// request (Route.extended): net/http values and serveExt.
	actExt
	// actLocal: the route's Handler answers, or its Gate's.
	actLocal
	// actRedirect: the route's redirect to HTTPS.
	actRedirect
	// actHTTP1: forwarded to an HTTP/1.1 member of decision.be.
	actHTTP1
	// actHTTP2: forwarded to an HTTP/2 member of decision.be without
	// PROXY protocol.
	actHTTP2
	// actMember: forwarded to a member of decision.be through net/http
	// values: an HTTP/2 member with PROXY protocol.
	actMember
)

// decision is a request's route and what serves it.
type decision struct {
	// route is the route chosen: Router's, Select's, or one answering
	// for a Gate that refused the request; with actFail the route that
	// failed, or nil when no route matched.
	route *Route
	act   action
	// status and out are the local answer of actFail.
	status int
	out    Outcome
	// be, opts and limit (the body limit, 0: none) are the backend of
	// actHTTP1, actHTTP2 and actMember.
	be    Backend
	opts  *BackendOptions
	limit int64
}

// decide chooses a request's route and what serves it, the same way for
// every codec: the listener's Router, the route's Select, its Gate, then
// by the route chosen: Ext or Inspect, a redirect to HTTPS, a Handler, a
// backend and its members' protocol. host and path are normalised
// (normalizeHost, cleanPath) and are not retained; req is read by Select
// and Gate. upgrade says that an HTTP/1.1 request asks to switch
// protocols: a route that only spreads requests over weighted backends
// then has its backend picked here, since only the HTTP/1.1 fast path
// relays upgrades (not one the route inspects, which net/http does).
// v is req as forwardFields reads it, and fw the request's scratch:
// Select and Gate read the fields forwardFields decides as the member
// receives them (routeRequest), the request id included, which fw keeps
// for the forwarding.
func (s *Server) decide(info *ConnInfo, ca *clientAddrs, req Request, v *reqView, fw *fwdScratch, host, path string, upgrade bool) decision {
	fw.idMade = false
	fw.rr = routeRequest{Request: req, v: v, ca: ca, fw: fw}
	req = &fw.rr
	var route *Route
	if info.Router != nil {
		if rt := info.Router(); rt != nil {
			route = rt.Route(host, path)
		}
	}
	if route == nil {
		return decision{act: actFail, status: 404, out: OutcomeNoRoute}
	}
	if route.Select != nil {
		sel := route
		if route = sel.Select(req, host, path); route == nil {
			return decision{route: sel, act: actFail, status: 404, out: OutcomeNoRoute}
		}
	}
	if g := route.gated(ca.addr, req); g != nil {
		return decision{route: g, act: actLocal}
	}
	be := route.Backend
	if upgrade && route.Inspect == nil && route.Ext.onlyBackends() {
		picked, ok := pickWeighted(route.Ext.Backends)
		if !ok || picked == nil {
			return decision{route: route, act: actFail, status: 500, out: OutcomeNoMember}
		}
		be = picked
	} else {
		switch {
		case route.extended():
			return decision{route: route, act: actExt}
		case route.Backend == nil && !route.RedirectHTTPS && route.Handler == nil:
			return decision{route: route, act: actFail, status: 503, out: OutcomeNoMember}
		}
	}
	switch {
	case route.RedirectHTTPS:
		return decision{route: route, act: actRedirect}
	case route.Handler != nil:
		return decision{route: route, act: actLocal}
	}
	d := decision{route: route, act: actMember, be: be, opts: be.Options()}
	d.limit = d.opts.MaxBodyBytes
	if d.limit <= 0 {
		d.limit = s.cfg.MaxBodyBytes
	}
	switch {
	case d.opts.Protocol == HTTP1 || d.opts.Protocol == HTTP1TLS:
		d.act = actHTTP1
	case h2Member(d.opts):
		d.act = actHTTP2
	}
	return d
}

// serveLocal answers a request with a route's own handler (a local
// Handler, a Gate's refusal) on the net/http path of every protocol,
// recording in stats the status and body bytes it wrote, as a member's
// response would be.
func serveLocal(w http.ResponseWriter, r *http.Request, h http.Handler, stats *RequestStats) {
	lw := localWriter{ResponseWriter: w}
	h.ServeHTTP(&lw, r)
	if lw.status == 0 {
		lw.status = http.StatusOK
	}
	stats.Status, stats.Outcome, stats.ResponseBytes = lw.status, OutcomeLocal, lw.n
	if abortedOutcome(w, r.Body) == OutcomeBodyLimit {
		// The client's stream was reset: nothing it wrote arrived.
		stats.Status, stats.Outcome, stats.ResponseBytes = 0, OutcomeBodyLimit, 0
	}
}

// localWriter counts what a local handler writes.
type localWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *localWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *localWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the codec's writer.
func (w *localWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countedBody counts the bytes a handler reads of a request body, for
// RequestStats.RequestBytes on the net/http path of HTTP/2 and HTTP/3
// (HTTP/1.x counts in its own body reader).
// With cpu (HTTP/3) it counts them in the tenant's CPU budget too.
// n is atomic: the goroutine that writes the body to an HTTP/2 member
// (h2RespBody.pump) may still read it after the member answered and the
// handler took the count.
type countedBody struct {
	io.ReadCloser
	n   atomic.Int64
	cpu CPU
	m   meter // Read's alone
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.n.Add(int64(n))
		b.m.add(b.cpu, WorkTLSBytes, int64(n))
	}
	return n, err
}

// chunkRoom is the room kept before each read of a body sent chunked,
// for the chunk-size line.
const chunkRoom = 20

// sendH1Body streams body to an HTTP/1.1 member through u: as it is, or
// chunked (then ended by the last chunk and the fields trailers appends).
// limit > 0 bounds the bytes sent (errBodyTooLarge); bt bounds each
// write. A failed read closes u: the member must not take a truncated
// body. HTTP/1.x clients through net/http and HTTP/2 clients on the fast
// path both send with it.
func sendH1Body(u *upConn, body io.Reader, chunked bool, limit int64, bt time.Duration, trailers func([]byte) []byte) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	write := func(b []byte) error {
		if err := u.setWriteDeadline(nowNano(), bt); err != nil {
			return err
		}
		_, err := u.nc.Write(b)
		return err
	}
	var sent int64
	for {
		off := 0
		if chunked {
			off = chunkRoom
		}
		n, rerr := body.Read(buf[off : len(buf)-2])
		sent += int64(n)
		if limit > 0 && sent > limit {
			u.close()
			return errBodyTooLarge
		}
		if n > 0 {
			out := buf[off : off+n]
			if chunked {
				line := strconv.AppendInt(buf[:0:off], int64(n), 16)
				line = append(line, '\r', '\n')
				start := off - len(line)
				copy(buf[start:], line)
				out = append(buf[start:off+n], '\r', '\n')
			}
			if err := write(out); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			u.close()
			return rerr
		}
	}
	if !chunked {
		return nil
	}
	end := append(buf[:0], "0\r\n"...)
	if trailers != nil {
		end = trailers(end)
	}
	return write(append(end, "\r\n"...))
}

// takeIdle takes an idle pooled connection of key for a request sent
// through net/http values or from an HTTP/2 client, passing over those
// idle for staleAfter that the member has closed (nil when there is
// none), and the pool. last, when not nil, is the caller's pool of its
// previous request (pools.poolOf).
func (s *Server) takeIdle(key poolKey, now int64, last *atomic.Pointer[memberPool]) (*upConn, *memberPool) {
	var p *memberPool
	if last != nil {
		p = s.pools.poolOf(key, last)
	} else {
		p = s.pools.get(key)
	}
	u := p.take(now, s.cfg.UpstreamIdleTimeout)
	for u != nil && now-u.idleAt >= staleAfter && u.closedByPeer() {
		u.close()
		u = p.take(now, s.cfg.UpstreamIdleTimeout)
	}
	return u, p
}

// httpsRedirect is the status of a route's redirect to HTTPS
// (Route.RedirectHTTPS): 301 for GET and HEAD, 308 for other methods,
// which must be repeated with their body.
func httpsRedirect(method string) int {
	if method == http.MethodGet || method == http.MethodHead {
		return http.StatusMovedPermanently
	}
	return http.StatusPermanentRedirect
}

// appendHTTPSOrigin appends the start of a redirect to HTTPS's Location:
// https://host, and the port unless it is 0 or 443.
func appendHTTPSOrigin(dst, host []byte, port uint16) []byte {
	dst = append(dst, "https://"...)
	dst = append(dst, host...)
	if port != 0 && port != 443 {
		dst = append(dst, ':')
		dst = strconv.AppendUint(dst, uint64(port), 10)
	}
	return dst
}
