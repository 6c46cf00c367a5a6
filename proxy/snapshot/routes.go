package snapshot

import (
	"net/http"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// PathType says how a route's path matches.
type PathType uint8

// Path types.
const (
	// PathPrefix matches the path and everything below it, by whole
	// segments: /api matches /api, /api/ and /api/x, never /apix.
	PathPrefix PathType = iota
	// PathExact matches the path exactly.
	PathExact
	// PathRegex matches when the whole path matches Ext.PathRegex.
	PathRegex
)

func (t PathType) String() string {
	switch t {
	case PathExact:
		return "exact"
	case PathRegex:
		return "regex"
	}
	return "prefix"
}

// Route sends the requests matching a host and path to a pool.
type Route struct {
	// Host is "" (any host), exact ("shop.acme.example") or a wildcard
	// ("*.acme.example").
	Host string
	// Path starts with "/"; prefixes are kept without a trailing slash.
	// For PathRegex it is the expression as written.
	Path     string
	PathType PathType
	// Pool receives the requests; nil when Ext.Backends is set or the
	// route only redirects.
	Pool *Pool
	// Index is the route's position in the load balancer's routes.
	Index int
	// Ext holds conditions, weighted backends, filters and timeouts; nil
	// for a route of host, path and pool only.
	Ext *RouteExt
	// Rate is the route's rate limit (requests).
	Rate RateSpec
	// WAF is the route's request inspection.
	WAF WAFSpec
	// NotFound: the route answers 404 (routes[].notFound); matching stops
	// at it rather than trying less specific hosts.
	NotFound bool
	// Terminate: a server-name route of a tls-passthrough listener whose
	// connections have TLS terminated by the load balancer and are
	// forwarded decrypted (listeners[].sniRoutes[].terminate).
	Terminate bool

	// next is the route tried after this one for the same host and path
	// when its conditions do not hold.
	next *Route
}

// same reports whether r and o route alike; pools compare by identity.
func (r *Route) same(o *Route) bool {
	return r.Host == o.Host && r.Path == o.Path && r.PathType == o.PathType && r.Pool == o.Pool &&
		r.Index == o.Index && r.Ext.equal(o.Ext) && r.Rate == o.Rate && r.WAF == o.WAF && r.NotFound == o.NotFound &&
		r.Terminate == o.Terminate
}

// Conditional reports whether the route matches on more than host and
// path: the method, headers or query parameters of the request.
func (r *Route) Conditional() bool { return r.Ext != nil && r.Ext.Cond != nil }

// RouteTable routes HTTP requests by host, then path, then the request's
// method, headers and query parameters.
//
// Hosts: an exact host beats a wildcard, a longer wildcard beats a shorter
// one, and both beat the routes for any host. A wildcard "*.acme.example"
// matches names with one or more labels in front of acme.example
// ("shop.acme.example" and "a.b.acme.example", never "acme.example"
// itself). When the most specific host has no route for the request, the
// next less specific one is tried; a NotFound route is a route like any
// other here, so the search stops at it (the proxy answers it 404).
//
// Paths: an exact path beats a regular expression, which beats a prefix;
// a longer expression beats a shorter one and a longer prefix a shorter
// one. Match expects a cleaned path (no dot segments, percent-decoding
// already decided by the caller).
//
// Among routes with the same host and path, one with a method condition
// comes first, then the one with more header conditions, then the one
// with more query parameter conditions, then the one written first (by
// route, then by match). The first whose conditions hold wins; when none
// does, the less specific paths are tried.
type RouteTable struct {
	routes   []Route
	exact    map[string]*hostRoutes
	wildcard map[string]*hostRoutes // keyed by the suffix after "*."
	any      *hostRoutes
	// conditional is set when some route has conditions.
	conditional bool
	// pathInsts and condInsts sum the programs of the regular
	// expressions of paths and of conditions.
	pathInsts, condInsts int
}

type hostRoutes struct {
	exact  map[string]*Route
	prefix map[string]*Route
	// regex holds the PathRegex routes, most specific first.
	regex []*Route
}

// NewRouteTable builds a table from routes. Hosts are lowercased, prefix
// paths lose their trailing slash, and of two plain routes (no Ext) with
// the same host, path and type the first wins.
func NewRouteTable(routes []Route) *RouteTable {
	rt := &RouteTable{routes: make([]Route, 0, len(routes))}
	hasRegex := false
	for _, r := range routes {
		r.Host = strings.ToLower(r.Host)
		r.next = nil
		if r.PathType == PathRegex {
			hasRegex = true
			rt.routes = append(rt.routes, r)
			continue
		}
		r.Path = cleanRoutePath(r.Path, r.PathType)
		if r.Ext == nil {
			m := rt.hostTable(r.Host).pathMap(r.PathType)
			if p, dup := (*m)[r.Path]; dup && p == nil {
				continue // a plain route for this host and path came first
			}
			(*m)[r.Path] = nil // filled below, once rt.routes stops growing
		}
		rt.routes = append(rt.routes, r)
	}
	type chainKey struct {
		m    *map[string]*Route
		path string
	}
	var chains []chainKey
	for i := range rt.routes {
		r := &rt.routes[i]
		rt.conditional = rt.conditional || r.Conditional()
		if r.Ext != nil && r.Ext.Cond != nil {
			rt.condInsts += r.Ext.Cond.regexInsts
		}
		ht := rt.hostTable(r.Host)
		if r.PathType == PathRegex {
			rt.pathInsts += r.Ext.PathRegex.insts
			ht.regex = append(ht.regex, r)
			continue
		}
		m := ht.pathMap(r.PathType)
		head := (*m)[r.Path]
		if head == nil {
			(*m)[r.Path] = r
			continue
		}
		if head.next == nil {
			chains = append(chains, chainKey{m, r.Path})
		}
		for head.next != nil {
			head = head.next
		}
		head.next = r
	}
	var list []*Route
	for _, k := range chains {
		list = list[:0]
		for r := (*k.m)[k.path]; r != nil; r = r.next {
			list = append(list, r)
		}
		slices.SortStableFunc(list, byConditions)
		for j := range list {
			list[j].next = nil
			if j > 0 {
				list[j-1].next = list[j]
			}
		}
		(*k.m)[k.path] = list[0]
	}
	if hasRegex {
		for _, ht := range rt.hostTables() {
			slices.SortStableFunc(ht.regex, func(a, b *Route) int {
				if d := len(b.Path) - len(a.Path); d != 0 {
					return d
				}
				return byConditions(a, b)
			})
		}
	}
	return rt
}

// pathMap returns the map of exact or prefix paths, made on first use.
func (ht *hostRoutes) pathMap(t PathType) *map[string]*Route {
	m := &ht.prefix
	if t == PathExact {
		m = &ht.exact
	}
	if *m == nil {
		*m = map[string]*Route{}
	}
	return m
}

// byConditions orders routes of the same host and path: a method first,
// then more headers, then more query parameters, then the order written.
func byConditions(a, b *Route) int {
	ca, cb := a.Ext.cond(), b.Ext.cond()
	if d := boolInt(cb.Method != "") - boolInt(ca.Method != ""); d != 0 {
		return d
	}
	if d := len(cb.Headers) - len(ca.Headers); d != 0 {
		return d
	}
	if d := len(cb.Query) - len(ca.Query); d != 0 {
		return d
	}
	if a.Index != b.Index {
		return a.Index - b.Index
	}
	return a.Ext.matchIndex() - b.Ext.matchIndex()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (rt *RouteTable) hostTables() []*hostRoutes {
	var out []*hostRoutes
	for _, ht := range rt.exact {
		out = append(out, ht)
	}
	for _, ht := range rt.wildcard {
		out = append(out, ht)
	}
	if rt.any != nil {
		out = append(out, rt.any)
	}
	return out
}

// cleanRoutePath turns "" into "/" and drops the trailing slashes of
// prefixes ("/api/" and "/api" are the same prefix).
func cleanRoutePath(p string, t PathType) string {
	if p == "" {
		return "/"
	}
	if t == PathPrefix {
		for len(p) > 1 && p[len(p)-1] == '/' {
			p = p[:len(p)-1]
		}
	}
	return p
}

func (rt *RouteTable) hostTable(host string) *hostRoutes {
	switch {
	case host == "":
		if rt.any == nil {
			rt.any = &hostRoutes{}
		}
		return rt.any
	case strings.HasPrefix(host, "*."):
		if rt.wildcard == nil {
			rt.wildcard = map[string]*hostRoutes{}
		}
		return getOrAdd(rt.wildcard, host[2:])
	default:
		if rt.exact == nil {
			rt.exact = map[string]*hostRoutes{}
		}
		return getOrAdd(rt.exact, host)
	}
}

func getOrAdd(m map[string]*hostRoutes, k string) *hostRoutes {
	ht := m[k]
	if ht == nil {
		ht = &hostRoutes{}
		m[k] = ht
	}
	return ht
}

// Routes returns the table's routes in order; the caller must not modify
// them.
func (rt *RouteTable) Routes() []Route {
	if rt == nil {
		return nil
	}
	return rt.routes
}

func (rt *RouteTable) equal(o *RouteTable) bool {
	if rt == nil || o == nil {
		return rt == o
	}
	return slices.EqualFunc(rt.routes, o.routes, func(a, b Route) bool { return a.same(&b) })
}

// maxHostLen is the longest DNS name.
const maxHostLen = api.MaxHostLen

// Conditional reports whether some route of the table has conditions on
// the method, headers or query parameters.
func (rt *RouteTable) Conditional() bool { return rt != nil && rt.conditional }

// Match returns the first route in precedence order for a request's Host
// (with or without a port, any case, an optional trailing dot) and path,
// or nil. A route it returns with conditions (Conditional) may not be the
// request's: Select decides then. It does not allocate.
func (rt *RouteTable) Match(host, path string) *Route {
	m := matching{}
	return rt.match(host, path, &m)
}

// Select returns the route for a request: the first in precedence order
// for its host and path whose conditions hold, or nil. It allocates only
// to decode a query parameter with escapes.
func (rt *RouteTable) Select(host, path string, req Request) *Route {
	if req == nil {
		req = reqview.HTTP{R: &http.Request{Method: http.MethodGet, Header: http.Header{}}}
	}
	m := matching{req: req}
	return rt.match(host, path, &m)
}

// Lookup is Select (Match when req is nil) that runs no regular
// expression when regex is false: it stops where one would run and
// reports blocked. A request whose route is decided before any (an exact
// path without regex conditions, a table without regexes) is routed
// whatever regex says. It allocates as Select does.
func (rt *RouteTable) Lookup(host, path string, req Request, regex bool) (r *Route, blocked bool) {
	m := matching{req: req, noRegex: !regex}
	r = rt.match(host, path, &m)
	if m.blocked {
		return nil, true
	}
	return r, false
}

// Regex reports whether some route of the table has a regular expression,
// of its path or a condition.
func (rt *RouteTable) Regex() bool { return rt != nil && rt.pathInsts+rt.condInsts > 0 }

// RegexSteps bounds the program steps the regular expressions of the
// table may take for one request of a path of pathLen bytes: each
// program runs at most once per byte of its subject, which is at most
// api.MaxRegexSubjectLen bytes. (Match then Select of one request may
// run the path expressions twice.)
func (rt *RouteTable) RegexSteps(pathLen int) int {
	if rt == nil {
		return 0
	}
	n := rt.condInsts * (api.MaxRegexSubjectLen + 1)
	if pathLen <= api.MaxRegexSubjectLen {
		n += rt.pathInsts * (pathLen + 1)
	}
	return n
}

// MatchRequest is Select for a net/http request.
func (rt *RouteTable) MatchRequest(host, path string, req *http.Request) *Route {
	if req == nil {
		return rt.Select(host, path, nil)
	}
	return rt.Select(host, path, reqview.HTTP{R: req})
}

func (rt *RouteTable) match(host, path string, m *matching) *Route {
	if rt == nil {
		return nil
	}
	var buf [maxHostLen]byte
	if h, ok := normalizeHost(&buf, host); ok && (rt.exact != nil || rt.wildcard != nil) {
		if ht := rt.exact[string(h)]; ht != nil {
			if r := ht.match(path, m); r != nil || m.blocked {
				return r
			}
		}
		if rt.wildcard != nil {
			for i := 0; i < len(h); i++ {
				if h[i] != '.' {
					continue
				}
				if ht := rt.wildcard[string(h[i+1:])]; ht != nil {
					if r := ht.match(path, m); r != nil || m.blocked {
						return r
					}
				}
			}
		}
	}
	if rt.any != nil {
		return rt.any.match(path, m)
	}
	return nil
}

// first returns the first route of a chain whose conditions hold; with
// no request, the chain's first.
func first(r *Route, m *matching) *Route {
	if m.req == nil {
		return r
	}
	for ; r != nil; r = r.next {
		if r.Ext.cond().holds(m) {
			return r
		}
		if m.blocked {
			return nil
		}
	}
	return nil
}

func (ht *hostRoutes) match(path string, m *matching) *Route {
	if path == "" {
		path = "/"
	}
	if r := first(ht.exact[path], m); r != nil || m.blocked {
		return r
	}
	// A path over api.MaxRegexSubjectLen matches no regex: with the
	// per-LB instruction budget that bounds the matching time.
	if len(ht.regex) > 0 && len(path) <= api.MaxRegexSubjectLen {
		if !m.regexOK() {
			return nil
		}
		for _, r := range ht.regex {
			c := r.Ext.cond()
			if m.req != nil && !c.holdsExact(m.req) {
				continue
			}
			if r.Ext.PathRegex.MatchString(path) && (m.req == nil || c.holdsRegex(m)) {
				return r
			}
		}
	}
	if ht.prefix == nil {
		return nil
	}
	end := len(path)
	for end > 1 && path[end-1] == '/' {
		end--
	}
	for {
		if r := first(ht.prefix[path[:end]], m); r != nil || m.blocked {
			return r
		}
		i := strings.LastIndexByte(path[:end], '/')
		if i <= 0 {
			break
		}
		end = i
	}
	return first(ht.prefix["/"], m)
}

// normalizeHost lowercases host into buf without its port and trailing
// dot. It reports false for what cannot be a DNS name (IPv6 literals,
// empty labels, characters outside letters, digits, '-' and '_'), which
// then matches only the routes for any host.
func normalizeHost(buf *[maxHostLen]byte, host string) ([]byte, bool) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		for j := i + 1; j < len(host); j++ {
			if host[j] < '0' || host[j] > '9' {
				return nil, false
			}
		}
		host = host[:i]
	}
	if strings.HasSuffix(host, ".") {
		host = host[:len(host)-1]
	}
	if host == "" || len(host) > maxHostLen {
		return nil, false
	}
	labelStart := 0
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '.':
			if i == labelStart {
				return nil, false
			}
			labelStart = i + 1
		default:
			return nil, false
		}
		buf[i] = c
	}
	if labelStart == len(host) {
		return nil, false
	}
	return buf[:len(host)], true
}
