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

func (v *h1Request) Header(name string) (string, bool) {
	h, b := &v.h, v.head()
	out, ok := "", false
	for i := range h.fields {
		f := &h.fields[i]
		if !f.netField() || !eqFoldMixed(f.name(b), name) {
			continue
		}
		if val := unsafeString(f.value(b)); !ok {
			out, ok = val, true
		} else {
			out += ", " + val
		}
	}
	return out, ok
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
	out, ok := "", false
	for _, hf := range v.fields {
		if hf.IsPseudo() || hf.Name == "host" || !strings.EqualFold(hf.Name, name) {
			continue
		}
		if !ok {
			out, ok = hf.Value, true
		} else {
			out += sep + hf.Value
		}
	}
	return out, ok
}

func (v *h2Request) RawQuery() string {
	if v.path == "*" {
		return ""
	}
	_, q, _ := strings.Cut(v.path, "?")
	return q
}
