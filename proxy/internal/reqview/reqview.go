// Package reqview is what a route's conditions read of a request, shared
// by the compiled routes and the L7 engine: the engine implements it over
// its own parsed request head, and HTTP over a net/http request.
package reqview

import (
	"net/http"
	"strings"
)

// Request is a request's method, header fields and query. The strings it
// returns may alias the implementation's buffers: they must not be
// retained past the call that was handed the Request.
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

// HTTP is a net/http request seen as a Request.
type HTTP struct{ R *http.Request }

// Method is the request's method.
func (v HTTP) Method() string { return v.R.Method }

// Header returns the field's values joined with ", ".
func (v HTTP) Header(name string) (string, bool) {
	vals, ok := v.R.Header[name]
	switch len(vals) {
	case 0:
		return "", ok
	case 1:
		return vals[0], true
	}
	return strings.Join(vals, ", "), true
}

// RawQuery is the request URL's query.
func (v HTTP) RawQuery() string {
	if v.R.URL == nil {
		return ""
	}
	return v.R.URL.RawQuery
}
