package l7

import (
	"strings"

	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// Request is what Route.Select reads of a request: its method, header
// fields and query. The engine implements it over its own parsed request
// head, so that choosing a route by them builds no net/http request. The
// strings it returns alias the connection's buffers: they must not be
// retained after Select returns.
type Request = reqview.Request

// h1Request is an HTTP/1.x client connection's current request, parsed
// in place, seen as a Request.
type h1Request clientConn

// head is the request head handle is serving: the bytes before c.r.
func (v *h1Request) head() []byte { return v.rb[v.r-v.h.n : v.r] }

func (v *h1Request) Method() string { return v.h.method(v.head()) }

// maxCombinedValue bounds the value Header builds of repeated fields. A
// route condition compares at most 4,096 bytes (an exact value) or 1,024
// (what a regular expression sees), so a combination is cut after it is
// this long (still longer than any condition matches), and building it
// costs one copy of at most this many bytes however many fields repeat.
const maxCombinedValue = 8 << 10

func (v *h1Request) Header(name string) (string, bool) {
	h, b := &v.h, v.head()
	first, n, total := -1, 0, 0
	for i := range h.fields {
		f := &h.fields[i]
		if !f.netField() || !eqFoldMixed(f.name(b), name) {
			continue
		}
		if first < 0 {
			first = i
		}
		n++
		total += len(f.value(b)) + 2
	}
	switch n {
	case 0:
		return "", false
	case 1:
		return unsafeString(h.fields[first].value(b)), true
	}
	out := make([]byte, 0, min(total, maxCombinedValue+4))
	for i := first; i < len(h.fields) && len(out) < maxCombinedValue; i++ {
		f := &h.fields[i]
		if !f.netField() || !eqFoldMixed(f.name(b), name) {
			continue
		}
		if i != first {
			out = append(out, ", "...)
		}
		out = append(out, f.value(b)[:min(len(f.value(b)), maxCombinedValue+2-len(out))]...)
	}
	return unsafeString(out), true
}

func (v *h1Request) RawQuery() string {
	// As net/url reads the target: the query follows the first '?'.
	_, q, _ := strings.Cut(unsafeString(v.head()[v.h.qS:v.h.tE]), "?")
	return q
}

// h2Request is an HTTP/2 stream's request head seen as a Request.
type h2Request h2Stream

func (v *h2Request) Method() string { return v.method }

func (v *h2Request) Header(name string) (string, bool) {
	sep := ", "
	if name == "Cookie" {
		sep = "; "
	}
	first, n, total := -1, 0, 0
	for i, hf := range v.fields {
		if hf.IsPseudo() || hf.Name == "host" || !strings.EqualFold(hf.Name, name) {
			continue
		}
		if first < 0 {
			first = i
		}
		n++
		total += len(hf.Value) + 2
	}
	switch n {
	case 0:
		return "", false
	case 1:
		return v.fields[first].Value, true
	}
	out := make([]byte, 0, min(total, maxCombinedValue+4))
	for i := first; i < len(v.fields) && len(out) < maxCombinedValue; i++ {
		hf := v.fields[i]
		if hf.IsPseudo() || hf.Name == "host" || !strings.EqualFold(hf.Name, name) {
			continue
		}
		if i != first {
			out = append(out, sep...)
		}
		out = append(out, hf.Value[:min(len(hf.Value), maxCombinedValue+2-len(out))]...)
	}
	return unsafeString(out), true
}

func (v *h2Request) RawQuery() string {
	if v.path == "*" {
		return ""
	}
	_, q, _ := strings.Cut(v.path, "?")
	return q
}

// routeRequest is a request as route conditions (and a route's Gate)
// read it: the codec's Request, except for the fields forwardFields
// decides, those naming the client or the request (forwardKind) and the
// listener's certificate field, which read as the member receives them.
// A client that sends X-Forwarded-For: 10.0.0.1 thus matches a route on
// it only when it is trusted, and then with the proxy's address after
// its own (as Envoy appends before routing); an untrusted client's
// fields of these names are not seen at all.
//
// The values of the last few such names asked for are kept (seen), so
// that the conditions of many routes and a rate limit's key on one field
// cost one walk of the request's fields and one copy, not one each.
type routeRequest struct {
	Request
	v     *reqView
	ca    *clientAddrs
	fw    *fwdScratch
	seen  [4]seenField
	nSeen int
}

// seenField is a forwarding field's value as routeRequest.Header
// answered it.
type seenField struct {
	name, value string
	ok          bool
}

func (r *routeRequest) Header(name string) (string, bool) {
	if !r.ca.forwarded(unsafeBytes(name)) {
		return r.Request.Header(name)
	}
	for i := range min(r.nSeen, len(r.seen)) {
		if e := &r.seen[i]; strings.EqualFold(e.name, name) {
			return e.value, e.ok
		}
	}
	value, ok := forwardedValue(r.v, r.ca, r.fw, name)
	// name is a condition's, a rate limit's or a backend's, which outlive
	// the request; value is a copy, which Header never writes again.
	r.seen[r.nSeen%len(r.seen)] = seenField{name: name, value: value, ok: ok}
	r.nSeen++
	return value, ok
}

// hashKey returns the balancing key of a backend that hashes on the field
// name (BackendOptions.HashHeader) when the proxy decides what the member
// receives in that field: for Host, the request's authority (the Host
// field or :authority, as the client sent it; each codec sends it as
// Host); for a field forwardFields decides (clientAddrs.forwarded), its
// value as the member receives it, as route conditions read it, or nil
// when the member gets none. decided is false for any other field, whose
// key the codec reads from the client's fields. So an untrusted client's
// X-Forwarded-For does not steer the hashing, hashing on it spreads
// clients by the address the member sees, and hashing on Host hashes the
// same value over HTTP/1.x, HTTP/2 and HTTP/3.
func (r *routeRequest) hashKey(name string) (key []byte, decided bool) {
	nb := unsafeBytes(name)
	if classify(nb) == hHost {
		return r.v.authority, true
	}
	if !r.ca.forwarded(nb) {
		return nil, false
	}
	if v, ok := r.Header(name); ok {
		return unsafeBytes(v), true
	}
	return nil, true
}

// forwardedValue returns the values of the fields named name (any case)
// that forwardFields hands the member for the request v of the client ca,
// joined with ", " as Request.Header joins them (a copy), and whether
// there is one. fw is the request's scratch: a request id made for it is
// the one forwarded.
func forwardedValue(v *reqView, ca *clientAddrs, fw *fwdScratch, name string) (string, bool) {
	// The sink lives in fw, so that handing it to forwardFields as a
	// fieldSink does not move it to the heap for each read.
	s := &fw.vs
	*s = valueSink{name: name}
	forwardFields(v, ca, s, fw)
	out, ok := unsafeString(s.out), s.n > 0
	*s = valueSink{}
	return out, ok
}

// valueSink collects the values of the fields of one name (any case) that
// forwardFields hands it, joined with ", " as Request.Header joins them.
type valueSink struct {
	name string
	out  []byte
	n    int
}

func (s *valueSink) client(f *viewField) { s.value(f.name, f.value) }

func (s *valueSink) add(name string, value []byte) { s.value(unsafeBytes(name), value) }

func (s *valueSink) value(name, value []byte) {
	if !strings.EqualFold(unsafeString(name), s.name) || len(s.out) >= maxCombinedValue {
		return
	}
	if s.n > 0 {
		s.out = append(s.out, ", "...)
	}
	s.n++
	s.out = append(s.out, value[:min(len(value), maxCombinedValue+2-len(s.out))]...)
}
