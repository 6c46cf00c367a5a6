package l7

import (
	"net/http"
	"strconv"
	"strings"
)

// CORS is a route's CORS filter, the Gateway API's: a preflight (OPTIONS
// with Origin and Access-Control-Request-Method) is answered here, 204,
// with the Access-Control-Allow-* fields when its origin is allowed and
// without them otherwise; another request from an allowed origin gets
// Access-Control-Allow-Origin (and -Credentials, -Expose-Headers) on its
// response. It is applied in serveExt, so every protocol gets it the
// same way. Build it with NewCORS; a published value is never modified.
type CORS struct {
	// allowed origins: any, or these patterns.
	anyOrigin bool
	origins   []corsOrigin
	// methods, headers and expose are the joined lists; anyMethod and
	// anyHeader stand for "*".
	anyMethod, anyHeader bool
	methods, headers     string
	expose, maxAge       string
	credentials          bool
}

// CORSConfig is a CORS filter as the model has it, validated: origins
// are "*" alone, or scheme://host[:port] where host may be "*" or start
// with "*." (any number of labels in its place).
type CORSConfig struct {
	AllowOrigins, AllowMethods, AllowHeaders, ExposeHeaders []string
	// MaxAge in seconds, sent as Access-Control-Max-Age.
	MaxAge           uint32
	AllowCredentials bool
}

// corsOrigin is one allowed origin: scheme, port and a host that is
// exact, any (host "*") or a suffix (wildcard, host ".acme.example").
type corsOrigin struct {
	scheme, host string
	port         uint16
	anyHost      bool
	suffix       bool
}

// NewCORS prepares a CORS filter. Origins that do not parse are left out
// (the model's validation refuses them).
func NewCORS(cfg CORSConfig) *CORS {
	c := &CORS{credentials: cfg.AllowCredentials, maxAge: strconv.FormatUint(uint64(cfg.MaxAge), 10)}
	for _, o := range cfg.AllowOrigins {
		if o == "*" {
			c.anyOrigin = true
			continue
		}
		scheme, host, port, ok := parseOrigin(o)
		if !ok {
			continue
		}
		co := corsOrigin{scheme: scheme, host: host, port: port}
		switch {
		case host == "*":
			co.anyHost = true
		case strings.HasPrefix(host, "*."):
			co.suffix, co.host = true, host[1:]
		}
		c.origins = append(c.origins, co)
	}
	c.anyMethod = len(cfg.AllowMethods) == 1 && cfg.AllowMethods[0] == "*"
	c.methods = strings.Join(cfg.AllowMethods, ", ")
	c.anyHeader = len(cfg.AllowHeaders) == 1 && cfg.AllowHeaders[0] == "*"
	c.headers = strings.Join(cfg.AllowHeaders, ", ")
	c.expose = strings.Join(cfg.ExposeHeaders, ", ")
	return c
}

// parseOrigin splits an origin into its lower-case scheme and host and
// its port (the scheme's own when it has none).
func parseOrigin(s string) (scheme, host string, port uint16, ok bool) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "", "", 0, false
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", "", 0, false
	}
	host = rest
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.HasSuffix(rest, "]") {
		p, err := strconv.ParseUint(rest[i+1:], 10, 16)
		if err != nil || p == 0 {
			return "", "", 0, false
		}
		host, port = rest[:i], uint16(p)
	}
	if host == "" || strings.ContainsAny(host, "/?#@ ") {
		return "", "", 0, false
	}
	return scheme, strings.ToLower(host), port, true
}

// allows reports whether the request's Origin is allowed.
func (c *CORS) allows(origin string) bool {
	if c.anyOrigin {
		return true
	}
	scheme, host, port, ok := parseOrigin(origin)
	if !ok {
		return false
	}
	for i := range c.origins {
		o := &c.origins[i]
		if o.scheme != scheme || o.port != port {
			continue
		}
		if o.anyHost || (o.suffix && len(host) > len(o.host) && strings.HasSuffix(host, o.host)) || (!o.suffix && host == o.host) {
			return true
		}
	}
	return false
}

// allowOrigin sets Access-Control-Allow-Origin (and Vary: Origin when it
// echoes the origin) and Access-Control-Allow-Credentials.
func (c *CORS) allowOrigin(h http.Header, origin string) {
	if c.anyOrigin && !c.credentials {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
	if c.credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if c.expose != "" {
		h.Set("Access-Control-Expose-Headers", c.expose)
	}
}

// apply answers a preflight (done is true), or returns w, wrapped so that
// the response of an allowed origin carries the CORS fields.
func (c *CORS) apply(w http.ResponseWriter, r *http.Request) (_ http.ResponseWriter, status int, done bool) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return w, 0, false
	}
	reqMethod := r.Header.Get("Access-Control-Request-Method")
	if r.Method != http.MethodOptions || reqMethod == "" {
		if !c.allows(origin) {
			return w, 0, false
		}
		return &corsWriter{ResponseWriter: w, c: c, origin: origin}, 0, false
	}
	h := w.Header()
	if c.allows(origin) {
		c.allowOrigin(h, origin)
		switch {
		case c.anyMethod && c.credentials:
			h.Set("Access-Control-Allow-Methods", reqMethod)
		case c.methods != "":
			h.Set("Access-Control-Allow-Methods", c.methods)
		}
		if reqHeaders := strings.Join(r.Header.Values("Access-Control-Request-Headers"), ", "); reqHeaders != "" {
			switch {
			case c.anyHeader && c.credentials:
				h.Set("Access-Control-Allow-Headers", reqHeaders)
			case c.headers != "":
				h.Set("Access-Control-Allow-Headers", c.headers)
			}
		}
		h.Set("Access-Control-Max-Age", c.maxAge)
	}
	w.WriteHeader(http.StatusNoContent)
	return w, http.StatusNoContent, true
}

// corsWriter adds the CORS fields to the response head of an allowed
// origin's request.
type corsWriter struct {
	http.ResponseWriter
	c      *CORS
	origin string
	wrote  bool
}

func (w *corsWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		w.c.allowOrigin(w.Header(), w.origin)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *corsWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(200)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *corsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
