package l7

import (
	"bytes"
	"maps"
	"net/http"
	"net/netip"
	"slices"

	"golang.org/x/net/http2/hpack"
)

// One request form between the codecs. Each codec presents the request it
// parsed as a reqView, over its own bytes (the HTTP/1.x parser's offsets,
// the decoded HTTP/2 fields, net/http values), and forwardFields decides
// once, for all of them, which fields a member receives; the codec only
// serialises them through a fieldSink (HTTP/1.1 bytes, an HPACK block,
// an http.Header). requestFigures fills RequestStats from the view the
// same way.

// reqView is a request as a codec presents it: read-only, over the codec's
// own bytes.
type reqView struct {
	method    []byte
	authority []byte // the Host field's or :authority, as the client sent it
	target    []byte // path and query, as the client sent them
	fieldsView
}

// fieldsView is the fields of a request or a response as a codec
// presents them. Exactly one of h1, h2 and hdr holds them.
type fieldsView struct {
	// h1b and h1: an HTTP/1.x head and its offsets.
	h1b []byte
	h1  *headLines
	// h2: decoded HTTP/2 fields, pseudo-fields included.
	h2 []hpack.HeaderField
	// hdr: net/http values (a request's Host is not among them).
	hdr http.Header
}

// viewField is one field of a view.
type viewField struct {
	name, value []byte
	kind        hdrKind
	// listed: the field is named by the client's Connection field, or
	// its parser dropped it.
	listed bool
	// ls and le bound the field's whole line in the HTTP/1.x head (le 0:
	// not a line of one), so that runs of lines are copied at once.
	ls, le uint32
}

// fieldIter walks the fields of a view in the order they were sent
// (net/http values: by name).
type fieldIter struct {
	v    *fieldsView
	i, j int
	keys []string
	// names: the names the view's Connection fields list, each followed
	// by a comma (connList.names; for HTTP/2 fields and net/http values
	// split once here).
	names []byte
	// over: the Connection fields of HTTP/2 fields or net/http values
	// have more than maxConnTokens elements; the iterator then walks no
	// field. (Only a member's response comes so: the HTTP/1.x parser
	// refuses such a request, and the HTTP/2 and HTTP/3 servers refuse
	// requests with a Connection field.)
	over bool
	// runs: consecutive HTTP/1.x lines of kind hOther that the parser
	// kept come as one field (the first line's name and value, ls and le
	// spanning them all), for a reader to whom their names do not matter.
	runs bool
}

// fields sets it to walk the fields of v (in place: an iterator kept in a
// connection or stream is not copied).
func (v *fieldsView) fields(it *fieldIter) {
	it.v, it.i, it.j, it.keys, it.names, it.over, it.runs = v, 0, 0, nil, nil, false, false
	n := 0
	switch {
	case v.h1 != nil:
		it.names = v.h1.conn.names
	case v.hdr != nil:
		it.keys = slices.Sorted(maps.Keys(v.hdr))
		for _, cv := range v.hdr["Connection"] {
			it.addConn(cv, &n)
		}
	default:
		// A Connection field makes an HTTP/2 message malformed (RFC 9113
		// section 8.2.2); a member's that has one is read as an
		// HTTP/1.1 one would be.
		for i := range v.h2 {
			if name := v.h2[i].Name; len(name) == len("connection") && eqFold(unsafeBytes(name), "connection") {
				it.addConn(v.h2[i].Value, &n)
			}
		}
	}
	if it.over {
		it.keys, it.names, it.i = nil, nil, len(v.h2)
	}
}

// addConn records the names the Connection field value cv lists; n
// counts the elements seen, bounded by maxConnTokens.
func (it *fieldIter) addConn(cv string, n *int) {
	for b := unsafeBytes(cv); len(b) > 0 && !it.over; {
		if *n++; *n > maxConnTokens {
			it.over = true
			return
		}
		var t []byte
		// The options are not field names (connList.add).
		if t, b = nextToken(b); len(t) > 0 && !eqFold(t, "close") && !eqFold(t, "keep-alive") && !eqFold(t, "upgrade") {
			it.names = append(append(it.names, t...), ',')
		}
	}
}

// next sets f to the next field; false past the last one. (f is filled
// in place, not returned: the fast paths pass it on without a copy.)
func (it *fieldIter) next(f *viewField) bool {
	v := it.v
	switch {
	case v.h1 != nil:
		if it.i >= len(v.h1.fields) {
			return false
		}
		hf := &v.h1.fields[it.i]
		it.i++
		f.name, f.value, f.kind, f.listed, f.ls, f.le = v.h1b[hf.ns:hf.ne], v.h1b[hf.vs:hf.ve], hf.kind, hf.drop, hf.ns, hf.le
		if it.runs && hf.kind == hOther && !hf.drop {
			for it.i < len(v.h1.fields) && v.h1.fields[it.i].kind == hOther && !v.h1.fields[it.i].drop {
				f.le = v.h1.fields[it.i].le
				it.i++
			}
		}
		return true
	case v.hdr != nil:
		for it.i < len(it.keys) {
			k := it.keys[it.i]
			vv := v.hdr[k]
			if it.j < len(vv) {
				it.j++
				name := unsafeBytes(k)
				kind := classify(name)
				*f = viewField{name: name, value: unsafeBytes(vv[it.j-1]), kind: kind, listed: connListed(it.names, name, kind)}
				return true
			}
			it.i, it.j = it.i+1, 0
		}
		return false
	}
	for it.i < len(v.h2) {
		hf := &v.h2[it.i]
		it.i++
		if hf.IsPseudo() {
			continue
		}
		name := unsafeBytes(hf.Name)
		f.name, f.value, f.kind, f.ls, f.le = name, unsafeBytes(hf.Value), classify(name), 0, 0
		f.listed = len(it.names) > 0 && connListed(it.names, name, f.kind)
		return true
	}
	return false
}

// connListed reports whether names, the names Connection fields list
// (connList.names), holds the field name, of kind kind: the HTTP/1.x
// parser's dropListed, for other views.
func connListed(names, name []byte, kind hdrKind) bool {
	switch kind {
	case hHost, hContentLength, hTransferEncoding:
		return false
	}
	return namedIn(names, name)
}

// namedIn reports whether names, each followed by a comma, holds name
// (any case).
func namedIn(names, name []byte) bool {
	for len(names) > 0 {
		i := bytes.IndexByte(names, ',')
		if eqFoldBytes(names[:i], name) {
			return true
		}
		names = names[i+1:]
	}
	return false
}

// fieldSink serialises the fields forwardFields decides, in a codec's
// form.
type fieldSink interface {
	// client passes on one of the client's fields.
	client(f *viewField)
	// add adds a field of the proxy's; name is in canonical case.
	add(name string, value []byte)
}

// fwdScratch holds what forwardFields makes for one request: the request
// id it generates, the Forwarded value, and the iterator and field it
// walks the client's fields with (kept here, in the connection or the
// stream, so that handing a field to a sink copies nothing; they keep
// pointing into the last request's bytes, which the connection or stream
// owns).
type fwdScratch struct {
	id  [32]byte
	fwd []byte
	it  fieldIter
	f   viewField
	// idMade: id holds the id generated for the current request (decide
	// clears it), so that route matching and every forwarding of the
	// request send the same one.
	idMade bool
	// rr is the request route conditions read (decide).
	rr routeRequest
	// vs collects a forwarding field's value for forwardedValue.
	vs valueSink
}

var (
	valTrailers = []byte("trailers")
	valHTTP     = []byte("http")
	valHTTPS    = []byte("https")
)

// forwardFields decides the fields a member receives for the request v of
// the client ca, the same for every codec and member protocol, and hands
// them to s. The client's fields go on as they came, except: the
// hop-by-hop ones (Connection, Keep-Alive, Proxy-Connection, Upgrade, TE,
// Proxy-Authorization, Proxy-Authenticate, HTTP2-Settings) and those
// Connection names; Host (each codec sends v.authority its own way); the
// fields naming the client or the request (forwardKind) unless ca is
// trusted, and then every X-Request-Id but the first usable one
// (usableRequestID); the field that carries the client's certificate
// subject. Then come TE: trailers when the client asked for trailers,
// X-Forwarded-For (a trusted client's own kept before it),
// X-Forwarded-Proto and X-Forwarded-Host unless a trusted client sent
// them, Forwarded (RFC 7239), X-Request-Id unless a trusted client's was
// kept (32 hex digits), and the certificate subject. It returns the
// request id sent, which is valid as long as v's bytes and fw are. The
// request's trailers, which it never sees, are filtered by trailerKept.
func forwardFields(v *reqView, ca *clientAddrs, s fieldSink, fw *fwdScratch) []byte {
	var te, proto, host bool
	var id []byte
	it, f := &fw.it, &fw.f
	v.fieldsView.fields(it)
	// Without a certificate field no name of kind hOther matters: the
	// HTTP/1.x lines come in runs.
	it.runs = ca.certField == ""
	for it.next(f) {
		switch f.kind {
		case hHost:
			continue
		case hTE:
			te = te || hasToken(f.value, "trailers")
			continue
		case hConnection, hKeepAlive, hProxyConnection, hUpgrade, hProxyAuthorization, hProxyAuthenticate, hHTTP2Settings:
			continue
		}
		if f.listed {
			continue
		}
		if forwardKind(f.kind) {
			if !ca.trusted {
				continue
			}
			switch f.kind {
			case hXFProto:
				proto = true
			case hXFHost:
				host = true
			case hRequestID:
				if id != nil || !usableRequestID(f.value) {
					continue
				}
				id = f.value
			}
		}
		if ca.certField != "" && eqFoldDash(f.name, ca.certField) {
			continue
		}
		s.client(f)
	}
	if te {
		s.add("TE", valTrailers)
	}
	s.add("X-Forwarded-For", ca.ip)
	scheme := valHTTP
	if ca.https {
		scheme = valHTTPS
	}
	if !proto {
		s.add("X-Forwarded-Proto", scheme)
	}
	if len(v.authority) > 0 && !host {
		s.add("X-Forwarded-Host", v.authority)
	}
	b := append(fw.fwd[:0], "for="...)
	b = append(b, ca.fwdFor...)
	if len(v.authority) > 0 {
		b = append(b, ";host="...)
		b = appendForwardedValue(b, v.authority)
	}
	b = append(b, ";proto="...)
	b = append(b, scheme...)
	fw.fwd = b
	s.add("Forwarded", b)
	if id == nil {
		if !fw.idMade {
			appendRequestID(fw.id[:0])
			fw.idMade = true
		}
		id = fw.id[:]
		s.add("X-Request-Id", id)
	}
	if ca.certHeader != "" && ca.subject != "" {
		s.add(ca.certHeader, unsafeBytes(ca.subject))
	}
	return id
}

// trailerKept reports whether a trailer field named name goes on, in a
// request's trailer section to the member and in a response's to the
// client, on every codec and path: copyBody, onTrailers and trailerBody
// for requests; relayBody, relay (HTTP/2 fast path), relayUp,
// copyResponse and h1Response for responses. certField is the listener's certificate
// field (clientAddrs.certField; "" for responses) and listed the names
// the head's Connection fields list (connList.names; nil when none).
//
// RFC 9110 section 6.5.1: a recipient must not merge a trailer field
// into the header section unless the field's definition permits it, and
// framing, routing, authentication, request modifiers, response control
// data and content format must be known before the content. A member or
// client that merges trailers would take such a field as the proxy's own
// or as the message's, so a trailer keeps only fields
//   - of no kind the proxy acts on (classify says hOther): never a
//     hop-by-hop or framing field (Trailer too), Host, Expect, TE, nor a
//     field naming the client or the request (forwarding fields), even
//     from a trusted client;
//   - that are no pseudo-field and not named by the head's Connection
//     fields (hop-by-hop for this connection, RFC 9110 section 7.6.1);
//   - not in trailerBarred (the rest of section 6.5.1's categories);
//   - other than the certificate field.
func trailerKept(name []byte, certField string, listed []byte) bool {
	if len(name) == 0 || name[0] == ':' || classify(name) != hOther || trailerBarred(name) {
		return false
	}
	if certField != "" && eqFoldDash(name, certField) {
		return false
	}
	return !namedIn(listed, name)
}

// trailerBarredNames are the fields of RFC 9110 section 6.5.1's
// categories that classify does not tell apart, by category:
//   - request modifiers: the controls of section 10.1 (Cache-Control,
//     Max-Forwards, Pragma, Range; Expect, Host and TE are kinds) and the
//     preconditions of section 13.1 (If-*);
//   - authentication: Authorization, WWW-Authenticate (section 11;
//     the Proxy-* fields are kinds), and the state fields Cookie and
//     Set-Cookie (RFC 6265), which carry credentials. Authentication-Info
//     and Proxy-Authentication-Info are defined to be sent as trailers
//     (sections 11.6.3 and 11.7.3) and pass;
//   - response control data (section 15's Age, Cache-Control, Date,
//     Expires, Location, Retry-After, Vary) and Alt-Svc (RFC 7838, which
//     the listener may set itself);
//   - content format: the representation metadata of section 8
//     (Content-Type, Content-Encoding, Content-Language,
//     Content-Location, Content-Range).
var trailerBarredNames = map[string]bool{
	"cache-control": true, "max-forwards": true, "pragma": true, "range": true,
	"if-match": true, "if-none-match": true, "if-modified-since": true, "if-unmodified-since": true, "if-range": true,
	"authorization": true, "www-authenticate": true, "cookie": true, "set-cookie": true,
	"age": true, "date": true, "expires": true, "location": true, "retry-after": true, "vary": true, "alt-svc": true,
	"content-type": true, "content-encoding": true, "content-language": true, "content-location": true, "content-range": true,
}

// trailerBarred reports whether name (any case) is one of
// trailerBarredNames.
func trailerBarred(name []byte) bool {
	var buf [20]byte // the longest name is 19 bytes
	if len(name) > len(buf) {
		return false
	}
	for i, c := range name {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return trailerBarredNames[string(buf[:len(name)])]
}

// usableRequestID reports whether a trusted client's X-Request-Id value
// v is kept: 1 to 200 bytes of printable ASCII without blanks, so that
// it reaches every member and the access log as it came.
func usableRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > 200 {
		return false
	}
	for _, c := range v {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// h1Sink writes fields as HTTP/1.1 header lines. Lines of an HTTP/1.x
// client's head (b) are copied as runs of whole lines.
type h1Sink struct {
	dst        []byte
	b          []byte
	runS, runE uint32
	// fromH2: the fields are an HTTP/2 client's: Content-Length is the
	// codec's (it frames the body its own way) and the Cookie fields are
	// joined into one (RFC 9113 section 8.2.3).
	fromH2 bool
	cookie []byte
}

func (s *h1Sink) client(f *viewField) {
	if f.le > 0 {
		if s.runE != f.ls {
			s.flush()
			s.runS = f.ls
		}
		s.runE = f.le
		return
	}
	s.flush() // a field not of the head's lines, among them
	if s.fromH2 {
		switch {
		case f.kind == hContentLength:
			return
		case eqFold(f.name, "cookie"):
			if len(s.cookie) > 0 {
				s.cookie = append(s.cookie, "; "...)
			}
			s.cookie = append(s.cookie, f.value...)
			return
		}
	}
	s.line(f.name, f.value)
}

func (s *h1Sink) add(name string, value []byte) {
	s.flush()
	s.line(unsafeBytes(name), value)
}

func (s *h1Sink) line(name, value []byte) {
	n := len(s.dst)
	s.dst = slices.Grow(s.dst, len(name)+len(value)+4)[:n+len(name)+len(value)+4]
	n += copy(s.dst[n:], name)
	s.dst[n], s.dst[n+1] = ':', ' '
	n += 2 + copy(s.dst[n+2:], value)
	s.dst[n], s.dst[n+1] = '\r', '\n'
}

// flush copies the run of the client's lines not copied yet.
func (s *h1Sink) flush() {
	if s.runE > s.runS {
		s.dst = append(s.dst, s.b[s.runS:s.runE]...)
	}
	s.runS, s.runE = 0, 0
}

// done ends the fields: what is held back goes out.
func (s *h1Sink) done() {
	s.flush()
	if len(s.cookie) > 0 {
		s.line([]byte("Cookie"), s.cookie)
		s.cookie = s.cookie[:0]
	}
}

// hpackSink writes fields as HPACK literals without indexing (no dynamic
// table); lower: the names of the fields passed on are lower-cased
// (an HTTP/1.x member's).
type hpackSink struct {
	dst   []byte
	lower bool
}

func (s *hpackSink) client(f *viewField) {
	s.dst = appendLiteral(s.dst, unsafeString(f.name), unsafeString(f.value), s.lower)
}

func (s *hpackSink) add(name string, value []byte) {
	s.dst = appendLiteral(s.dst, name, unsafeString(value), true)
}

// headerSink fills an http.Header, for the net/http path.
type headerSink struct{ h http.Header }

func (s headerSink) client(f *viewField) {
	k := string(f.name)
	s.h[k] = append(s.h[k], string(f.value))
}

func (s headerSink) add(name string, value []byte) {
	s.h[name] = append(s.h[name], string(value))
}

// forwardHeader returns the fields sent to a member through net/http for
// the client's fields in, asking for host. fw, when not nil, is the
// request's scratch that decide used (its request id is kept).
func forwardHeader(in http.Header, ca *clientAddrs, host string, fw *fwdScratch) (http.Header, string) {
	out := make(http.Header, len(in)+5)
	if fw == nil {
		fw = new(fwdScratch)
	}
	v := reqView{authority: unsafeBytes(host), fieldsView: fieldsView{hdr: in}}
	id := forwardFields(&v, ca, headerSink{out}, fw)
	return out, string(id)
}

// startFigures begins the RequestStats of the request v on a connection
// of info from client, the same way for every codec: the listener, LB,
// tenant, client and protocol (http2, http3; neither is HTTP/1.x), and
// for the access log's share of requests the normalised host (the
// authority as sent when it does not normalise), the method and the
// target. The route, the request id sent, the member and the outcome
// are added as the request is served.
func startFigures(stats *RequestStats, info *ConnInfo, client netip.AddrPort, http2, http3 bool, v *reqView) {
	*stats = RequestStats{Listener: info.Listener, LB: info.LB, Tenant: info.Tenant, Client: client, HTTP2: http2, HTTP3: http3}
	if info.AccessLog > 0 {
		stats.AccessLog = info.AccessLog
		var buf [256]byte
		host, ok := normalizeHost(buf[:0], v.authority)
		if !ok {
			host = v.authority
		}
		stats.Host, stats.Method, stats.Path = string(host), string(v.method), string(v.target)
	}
}

// netView presents a net/http request.
func netView(r *http.Request) *reqView {
	return &reqView{method: unsafeBytes(r.Method), authority: unsafeBytes(r.Host), target: unsafeBytes(r.URL.RequestURI()), fieldsView: fieldsView{hdr: r.Header}}
}
