package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/balance"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/health"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// HTTP serves http and https listeners with the L7 engine. It adapts the
// compiled listener (route table, pools, balancers, health) to the
// engine's Router, Backend and Member, building each adapter once per
// snapshot object so that requests allocate nothing for it.
type HTTP struct {
	srv       *l7.Server
	challenge func(path string) http.Handler
}

var _ ConnHandler = (*HTTP)(nil)

// NewHTTP returns the L7 handler. challenge, if not nil, answers ACME
// HTTP-01 requests on http listeners: it returns a handler for the paths
// it owns and nil for the others.
func NewHTTP(srv *l7.Server, challenge func(path string) http.Handler) *HTTP {
	return &HTTP{srv: srv, challenge: challenge}
}

// ServeConn implements ConnHandler.
func (h *HTTP) ServeConn(ctx context.Context, c net.Conn, current func() *ListenerSnapshot) {
	ls := current()
	if ls == nil {
		return
	}
	info := h.connInfo(ctx, ls, current)
	if ls.h3up != nil && ls.h3up.Load() {
		info.AltSvc = ls.altSvc
	}
	info.State, _ = ctx.Value(connStateKey{}).(*l7.ConnState)
	if tc, ok := c.(*tls.Conn); ok && ls.TLS != nil && len(ls.TLS.SNIScopes) > 0 {
		h.scopeToSNI(&info, tc.ConnectionState().ServerName, current)
	}
	h.srv.ServeConn(ctx, c, info)
}

// scopeToSNI makes the requests of a connection whose server name is sni
// answer 421 when their Host belongs to another of the listener's
// sniScopes (misdirectRouter); a connection without one is not checked.
func (h *HTTP) scopeToSNI(info *l7.ConnInfo, sni string, current func() *ListenerSnapshot) {
	if sni = normalSNI(sni); sni != "" {
		m := &misdirectRouter{h: h, current: current, sni: sni}
		info.Router = func() l7.Router { return m }
	}
}

// connInfo describes a connection of listener ls to the engine.
func (h *HTTP) connInfo(ctx context.Context, ls *ListenerSnapshot, current func() *ListenerSnapshot) l7.ConnInfo {
	info := l7.ConnInfo{
		Listener:       ls.Name,
		LB:             ls.LB,
		Tenant:         ls.Tenant,
		TLS:            ls.Protocol == snapshot.ProtoHTTPS,
		Local:          ls.Key.Addr,
		IdleTimeout:    ls.Limits.IdleTimeout,
		AccessLog:      ls.AccessLog,
		TrustedProxies: ls.TrustedProxies,
		Router: func() l7.Router {
			if l := current(); l != nil {
				return h.router(l)
			}
			return nil
		},
	}
	if info.TrustedProxies == nil {
		info.TrustedProxies = trustNone // not the engine's default
	}
	if ls.streams != nil {
		info.Streams = ls.streams
	}
	if ls.cpu != nil {
		// Body bytes and HTTP/2 control frames count in the tenant's host
		// CPU budget where they are moved (its requests count in Route).
		info.CPU = ls.cpu
	}
	if ls.TLS != nil && ls.TLS.Client != nil && ls.TLS.Client.SubjectHeader != "" {
		info.ClientCertHeader = ls.TLS.Client.SubjectHeader
		info.ClientSubject = ClientSubject(ctx)
	}
	return info
}

// misdirectRouter routes the requests of a TLS connection to a listener
// with sniScopes: a request whose Host belongs to another scope than the
// connection's server name is answered 421 (RFC 9110, section 15.5.20),
// so that a client that reused the connection for another site (HTTP/2
// connection coalescing) asks again on a connection of its own.
type misdirectRouter struct {
	h       *HTTP
	current func() *ListenerSnapshot
	sni     string
}

// Route implements l7.Router.
func (m *misdirectRouter) Route(host, path string) *l7.Route {
	l := m.current()
	if l == nil {
		return nil
	}
	if l.TLS != nil && len(l.TLS.SNIScopes) > 0 && l.TLS.SNIScopes.Of(m.sni) != l.TLS.SNIScopes.Of(host) {
		return misdirected
	}
	return m.h.router(l).Route(host, path)
}

// misdirected answers a request for another site than its connection's.
var misdirected = &l7.Route{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusMisdirectedRequest)
	_, _ = w.Write([]byte("misdirected request: this connection was opened for another site; open a new connection for this host\n"))
})}

// normalSNI returns a server name as routes compare hosts: lower case,
// without a trailing dot.
func normalSNI(s string) string {
	return strings.ToLower(strings.TrimSuffix(s, "."))
}

// clientSubjectKey carries the subject of a client's verified
// certificate from TLS termination to ServeConn.
type clientSubjectKey struct{}

// WithClientSubject returns ctx carrying the subject of the connection's
// verified client certificate, for the listener's subject header.
func WithClientSubject(ctx context.Context, subject string) context.Context {
	return context.WithValue(ctx, clientSubjectKey{}, subject)
}

// ClientSubject returns the subject WithClientSubject put in ctx, or "".
func ClientSubject(ctx context.Context) string {
	s, _ := ctx.Value(clientSubjectKey{}).(string)
	return s
}

// trustNone is the trusted networks of a listener that names none.
var trustNone = []netip.Prefix{}

// router returns the listener's router: the listener's prebuilt route
// table bound to this handler's ACME challenge, made once per listener
// snapshot.
func (h *HTTP) router(ls *ListenerSnapshot) l7.Router {
	if r := ls.router.Load(); r != nil {
		return r
	}
	t := ls.http
	if t == nil { // a listener snapshot not published by the proxy
		t = newHTTPTable(ls)
	}
	r := &httpRouter{h: h, ls: ls, t: t, tls: ls.Protocol == snapshot.ProtoHTTPS}
	if ls.router.CompareAndSwap(nil, r) {
		return r
	}
	return ls.router.Load()
}

// httpTable is an http listener's routes in the engine's terms: built
// with the listener snapshot, before it is published, and never changed,
// so that no request builds or caches any of it.
type httpTable struct {
	redirect *l7.Route
	// regexRefused answers a request that needs a regex when the
	// tenant's regex CPU budget is spent.
	regexRefused *l7.Route
	// selector stands for the routes with conditions: the engine asks it
	// again with the whole request.
	selector *l7.Route
	routes   map[*snapshot.Route]*l7.Route
}

// newHTTPTable builds the engine's routes of an http or https listener,
// with the L7 faces of every pool they send or mirror to.
func newHTTPTable(ls *ListenerSnapshot) *httpTable {
	srs := ls.Routes.Routes()
	t := &httpTable{routes: make(map[*snapshot.Route]*l7.Route, len(srs))}
	t.selector = &l7.Route{Name: ls.LB + "/routes", Select: func(req l7.Request, host, path string) *l7.Route {
		sr, blocked := ls.lookup(host, path, req)
		if blocked {
			return t.regexRefused
		}
		return t.routes[sr]
	}}
	if ls.Routes.Regex() {
		t.regexRefused = regexRefusedRoute(ls.LB)
	}
	if ls.RedirectToHTTPS {
		t.redirect = &l7.Route{Name: ls.LB + "/redirect", RedirectHTTPS: true, Gate: requestGate(ls, -1)}
	}
	for i := range srs {
		sr := &srs[i]
		if sr.NotFound {
			continue // no engine route: the request is answered 404
		}
		route := &l7.Route{Name: ls.LB + "/routes[" + strconv.Itoa(sr.Index) + "]"}
		if sr.Pool != nil {
			if p := ls.Pool(sr.Pool); p != nil {
				route.Backend = p.httpBackend(ls.budget, ls.tenant)
			}
		}
		route.Ext = routeExt(ls, sr)
		route.Gate = requestGate(ls, sr.Index)
		if sr.WAF.On {
			route.Inspect, route.InspectBody = wafNotReady, sr.WAF.MaxBody
			if ls.waf != nil {
				route.Inspect = ls.waf(ls, sr)
			}
		}
		t.routes[sr] = route
	}
	return t
}

type httpRouter struct {
	h   *HTTP
	ls  *ListenerSnapshot
	t   *httpTable
	tls bool
}

func (r *httpRouter) Route(host, path string) *l7.Route {
	// Every request of the tenant's, of any HTTP version, is routed
	// here: counted in its host CPU budget, and held while it is in debt.
	r.ls.cpu.Work(cpubudget.WorkRequest)
	r.ls.cpu.Throttle()
	if !r.tls && r.h.challenge != nil {
		if hd := r.h.challenge(path); hd != nil {
			return &l7.Route{Name: r.ls.LB + "/acme-challenge", Handler: hd}
		}
	}
	if r.t.redirect != nil {
		return r.t.redirect
	}
	sr, blocked := r.ls.lookup(host, path, nil)
	if blocked {
		return r.t.regexRefused
	}
	if sr == nil {
		return nil
	}
	if sr.Conditional() {
		return r.t.selector
	}
	return r.t.routes[sr]
}

// httpBackend returns the pool's L7 face, building it on first use: when
// the first http listener snapshot that uses the pool is built. Its member
// connections are charged to budget, the tenant's (a pool is one load
// balancer's).
func (p *Pool) httpBackend(budget *l7.MemberBudget, tenant *tenantBudget) *httpBackend {
	if b := p.http.Load(); b != nil {
		return b
	}
	b := &httpBackend{pool: p, members: make(map[*balance.Member]*httpMember, len(p.members))}
	b.opts = l7.BackendOptions{
		Pool:           p.Spec.Name,
		ConnectTimeout: p.Spec.ConnectTimeout,
		ProxyProtocol:  uint8(p.Spec.ProxyProtocol),
		HashHeader:     p.Spec.HashHeader,
		Budget:         budget,
	}
	if tenant != nil {
		b.opts.Dialer = tenant.dialer
	}
	switch p.Spec.BackendProtocol {
	case "h2c":
		b.opts.Protocol = l7.H2C
	case "tls":
		b.opts.Protocol = l7.HTTP1TLS
	case "h2":
		b.opts.Protocol = l7.H2TLS
	}
	if p.Spec.TLS != nil && (b.opts.Protocol == l7.HTTP1TLS || b.opts.Protocol == l7.H2TLS) {
		b.opts.TLS = memberTLSConfig(p.Spec.TLS, tenant)
	}
	b.hashed = p.Spec.Algorithm == snapshot.Hash
	for _, m := range p.members {
		b.members[m] = &httpMember{addr: m.Addr, target: Target(m)}
	}
	if p.http.CompareAndSwap(nil, b) {
		return b
	}
	return p.http.Load()
}

type httpBackend struct {
	pool *Pool
	opts l7.BackendOptions
	// hashed: the pool's algorithm is hash.
	hashed  bool
	members map[*balance.Member]*httpMember
}

// Pick picks a member for a request of client. A hash pool hashes
// hashKey, the value of its HashHeader field; a pool hashing the client
// IP, and a request without that field or with an empty one, hash the
// client's address, the one its rate limits and access log count it by,
// so that such requests spread over the members by client and each
// client keeps its member, rather than all hashing the empty key to one
// member.
func (b *httpBackend) Pick(client netip.Addr, hashKey []byte) (l7.Member, bool) {
	var m *balance.Member
	if len(hashKey) == 0 && b.hashed {
		m = b.pool.PickAddr(client)
	} else {
		m = b.pool.Pick(hashKey)
	}
	if m == nil {
		return nil, false
	}
	hm := b.members[m]
	hm.target.Begin()
	return hm, true
}

func (b *httpBackend) Options() *l7.BackendOptions { return &b.opts }

type httpMember struct {
	addr   netip.AddrPort
	target *health.Target
}

func (m *httpMember) Addr() netip.AddrPort { return m.addr }

// Done feeds least-request accounting and passive health: a member that
// gave no response counts as a failed connect towards ejection, and the
// outcome counts in the member's passive window, unless the tenant's own
// budget kept it from being dialled.
func (m *httpMember) Done(err error, status int, _ time.Duration) {
	m.target.End()
	if errors.Is(err, l7.ErrMemberLimit) || errors.Is(err, l7.ErrMemberCertificate) {
		// Not the member's fault: the tenant's budget, or the pool's
		// verdict on its certificate (the member's health is shared with
		// the tenant's pools that trust it).
		return
	}
	if err != nil {
		m.target.ConnectFailed()
	} else {
		m.target.ConnectSucceeded()
	}
	if o, ok := httpOutcome(err, status); ok {
		m.target.Record(o)
	}
}

// httpOutcome is what a request got from a member for passive health;
// false when it says nothing about the member (the client left before
// the answer, status 0 without an error).
func httpOutcome(err error, status int) (health.Outcome, bool) {
	switch {
	case err == nil && status == 0:
		return health.OutcomeOK, false
	case err == nil && status == 502:
		return health.Outcome502, true
	case err == nil && status == 503:
		return health.Outcome503, true
	case err == nil && status == 504:
		return health.Outcome504, true
	case err == nil:
		return health.OutcomeOK, true
	case errors.Is(err, l7.ErrConnect):
		return health.OutcomeConnect, true
	case errors.Is(err, l7.ErrUpstreamTimeout):
		return health.OutcomeTimeout, true
	case errors.Is(err, l7.ErrUpstreamProtocol):
		return health.OutcomeProtocol, true
	}
	return health.OutcomeReset, true
}
