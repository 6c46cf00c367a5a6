package snapshot

import (
	"slices"
	"strings"
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
)

func (t PathType) String() string {
	if t == PathExact {
		return "exact"
	}
	return "prefix"
}

// Route sends the requests matching a host and path to a pool.
type Route struct {
	// Host is "" (any host), exact ("shop.acme.example") or a wildcard
	// ("*.acme.example").
	Host string
	// Path starts with "/"; prefixes are kept without a trailing slash.
	Path     string
	PathType PathType
	Pool     *Pool
	// Index is the route's position in the load balancer's routes.
	Index int
}

// RouteTable routes HTTP requests by host, then path.
//
// Hosts: an exact host beats a wildcard, a longer wildcard beats a shorter
// one, and both beat the routes for any host. A wildcard "*.acme.example"
// matches names with one or more labels in front of acme.example
// ("shop.acme.example" and "a.b.acme.example", never "acme.example"
// itself). When the most specific host has no route for the path, the next
// less specific one is tried.
//
// Paths: an exact path beats a prefix, a longer prefix beats a shorter one.
// Match expects a cleaned path (no dot segments, percent-decoding already
// decided by the caller).
type RouteTable struct {
	routes   []Route
	exact    map[string]*hostRoutes
	wildcard map[string]*hostRoutes // keyed by the suffix after "*."
	any      *hostRoutes
}

type hostRoutes struct {
	exact  map[string]*Route
	prefix map[string]*Route
}

// NewRouteTable builds a table from routes. Hosts are lowercased, prefix
// paths lose their trailing slash, and of two routes with the same host,
// path and type the first wins.
func NewRouteTable(routes []Route) *RouteTable {
	rt := &RouteTable{routes: make([]Route, 0, len(routes))}
	for _, r := range routes {
		r.Host = strings.ToLower(r.Host)
		r.Path = cleanRoutePath(r.Path, r.PathType)
		ht := rt.hostTable(r.Host)
		m := &ht.prefix
		if r.PathType == PathExact {
			m = &ht.exact
		}
		if *m == nil {
			*m = map[string]*Route{}
		}
		if _, dup := (*m)[r.Path]; dup {
			continue
		}
		rt.routes = append(rt.routes, r)
		(*m)[r.Path] = nil // filled below, once rt.routes stops growing
	}
	for i := range rt.routes {
		r := &rt.routes[i]
		ht := rt.hostTable(r.Host)
		if r.PathType == PathExact {
			ht.exact[r.Path] = r
		} else {
			ht.prefix[r.Path] = r
		}
	}
	return rt
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
	return slices.Equal(rt.routes, o.routes)
}

// maxHostLen is the longest DNS name.
const maxHostLen = 253

// Match returns the route for a request's Host (with or without a port,
// any case, an optional trailing dot) and path, or nil. It does not
// allocate.
func (rt *RouteTable) Match(host, path string) *Route {
	if rt == nil {
		return nil
	}
	var buf [maxHostLen]byte
	if h, ok := normalizeHost(&buf, host); ok && (rt.exact != nil || rt.wildcard != nil) {
		if ht := rt.exact[string(h)]; ht != nil {
			if r := ht.match(path); r != nil {
				return r
			}
		}
		if rt.wildcard != nil {
			for i := 0; i < len(h); i++ {
				if h[i] != '.' {
					continue
				}
				if ht := rt.wildcard[string(h[i+1:])]; ht != nil {
					if r := ht.match(path); r != nil {
						return r
					}
				}
			}
		}
	}
	if rt.any != nil {
		return rt.any.match(path)
	}
	return nil
}

func (ht *hostRoutes) match(path string) *Route {
	if path == "" {
		path = "/"
	}
	if r := ht.exact[path]; r != nil {
		return r
	}
	if ht.prefix == nil {
		return nil
	}
	end := len(path)
	for end > 1 && path[end-1] == '/' {
		end--
	}
	for {
		if r := ht.prefix[path[:end]]; r != nil {
			return r
		}
		i := strings.LastIndexByte(path[:end], '/')
		if i <= 0 {
			break
		}
		end = i
	}
	return ht.prefix["/"]
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
