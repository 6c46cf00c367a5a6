package snapshot

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// RouteExt is what a route has beyond host, path and pool: conditions on
// the request, weighted backends, filters and timeouts. One model route
// with several matches compiles to one Route per match; they share
// Filters.
type RouteExt struct {
	// Cond is nil when the route asks nothing of the method, headers or
	// query parameters.
	Cond *Conditions
	// PathRegex is set for PathRegex routes: the expression anchored at
	// both ends.
	PathRegex *Regex
	// Backends replace Route.Pool when the route splits traffic (or
	// names an unavailable backend).
	Backends []WeightedPool
	// Filters is nil when the route has none.
	Filters *Filters
	// RequestTimeout and BackendTimeout are 0 when unset.
	RequestTimeout, BackendTimeout time.Duration
	// Retry is nil when the route does not retry.
	Retry *Retry
	// BackendHeaders, when set, holds the request header changes of each
	// of Backends (nil for a backend without).
	BackendHeaders []*HeaderEdit
	// Match is the index of the model match this route came from.
	Match int

	// key is the SHA-256 digest of the model route, which holds the
	// fields above but the pools; with Match it gives equality between
	// compiles.
	key string
}

func (e *RouteExt) cond() *Conditions {
	if e == nil || e.Cond == nil {
		return &noConditions
	}
	return e.Cond
}

func (e *RouteExt) matchIndex() int {
	if e == nil {
		return 0
	}
	return e.Match
}

func (e *RouteExt) equal(o *RouteExt) bool {
	if e == nil || o == nil {
		return e == o
	}
	if e.key != o.key || e.Match != o.Match || len(e.Backends) != len(o.Backends) {
		return false
	}
	if !slices.Equal(e.Backends, o.Backends) {
		return false
	}
	if (e.Filters == nil) != (o.Filters == nil) {
		return false
	}
	if e.Filters != nil {
		return slices.EqualFunc(e.Filters.Mirrors, o.Filters.Mirrors, func(a, b Mirror) bool { return a == b })
	}
	return true
}

// pools returns the pools the route sends to or mirrors to.
func (e *RouteExt) pools() []*Pool {
	if e == nil {
		return nil
	}
	var out []*Pool
	for _, b := range e.Backends {
		if b.Pool != nil {
			out = append(out, b.Pool)
		}
	}
	if e.Filters != nil {
		for _, m := range e.Filters.Mirrors {
			out = append(out, m.Pool)
		}
	}
	return out
}

// WeightedPool is one backend of a route and its weight.
type WeightedPool struct {
	// Pool is nil for a backend answered with 500.
	Pool   *Pool
	Weight uint32
}

// Conditions are what a request must also meet: all of them.
type Conditions struct {
	// Method is "" for any.
	Method string
	// Headers have canonical names; Query names are case-sensitive.
	Headers []ValueCond
	Query   []ValueCond
	// regexInsts sums the programs of the regular expression conditions.
	regexInsts int
}

var noConditions Conditions

// ValueCond matches one header or query parameter.
type ValueCond struct {
	Name  string
	Value string
	// Regex, when set, must match the whole value instead of Value; a
	// value over api.MaxRegexSubjectLen bytes never matches it.
	Regex *Regex
}

func (v *ValueCond) holds(got string, present bool) bool {
	if !present {
		return false
	}
	if v.Regex != nil {
		return len(got) <= api.MaxRegexSubjectLen && v.Regex.MatchString(got)
	}
	return got == v.Value
}

// Request is what a route's conditions read of a request. The engine
// implements it over its own parsed request, without building a
// net/http request.
type Request = reqview.Request

// holds reports whether the request meets every condition: the method
// and the exact ones first, so that a request they turn away costs no
// regular expression.
func (c *Conditions) holds(m *matching) bool {
	return c.holdsExact(m.req) && c.holdsRegex(m)
}

func (c *Conditions) holdsExact(v Request) bool {
	if c.Method != "" && v.Method() != c.Method {
		return false
	}
	for i := range c.Headers {
		if h := &c.Headers[i]; h.Regex == nil {
			got, ok := v.Header(h.Name)
			if !h.holds(got, ok) {
				return false
			}
		}
	}
	if len(c.Query) == 0 {
		return true
	}
	raw := v.RawQuery()
	for i := range c.Query {
		if q := &c.Query[i]; q.Regex == nil {
			got, ok := queryValue(raw, q.Name)
			if !q.holds(got, ok) {
				return false
			}
		}
	}
	return true
}

// holdsRegex evaluates the regular expression conditions; the lookup
// stops when m allows no regular expression.
func (c *Conditions) holdsRegex(m *matching) bool {
	if c.regexInsts == 0 {
		return true
	}
	if !m.regexOK() {
		return false
	}
	v := m.req
	for i := range c.Headers {
		if h := &c.Headers[i]; h.Regex != nil {
			got, ok := v.Header(h.Name)
			if !h.holds(got, ok) {
				return false
			}
		}
	}
	if len(c.Query) == 0 {
		return true
	}
	raw := v.RawQuery()
	for i := range c.Query {
		if q := &c.Query[i]; q.Regex != nil {
			got, ok := queryValue(raw, q.Name)
			if !q.holds(got, ok) {
				return false
			}
		}
	}
	return true
}

// maxQueryParams is net/url's limit: url.ParseQuery parses nothing of a
// query with more parameters.
const maxQueryParams = 10000

// queryValue returns the first value of the query parameter name as
// url.ParseQuery decodes raw: pairs separated by '&', a pair holding ';'
// or an invalid escape skipped, '+' a space. It allocates only to decode
// a key or value with escapes.
func queryValue(raw, name string) (string, bool) {
	if strings.Count(raw, "&") >= maxQueryParams {
		return "", false
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if v, err := url.QueryUnescape(v); err == nil {
			return v, true
		}
	}
	return "", false
}

// Filters change a request or its response, or answer it.
type Filters struct {
	RequestHeaders, ResponseHeaders *HeaderEdit
	Redirect                        *Redirect
	Rewrite                         *Rewrite
	Mirrors                         []Mirror
	CORS                            *CORS
}

// CORS is a route's CORS filter as validated (api.CORSOriginProblem);
// MaxAge is the default when the model left it 0.
type CORS struct {
	AllowOrigins, AllowMethods, AllowHeaders, ExposeHeaders []string
	MaxAge                                                  uint32
	AllowCredentials                                        bool
}

// HeaderEdit sets, adds and removes headers; names are canonical.
type HeaderEdit struct {
	Set, Add []HeaderValue
	Remove   []string
}

// HeaderValue is one header name and value.
type HeaderValue struct{ Name, Value string }

// PathChange replaces a request's path: the whole of it (Full), or the
// prefix the route matched (Prefix set).
type PathChange struct {
	Prefix bool
	Value  string
}

// Redirect answers a request with a redirect.
type Redirect struct {
	// Scheme and Hostname are "" to keep the request's.
	Scheme, Hostname string
	// Port is 0 when unset.
	Port uint16
	// Path is nil to keep the request's.
	Path *PathChange
	// Status is 301, 302, 303, 307 or 308.
	Status int
}

// Rewrite changes a request before it is forwarded.
type Rewrite struct {
	// Hostname is "" to keep the Host header.
	Hostname string
	Path     *PathChange
}

// Mirror sends a share of the requests to another pool as well.
type Mirror struct {
	Pool                   *Pool
	Numerator, Denominator uint32
}
