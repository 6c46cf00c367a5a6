package l7

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// h2conn handles the requests of one HTTP/2 connection.
type h2conn struct {
	s      *Server
	client netip.AddrPort
	info   *ConnInfo
	ca     clientAddrs
	scope  *connScope
	// members bounds the member connections its streams hold at once.
	members memberSlots
	// h3: the connection is HTTP/3 (H3Conn), not HTTP/2.
	h3 bool
}

func (hc *h2conn) ServeHTTP(w http.ResponseWriter, r *http.Request) { hc.serve(w, r, nil, nil) }

// serve serves a request through net/http values: as d says when the
// HTTP/2 fast path decided its route already (decide, with the scratch
// fw), else deciding it.
func (hc *h2conn) serve(w http.ResponseWriter, r *http.Request, d *decision, fw *fwdScratch) {
	s := hc.s
	var stats RequestStats
	startFigures(&stats, hc.info, hc.client, !hc.h3, hc.h3, netView(r))
	start := time.Now()
	var body *countedBody
	var cpu CPU
	if hc.h3 {
		// No codec of ours moves an HTTP/3 body: count it here.
		cpu = hc.info.CPU
	}
	if r.Body != nil && r.Body != http.NoBody {
		body = &countedBody{ReadCloser: r.Body, cpu: cpu}
		r.Body = body
	}
	defer func() {
		stats.Duration = time.Since(start)
		if body != nil {
			// What was read by now: a body writer may go on after the
			// response (countedBody).
			stats.RequestBytes = body.n.Load()
		}
		s.cfg.Metrics.Request(stats)
	}()
	if fw == nil {
		fw = new(fwdScratch)
	}
	q := &rtRequest{r: r, ca: &hc.ca, scope: hc.scope, stats: &stats, retries: s.cfg.Retries, cpu: cpu, fw: fw}
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
	hs := string(host)
	if d == nil {
		dd := s.decide(hc.info, &hc.ca, reqview.HTTP{R: r}, netView(r), fw, hs, path, false)
		d = &dd
	}
	if d.route != nil {
		stats.Route = d.route.Name
	}
	switch d.act {
	case actFail:
		s.failHTTP(w, q, d.status, d.out)
	case actExt:
		s.serveExt(w, q, d.route, hs, hc.ca.https, hc.scope.pp.dst.Port())
	case actLocal:
		serveLocal(w, r, d.route.Handler, &stats)
	case actRedirect:
		loc := append(appendHTTPSOrigin(nil, host, d.route.HTTPSPort), path...)
		if r.URL.RawQuery != "" {
			loc = append(append(loc, '?'), r.URL.RawQuery...)
		}
		code := httpsRedirect(r.Method)
		w.Header().Set("Location", string(loc))
		w.WriteHeader(code)
		stats.Status, stats.Outcome = code, OutcomeRedirect
	default:
		q.limit = d.limit
		if !h2Member(d.opts) { // each stream holds an HTTP/1.1 connection
			if err := hc.members.acquire(r.Context(), s.cfg.MaxMembersPerConn, rht(d.opts, s)); err != nil {
				if r.Context().Err() != nil {
					// The stream ended while it waited.
					stats.Outcome = abortedOutcome(w, r.Body)
					return
				}
				s.failHTTP(w, q, 503, OutcomeMemberLimit)
				return
			}
			defer hc.members.release()
		}
		s.proxyHTTP(w, q, d.be, d.opts)
	}
}
