package l7

import (
	"net/http"
	"net/netip"
)

// H3Conn serves the requests of one HTTP/3 connection. The HTTP/3 codec
// (QUIC streams, QPACK) lives outside this package and hands each request
// over as a net/http value; from there the request takes the path of an
// HTTP/2 request that needs net/http values (h2conn.ServeHTTP): the same
// routing, gates, filters, retries, member pools, budgets, access log and
// metrics, with RequestStats.HTTP3 set.
type H3Conn struct {
	hc h2conn
}

// NewH3Conn returns the request handler of one HTTP/3 connection from
// client to local on a listener described by info (info.TLS is true: QUIC
// is always TLS). Close it when the connection ends.
func (s *Server) NewH3Conn(info *ConnInfo, client, local netip.AddrPort) *H3Conn {
	if info.Client.IsValid() {
		client = info.Client
	}
	if info.Local.IsValid() {
		local = info.Local
	}
	c := &H3Conn{hc: h2conn{
		s: s, info: info, client: client, h3: true,
		ca:    newClientAddrs(client, true, s.trusted(info)),
		scope: &connScope{s: s, pp: proxyAddrs{src: client, dst: local}, cpu: info.CPU, cpuW: WorkTLSBytes},
	}}
	c.hc.ca.clientCert(info)
	s.cfg.Metrics.Conn(info, true)
	return c
}

// ServeHTTP serves one request of the connection. When info.Streams is
// set, a request past the tenant's bound of requests in progress is
// answered 503 without being routed (HTTP/2 refuses such a stream with
// REFUSED_STREAM).
func (c *H3Conn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sb := c.hc.info.Streams; sb != nil {
		if !sb.TakeStream() {
			w.Header().Set("Retry-After", "1")
			s := c.hc.s
			var stats RequestStats
			startFigures(&stats, c.hc.info, c.hc.client, false, true, netView(r))
			s.failHTTP(w, &rtRequest{r: r, ca: &c.hc.ca, scope: c.hc.scope, stats: &stats}, 503, OutcomeMemberLimit)
			s.cfg.Metrics.Request(stats)
			return
		}
		defer sb.ReleaseStream()
	}
	c.hc.ServeHTTP(w, r)
}

// ServeEarly serves a request received in 0-RTT (TLS early data, before
// the handshake completed), which an attacker may have replayed (RFC
// 8470): a GET, HEAD or OPTIONS request is served as ServeHTTP serves it,
// with "Early-Data: 1" added so that the member knows; any other method
// (TRACE too: it echoes the request) is answered 425 Too Early without
// being routed, and the client may send it again once the handshake
// completed.
func (c *H3Conn) ServeEarly(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		r.Header.Set("Early-Data", "1")
		c.ServeHTTP(w, r)
		return
	}
	s := c.hc.s
	var stats RequestStats
	startFigures(&stats, c.hc.info, c.hc.client, false, true, netView(r))
	s.failHTTP(w, &rtRequest{r: r, ca: &c.hc.ca, scope: c.hc.scope, stats: &stats}, http.StatusTooEarly, OutcomeClientError)
	s.cfg.Metrics.Request(stats)
}

// Close releases what the connection's requests held (member connections
// private to it).
func (c *H3Conn) Close() {
	c.hc.scope.close()
	c.hc.s.cfg.Metrics.Conn(c.hc.info, false)
}

// MaxHeaderBytes is the bound of a request's header list (the codec's
// SETTINGS_MAX_FIELD_SECTION_SIZE).
func (c *H3Conn) MaxHeaderBytes() int { return c.hc.s.cfg.MaxHeaderBytes }
