package l7

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// serveH2 serves an HTTP/2 client on a TLS connection that negotiated h2.
func (s *Server) serveH2(ctx context.Context, tc *tls.Conn, info *ConnInfo, client, local netip.AddrPort) {
	defer tc.Close()
	idle := info.IdleTimeout
	if idle <= 0 {
		idle = s.cfg.IdleTimeout
	}
	// One http2.Server per connection: its graceful shutdown (GOAWAY)
	// then concerns this connection alone.
	base := &http.Server{
		MaxHeaderBytes: s.cfg.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
	}
	h2s := &http2.Server{
		MaxConcurrentStreams: s.cfg.H2MaxConcurrentStreams,
		IdleTimeout:          idle,
		ReadIdleTimeout:      idle / 2,
		WriteByteTimeout:     s.cfg.WriteTimeout,
	}
	if err := http2.ConfigureServer(base, h2s); err != nil {
		return
	}
	var once sync.Once
	goAway := func() {
		once.Do(func() { go func() { _ = base.Shutdown(context.Background()) }() })
	}
	stop := context.AfterFunc(ctx, goAway)
	defer stop()
	hc := &h2conn{
		s: s, info: info, client: client,
		ca:    newClientAddrs(client, true, s.trusted(info)),
		scope: &connScope{s: s, pp: proxyAddrs{src: client, dst: local}},
	}
	defer hc.scope.close()
	g := &rstGuard{Conn: tc, tc: tc, preface: len(http2.ClientPreface),
		rate: float64(s.cfg.H2MaxResetsPerSecond), burst: float64(s.cfg.H2ResetBurst), onAbuse: goAway}
	g.tokens = g.burst
	h2s.ServeConn(g, &http2.ServeConnOpts{
		Context:    context.WithoutCancel(ctx),
		BaseConfig: base,
		Handler:    hc,
	})
}

// h2conn handles the requests of one HTTP/2 connection.
type h2conn struct {
	s      *Server
	client netip.AddrPort
	info   *ConnInfo
	ca     clientAddrs
	scope  *connScope
}

func (hc *h2conn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := hc.s
	stats := RequestStats{Listener: hc.info.Listener, LB: hc.info.LB, Tenant: hc.info.Tenant, HTTP2: true, Client: hc.client}
	if hc.info.AccessLog > 0 {
		stats.AccessLog, stats.Host, stats.Method, stats.Path = hc.info.AccessLog, r.Host, r.Method, r.URL.RequestURI()
		stats.RequestID = r.Header.Get("X-Request-Id")
	}
	start := time.Now()
	defer func() {
		stats.Duration = time.Since(start)
		s.cfg.Metrics.Request(stats)
	}()
	q := &rtRequest{r: r, ca: &hc.ca, scope: hc.scope, stats: &stats, retries: s.cfg.Retries}
	if r.Method == http.MethodConnect {
		s.failHTTP(w, q, 405, OutcomeClientError)
		return
	}
	n := 0
	for _, vv := range r.Header {
		n += len(vv)
	}
	if n > s.cfg.MaxHeaderCount {
		s.failHTTP(w, q, 431, OutcomeClientError)
		return
	}
	var hostBuf [256]byte
	host, ok := normalizeHost(hostBuf[:0], []byte(r.Host))
	if !ok {
		s.failHTTP(w, q, 400, OutcomeClientError)
		return
	}
	path := r.URL.EscapedPath()
	if path == "" || path[0] != '/' {
		path = "/"
	}
	if needsClean([]byte(path)) {
		path = string(cleanPath(nil, []byte(path)))
	}
	q.path = path
	var route *Route
	if hc.info.Router != nil {
		if rt := hc.info.Router(); rt != nil {
			route = rt.Route(string(host), path)
		}
	}
	if route == nil {
		s.failHTTP(w, q, 404, OutcomeNoRoute)
		return
	}
	stats.Route = route.Name
	switch {
	case route.RedirectHTTPS:
		loc := "https://" + string(host)
		if route.HTTPSPort != 0 && route.HTTPSPort != 443 {
			loc += ":" + strconv.Itoa(int(route.HTTPSPort))
		}
		loc += path
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		code := 308
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			code = 301
		}
		w.Header().Set("Location", loc)
		w.WriteHeader(code)
		stats.Status, stats.Outcome = code, OutcomeRedirect
	case route.Handler != nil:
		route.Handler.ServeHTTP(w, r)
		stats.Status, stats.Outcome = 200, OutcomeLocal
	case route.Backend == nil:
		s.failHTTP(w, q, 503, OutcomeNoMember)
	default:
		opts := route.Backend.Options()
		q.limit = opts.MaxBodyBytes
		if q.limit <= 0 {
			q.limit = s.cfg.MaxBodyBytes
		}
		s.proxyHTTP(w, q, route.Backend, opts)
	}
}

// errRapidReset ends a connection that kept resetting streams after its
// GOAWAY.
var errRapidReset = errors.New("http2: too many stream resets")

// rstGuard watches the frames an HTTP/2 client sends and bounds the rate
// of its RST_STREAM frames with a token bucket (rapid reset, CVE-2023-44487).
// Past the budget the connection gets a GOAWAY; a client that goes on
// resetting past twice the burst is cut off.
type rstGuard struct {
	net.Conn
	tc *tls.Conn

	preface int     // client preface bytes still to skip
	hdr     [9]byte // frame header being read
	hn      int
	skip    int // payload bytes left in the current frame

	rate, burst float64
	tokens      float64
	last        time.Time
	abused      bool
	after       int // resets since the GOAWAY
	onAbuse     func()
}

// ConnectionState lets the HTTP/2 server see the TLS state.
func (g *rstGuard) ConnectionState() tls.ConnectionState { return g.tc.ConnectionState() }

func (g *rstGuard) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if g.scan(p[:n]) {
		return n, errRapidReset
	}
	return n, err
}

// scan follows the frame boundaries in b and reports whether the client
// must be cut off.
func (g *rstGuard) scan(b []byte) bool {
	for len(b) > 0 {
		switch {
		case g.preface > 0:
			k := min(g.preface, len(b))
			g.preface -= k
			b = b[k:]
		case g.skip > 0:
			k := min(g.skip, len(b))
			g.skip -= k
			b = b[k:]
		default:
			k := copy(g.hdr[g.hn:], b)
			g.hn += k
			b = b[k:]
			if g.hn < len(g.hdr) {
				return false
			}
			g.hn = 0
			g.skip = int(g.hdr[0])<<16 | int(g.hdr[1])<<8 | int(g.hdr[2])
			if http2.FrameType(g.hdr[3]) == http2.FrameRSTStream && g.reset() {
				return true
			}
		}
	}
	return false
}

// reset takes a token for one RST_STREAM frame.
func (g *rstGuard) reset() bool {
	if g.abused {
		g.after++
		return float64(g.after) > 2*g.burst
	}
	now := time.Now()
	if !g.last.IsZero() {
		g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
	}
	g.last = now
	if g.tokens >= 1 {
		g.tokens--
		return false
	}
	g.abused = true
	g.onAbuse()
	return false
}
