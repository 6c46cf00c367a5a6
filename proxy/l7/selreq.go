package l7

import (
	"net/http"
	"strings"
)

// Request is what Route.Select reads of a request: its method, header
// fields and query. The engine implements it over its own parsed request
// head, so that choosing a route by them builds no net/http request. The
// strings it returns alias the connection's buffers: they must not be
// retained after Select returns.
type Request interface {
	// Method is the request method.
	Method() string
	// Header returns the field of a canonical name as a net/http request's
	// Header would hold it: Host and the hop-by-hop fields that are not
	// forwarded are absent, the values of a repeated field are joined with
	// ", " (HTTP/2 cookie fields with "; ").
	Header(name string) (value string, ok bool)
	// RawQuery is the request target's query, without the '?'.
	RawQuery() string
}

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

// httpRequest is a net/http request seen as a Request.
type httpRequest struct{ r *http.Request }

func (v httpRequest) Method() string { return v.r.Method }

func (v httpRequest) Header(name string) (string, bool) {
	vals, ok := v.r.Header[name]
	switch len(vals) {
	case 0:
		return "", ok
	case 1:
		return vals[0], true
	}
	return strings.Join(vals, ", "), true
}

func (v httpRequest) RawQuery() string {
	if v.r.URL == nil {
		return ""
	}
	return v.r.URL.RawQuery
}
