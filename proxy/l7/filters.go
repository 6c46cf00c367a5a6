package l7

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Routes that choose by the method, headers or query of a request, split
// traffic by weight, or change the request or its response take the
// net/http path of both HTTP versions: RouteExt is applied in one place,
// serveExt. Routes without them keep the fast paths.

// RouteExt is what a route does beyond sending to one backend. A
// published value is never modified.
type RouteExt struct {
	// Backends, when set, replace Route.Backend: each request goes to one
	// of them, chosen at random by weight. A nil Backend stands for an
	// unusable one: its share of requests is answered with 500, as are all
	// requests when every weight is 0.
	Backends []WeightedBackend
	// RequestHeaders change the request's fields before it is forwarded,
	// ResponseHeaders the response's before it is relayed.
	RequestHeaders, ResponseHeaders *HeaderEdit
	// Redirect answers the request with a redirect.
	Redirect *Redirect
	// RewriteHost replaces the Host sent to the member; RewritePath the
	// path.
	RewriteHost string
	RewritePath *PathChange
	// Prefix is the path prefix the route matched ("" for "/" or a route
	// that is not a prefix), for PathChange.Prefix.
	Prefix string
	// Mirrors receive copies of a share of the requests.
	Mirrors []Mirror
	// RequestTimeout bounds the time from the request to the response
	// head over all attempts; BackendTimeout one attempt. 0: the
	// engine's and backend's own timeouts.
	RequestTimeout, BackendTimeout time.Duration
	// CORS answers preflights and marks the responses of allowed
	// origins (NewCORS).
	CORS *CORS
	// Retry sends failed attempts again (see Retry); nil: never.
	Retry *Retry
}

// onlyBackends reports whether e does nothing but spread requests over
// weighted backends.
func (e *RouteExt) onlyBackends() bool {
	return e != nil && len(e.Backends) > 0 && e.RequestHeaders == nil && e.ResponseHeaders == nil && e.Redirect == nil &&
		e.RewriteHost == "" && e.RewritePath == nil && len(e.Mirrors) == 0 && e.RequestTimeout == 0 && e.BackendTimeout == 0 &&
		e.Retry == nil && e.CORS == nil && !slices.ContainsFunc(e.Backends, func(b WeightedBackend) bool { return b.RequestHeaders != nil })
}

// WeightedBackend is one backend of a route and its weight.
type WeightedBackend struct {
	Backend Backend
	Weight  uint32
	// RequestHeaders change the request's fields when it goes to this
	// backend, after RouteExt.RequestHeaders.
	RequestHeaders *HeaderEdit
}

// HeaderEdit sets, adds and removes header fields. Names are canonical
// (textproto.CanonicalMIMEHeaderKey). Add appends to a field's value,
// comma-separated.
type HeaderEdit struct {
	Set, Add []HeaderField
	Remove   []string
}

// HeaderField is one field name and value.
type HeaderField struct{ Name, Value string }

func (e *HeaderEdit) apply(h http.Header) {
	for _, f := range e.Set {
		h[f.Name] = []string{f.Value}
	}
	for _, f := range e.Add {
		if old := h[f.Name]; len(old) > 0 {
			h[f.Name] = []string{strings.Join(old, ",") + "," + f.Value}
		} else {
			h[f.Name] = []string{f.Value}
		}
	}
	for _, n := range e.Remove {
		delete(h, n)
	}
}

// PathChange replaces a path: the whole of it, or (Prefix) the prefix the
// route matched, keeping the rest.
type PathChange struct {
	Prefix bool
	Value  string
}

// apply returns path changed; prefix is the matched prefix ("" for "/").
func (pc *PathChange) apply(path, prefix string) string {
	if !pc.Prefix {
		return pc.Value
	}
	rest := path // a prefix matches by whole segments, or not at all
	if path == prefix || strings.HasPrefix(path, prefix+"/") {
		rest = path[len(prefix):]
	}
	out := pc.Value
	switch {
	case rest == "":
	case strings.HasSuffix(out, "/"):
		out += rest[1:]
	default:
		out += rest
	}
	if out == "" {
		return "/"
	}
	return out
}

// Redirect describes the Location of a redirect.
type Redirect struct {
	// Scheme and Hostname are "" to keep the request's.
	Scheme, Hostname string
	// Port is 0 for the scheme's well-known port when Scheme is set, and
	// the listener's port otherwise.
	Port uint16
	// Path is nil to keep the request's.
	Path *PathChange
	// Status is 301, 302, 303, 307 or 308.
	Status int
}

// location returns the redirect's Location for a request.
func (rd *Redirect) location(tls bool, listenPort uint16, host, path, rawQuery, prefix string) string {
	scheme := rd.Scheme
	if scheme == "" {
		scheme = "http"
		if tls {
			scheme = "https"
		}
	}
	hostname := rd.Hostname
	if hostname == "" {
		hostname = host
	}
	if strings.Contains(hostname, ":") && !strings.HasPrefix(hostname, "[") {
		hostname = "[" + hostname + "]"
	}
	port := rd.Port
	if port == 0 && rd.Scheme == "" {
		port = listenPort
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(hostname)
	if port != 0 && !(scheme == "http" && port == 80) && !(scheme == "https" && port == 443) {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(int(port)))
	}
	if rd.Path != nil {
		path = rd.Path.apply(path, prefix)
	}
	b.WriteString(path)
	if rawQuery != "" {
		b.WriteByte('?')
		b.WriteString(rawQuery)
	}
	return b.String()
}

// Mirror sends a copy of Numerator out of Denominator requests to
// Backend; its responses are dropped.
type Mirror struct {
	Backend                Backend
	Numerator, Denominator uint32
}

// Mirroring bounds: copies in flight per server and per tenant (more are
// dropped, so one tenant's mirrors cannot take every slot), the largest
// request body copied (a request with a larger one, or one of unknown
// length, is not mirrored), and the time a copy may take.
const (
	MaxMirrorsInFlight = 256
	MaxTenantMirrors   = MaxMirrorsInFlight / 4
	MaxMirrorBody      = 64 << 10
	mirrorTimeout      = 30 * time.Second
)

// mirrorSlots counts the mirrored requests in flight, in all and by
// tenant.
type mirrorSlots struct {
	mu       sync.Mutex
	total    int
	byTenant map[string]int
}

// take reserves a slot for tenant; false when the server or the tenant
// has none left.
func (m *mirrorSlots) take(tenant string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.total >= MaxMirrorsInFlight || m.byTenant[tenant] >= MaxTenantMirrors {
		return false
	}
	if m.byTenant == nil {
		m.byTenant = map[string]int{}
	}
	m.total++
	m.byTenant[tenant]++
	return true
}

func (m *mirrorSlots) release(tenant string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.total--
	if m.byTenant[tenant]--; m.byTenant[tenant] <= 0 {
		delete(m.byTenant, tenant)
	}
}

// pickWeighted returns a backend by weight; ok is false when every weight
// is 0. A nil backend is an unusable one.
func pickWeighted(bs []WeightedBackend) (Backend, bool) {
	if i := pickWeightedAt(bs); i >= 0 {
		return bs[i].Backend, true
	}
	return nil, false
}

// pickWeightedAt returns the index of a backend drawn by weight; -1 when
// every weight is 0.
func pickWeightedAt(bs []WeightedBackend) int {
	var total uint64
	for _, b := range bs {
		total += uint64(b.Weight)
	}
	if total == 0 {
		return -1
	}
	x := rand.Uint64N(total)
	for i, b := range bs {
		if x < uint64(b.Weight) {
			return i
		}
		x -= uint64(b.Weight)
	}
	return -1
}

// serveExt serves a request on the net/http path whose route (chosen by
// decide, Select and Gate done) has Ext or Inspect: inspect, redirect or
// change the request, mirror it, send it to a backend chosen by weight,
// and change the response.
func (s *Server) serveExt(w http.ResponseWriter, q *rtRequest, route *Route, host string, tls bool, listenPort uint16) {
	r := q.r
	if route.Inspect != nil {
		held := 0
		defer func() { s.inspected.give(q.stats.Tenant, held) }()
		if !s.inspect(w, q, route, &held) {
			return
		}
	}
	e := route.Ext
	if e == nil {
		e = &RouteExt{}
	}
	if e.ResponseHeaders != nil {
		w = &editWriter{ResponseWriter: w, edit: e.ResponseHeaders}
	}
	if e.CORS != nil {
		var done bool
		if w, q.stats.Status, done = e.CORS.apply(w, r); done {
			q.stats.Outcome = OutcomeLocal
			return
		}
	}
	if rd := e.Redirect; rd != nil {
		w.Header().Set("Location", rd.location(tls, listenPort, host, q.path, r.URL.RawQuery, e.Prefix))
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(rd.Status)
		q.stats.Status, q.stats.Outcome = rd.Status, OutcomeRedirect
		return
	}
	be := route.Backend
	if len(e.Backends) > 0 {
		i := pickWeightedAt(e.Backends)
		if i < 0 || e.Backends[i].Backend == nil {
			s.failHTTP(w, q, 500, OutcomeNoMember)
			return
		}
		be, q.beEdit = e.Backends[i].Backend, e.Backends[i].RequestHeaders
	}
	if be == nil {
		s.failHTTP(w, q, 503, OutcomeNoMember)
		return
	}
	opts := be.Options()
	if e.BackendTimeout > 0 {
		o := *opts
		o.ResponseHeaderTimeout = e.BackendTimeout
		opts = &o
	}
	if e.RequestTimeout > 0 {
		q.deadline = time.Now().Add(e.RequestTimeout)
	}
	q.limit = opts.MaxBodyBytes
	if q.limit <= 0 {
		q.limit = s.cfg.MaxBodyBytes
	}
	q.reqEdit = e.RequestHeaders
	q.retry = e.Retry
	if e.RewriteHost != "" {
		q.upHost = e.RewriteHost
	}
	if e.RewritePath != nil {
		q.path = e.RewritePath.apply(q.path, e.Prefix)
	}
	if len(e.Mirrors) > 0 && !s.mirror(q, e.Mirrors) {
		s.failHTTP(w, q, 400, OutcomeClientError)
		return
	}
	s.proxyHTTP(w, q, be, opts)
}

// mirror starts the copies of a request; false when the request body
// could not be read.
func (s *Server) mirror(q *rtRequest, ms []Mirror) bool {
	var chosen []Backend
	for _, m := range ms {
		if m.Denominator > 0 && rand.Uint32N(m.Denominator) < m.Numerator {
			chosen = append(chosen, m.Backend)
		}
	}
	if len(chosen) == 0 {
		return true
	}
	r := q.r
	var body []byte
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	if hasBody && (r.ContentLength < 0 || r.ContentLength > MaxMirrorBody || (q.limit > 0 && r.ContentLength > q.limit)) {
		return true // not mirrored: the body would have to be held
	}
	// Slots first: a copy with no slot left is dropped before its body is
	// held.
	tenant := q.stats.Tenant
	taken := chosen[:0]
	for _, be := range chosen {
		if s.mirrors.take(tenant) {
			taken = append(taken, be)
		}
	}
	if len(taken) == 0 {
		return true
	}
	if hasBody {
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			for range taken {
				s.mirrors.release(tenant)
			}
			return false
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	// Each copy is one more request of the tenant's to a member, with its
	// body sent again and its answer read and dropped: counted in the
	// tenant's CPU budget as the client's own are (a unit a request, one
	// per 64 KiB each way), here where the copies are made.
	var cpu CPU
	if q.scope != nil {
		cpu = q.scope.cpu
	}
	if cpu != nil {
		cpu.Relay(int64(len(taken)) * (WorkRequest + int64(len(body))>>WorkBytesShift))
	}
	for _, be := range taken {
		mr := &http.Request{
			Method: r.Method, URL: r.URL, Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
			Header: r.Header.Clone(), Host: r.Host, ContentLength: int64(len(body)), Body: http.NoBody,
		}
		if hasBody {
			mr.Body = io.NopCloser(bytes.NewReader(body))
		}
		ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
		ca := *q.ca // the client connection's copy is reused after it closes
		mq := &rtRequest{r: mr.WithContext(ctx), path: q.path, ca: &ca, scope: q.scope, stats: &RequestStats{},
			limit: q.limit, reqEdit: q.reqEdit, upHost: q.upHost}
		go func() {
			defer s.mirrors.release(tenant)
			defer cancel()
			dw := &discardWriter{h: http.Header{}}
			s.proxyHTTP(dw, mq, be, be.Options())
			if u := dw.n >> WorkBytesShift; u > 0 && cpu != nil {
				cpu.Relay(u)
			}
		}()
	}
	return true
}

// discardWriter drops a mirrored request's response, counting the bytes
// of its body read off the member (n): its data, and the framing and
// trailer section of a chunked one (readCharger).
type discardWriter struct {
	h http.Header
	n int64
}

func (d *discardWriter) chargeRead(n int64) { d.n += n }

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) WriteHeader(int)     {}
func (d *discardWriter) Write(p []byte) (int, error) {
	d.n += int64(len(p))
	return len(p), nil
}

// editWriter applies a HeaderEdit to the response head.
type editWriter struct {
	http.ResponseWriter
	edit  *HeaderEdit
	wrote bool
}

func (w *editWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		w.edit.apply(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *editWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(200)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *editWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
