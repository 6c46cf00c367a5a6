package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/balance"
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
	h.srv.ServeConn(ctx, c, info)
}

// trustNone is the trusted networks of a listener that names none.
var trustNone = []netip.Prefix{}

// router returns the listener's router, building it on first use.
func (h *HTTP) router(ls *ListenerSnapshot) l7.Router {
	if r := ls.http.Load(); r != nil {
		return r
	}
	r := &httpRouter{h: h, ls: ls, tls: ls.Protocol == snapshot.ProtoHTTPS}
	r.selector = &l7.Route{Name: ls.LB + "/routes", Select: r.selectRoute}
	if ls.RedirectToHTTPS {
		r.redirect = &l7.Route{Name: ls.LB + "/redirect", RedirectHTTPS: true}
	}
	if ls.http.CompareAndSwap(nil, r) {
		return r
	}
	return ls.http.Load()
}

type httpRouter struct {
	h        *HTTP
	ls       *ListenerSnapshot
	tls      bool
	redirect *l7.Route
	// selector stands for the routes with conditions: the engine asks it
	// again with the whole request.
	selector *l7.Route
	routes   sync.Map // *snapshot.Route → *l7.Route
}

func (r *httpRouter) Route(host, path string) *l7.Route {
	if !r.tls && r.h.challenge != nil {
		if hd := r.h.challenge(path); hd != nil {
			return &l7.Route{Name: r.ls.LB + "/acme-challenge", Handler: hd}
		}
	}
	if r.redirect != nil {
		return r.redirect
	}
	sr := r.ls.Routes.Match(host, path)
	if sr == nil {
		return nil
	}
	if sr.Conditional() {
		return r.selector
	}
	return r.route(sr)
}

// route returns the engine's route for a compiled one, built once.
func (r *httpRouter) route(sr *snapshot.Route) *l7.Route {
	if sr == nil {
		return nil
	}
	if v, ok := r.routes.Load(sr); ok {
		return v.(*l7.Route)
	}
	route := &l7.Route{Name: r.ls.LB + "/routes[" + strconv.Itoa(sr.Index) + "]"}
	if sr.Pool != nil {
		if p := r.ls.Pool(sr.Pool); p != nil {
			route.Backend = p.httpBackend()
		}
	}
	route.Ext = r.ext(sr)
	v, _ := r.routes.LoadOrStore(sr, route)
	return v.(*l7.Route)
}

// selectRoute chooses among routes with conditions by the whole request.
func (r *httpRouter) selectRoute(req *http.Request, host, path string) *l7.Route {
	return r.route(r.ls.Routes.MatchRequest(host, path, req))
}

// httpBackend returns the pool's L7 face, building it on first use.
func (p *Pool) httpBackend() *httpBackend {
	if b := p.http.Load(); b != nil {
		return b
	}
	b := &httpBackend{pool: p, members: make(map[*balance.Member]*httpMember, len(p.members))}
	b.opts = l7.BackendOptions{
		ConnectTimeout: p.Spec.ConnectTimeout,
		ProxyProtocol:  uint8(p.Spec.ProxyProtocol),
		HashHeader:     p.Spec.HashHeader,
	}
	switch p.Spec.BackendProtocol {
	case "h2c":
		b.opts.Protocol = l7.H2C
	case "tls":
		b.opts.Protocol = l7.HTTP1TLS
	case "h2":
		b.opts.Protocol = l7.H2TLS
	}
	b.hashClient = p.Spec.Algorithm == snapshot.Hash && p.Spec.HashHeader == ""
	for _, m := range p.members {
		b.members[m] = &httpMember{addr: m.Addr, target: Target(m)}
	}
	if p.http.CompareAndSwap(nil, b) {
		return b
	}
	return p.http.Load()
}

type httpBackend struct {
	pool       *Pool
	opts       l7.BackendOptions
	hashClient bool
	members    map[*balance.Member]*httpMember
}

func (b *httpBackend) Pick(client netip.Addr, hashKey []byte) (l7.Member, bool) {
	var key [16]byte
	if hashKey == nil && b.hashClient {
		key = client.As16()
		hashKey = key[:]
	}
	m := b.pool.Pick(hashKey)
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
// gave no response counts as a failed connect towards ejection.
func (m *httpMember) Done(err error, _ int, _ time.Duration) {
	m.target.End()
	if err != nil {
		m.target.ConnectFailed()
	} else {
		m.target.ConnectSucceeded()
	}
}
