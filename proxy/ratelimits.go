package proxy

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/ratelimit"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// listenerRates are the limiters of one listener snapshot: its new
// connections, its requests, and each route's requests (by route index).
// The limiters live in the tenant's ratelimit.Table, keyed by load
// balancer and listener or route, so that a configuration change that
// keeps a limit keeps its counts.
type listenerRates struct {
	conns, requests *ratelimit.Limiter
	routes          map[int]*ratelimit.Limiter
}

// rateTable returns the tenant's table of rate-limit keys on this host,
// bounded by its quotas.rateLimitKeys (keys; 0: the default).
func (p *Proxy) rateTable(tenant string, keys int) *ratelimit.Table {
	if keys <= 0 {
		keys = api.DefaultRateLimitKeys
	}
	v, ok := p.rateTables.Load(tenant)
	if !ok {
		v, _ = p.rateTables.LoadOrStore(tenant, ratelimit.NewTable(keys))
	}
	t := v.(*ratelimit.Table)
	if !ok {
		if k := p.rateShareKey.Load(); k != nil {
			t.SetHashKey(*k)
		}
	}
	t.SetMax(keys)
	if p.rateShareKey.Load() != nil {
		t.SetShareCap(ratelimit.ShareCap(keys))
	}
	return t
}

// RateLimitStats returns the tenant's rate-limit counts on this host.
func (p *Proxy) RateLimitStats(tenant string) ratelimit.Stats {
	v, ok := p.rateTables.Load(tenant)
	if !ok {
		return ratelimit.Stats{}
	}
	return v.(*ratelimit.Table).Stats()
}

func limitSpec(rate uint32, s snapshot.RateSpec) ratelimit.Spec {
	return ratelimit.Spec{Rate: rate, Burst: s.Burst, Total: s.Total, Header: s.Header}
}

// acquireRates takes the limiters l needs; nothing for a listener
// without rate limits.
func (p *Proxy) acquireRates(l *snapshot.Listener) listenerRates {
	var r listenerRates
	var t *ratelimit.Table
	table := func() *ratelimit.Table {
		if t == nil {
			t = p.rateTable(l.Tenant, l.Limits.RateLimitKeys)
		}
		return t
	}
	if l.Rate.Conns > 0 {
		r.conns = table().Acquire(l.LB+" "+l.Name+" connections", limitSpec(l.Rate.Conns, l.Rate))
	}
	if l.Protocol.L7() {
		if l.Rate.Requests > 0 {
			r.requests = table().Acquire(l.LB+" "+l.Name+" requests", limitSpec(l.Rate.Requests, l.Rate))
		}
		for _, sr := range l.Routes.Routes() {
			if sr.Rate.Requests == 0 || r.routes[sr.Index] != nil {
				continue
			}
			if r.routes == nil {
				r.routes = map[int]*ratelimit.Limiter{}
			}
			r.routes[sr.Index] = table().Acquire(l.LB+" routes["+strconv.Itoa(sr.Index)+"]", limitSpec(sr.Rate.Requests, sr.Rate))
		}
	}
	return r
}

// release gives the limiters back.
func (r listenerRates) release() {
	if r.conns != nil {
		r.conns.Release()
	}
	if r.requests != nil {
		r.requests.Release()
	}
	for _, l := range r.routes {
		l.Release()
	}
}

// admitConnRate counts an accepted connection against the listener's
// connectionsPerSecond; a connection over it is refused and counted.
func (p *Proxy) admitConnRate(l *ListenerSnapshot, c *net.TCPConn) bool {
	if l.rates.conns == nil {
		return true
	}
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	return p.admitConnRateAddr(l, a.AddrPort().Addr())
}

// admitConnRateAddr is admitConnRate for a client address (UDP: a new
// flow's).
func (p *Proxy) admitConnRateAddr(l *ListenerSnapshot, a netip.Addr) bool {
	if l.rates.conns == nil || l.rates.conns.Allow(a, ratelimit.Now()).OK {
		return true
	}
	p.metrics.ConnRefused(l.LB, l.Name, RefusedRateLimit)
	return false
}

// requestGate returns the gate of a route of ls: the listener's
// requestsPerSecond, then the route's (index; -1: a route of the
// listener's own, a redirect). nil when neither is limited.
func requestGate(ls *ListenerSnapshot, index int) func(netip.Addr, l7.Request) http.Handler {
	lim, route := ls.rates.requests, ls.rates.routes[index]
	if lim == nil && route == nil {
		return nil
	}
	return func(client netip.Addr, r l7.Request) http.Handler {
		now := ratelimit.Now()
		for _, l := range [2]*ratelimit.Limiter{lim, route} {
			if l == nil {
				continue
			}
			if v := allowRequest(l, client, r, now); !v.OK {
				return rateRefusal{limit: l.Spec().Rate, v: v}
			}
		}
		return nil
	}
}

// allowRequest counts a request against l: by the value of its header
// when l is keyed by one and the request has it, else by client address.
func allowRequest(l *ratelimit.Limiter, client netip.Addr, r l7.Request, now int64) ratelimit.Verdict {
	if h := l.Spec().Header; h != "" && r != nil {
		if v, ok := r.Header(h); ok && v != "" {
			return l.AllowKey(v, now)
		}
	}
	return l.Allow(client, now)
}

// rateRefusal answers a request over a rate limit: 429 with Retry-After
// (whole seconds, at least 1) and the RateLimit-Limit, -Remaining and
// -Reset fields of draft-ietf-httpapi-ratelimit-headers.
type rateRefusal struct {
	limit uint32
	v     ratelimit.Verdict
}

func (h rateRefusal) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	secs := func(d time.Duration) string { return strconv.Itoa(max(1, int(math.Ceil(d.Seconds())))) }
	hd := w.Header()
	hd.Set("Retry-After", secs(h.v.RetryAfter))
	hd.Set("RateLimit-Limit", strconv.FormatUint(uint64(h.limit), 10))
	hd.Set("RateLimit-Remaining", "0")
	hd.Set("RateLimit-Reset", secs(h.v.Reset))
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Content-Length", "18")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("too many requests\n"))
}

// DrainSharedRates calls f with each of this host's total rate limits
// (by tenant and limiter id) and the arrivals it admitted since the last
// call, for the other hosts serving the same VIPs (package rateshare).
func (p *Proxy) DrainSharedRates(f func(tenant, id string, n int64)) {
	p.rateTables.Range(func(k, v any) bool {
		tenant := k.(string)
		v.(*ratelimit.Table).Drain(func(id string, n int64) { f(tenant, id, n) })
		return true
	})
}

// DebitSharedRate counts n arrivals another host admitted against this
// host's total rate limit id of the tenant, if it has one.
func (p *Proxy) DebitSharedRate(tenant, id string, n int64) {
	if v, ok := p.rateTables.Load(tenant); ok {
		v.(*ratelimit.Table).Debit(id, n, ratelimit.Now())
	}
}

// DrainSharedKeys calls f with each hot key of the tenants' per-client
// and per-header limits on this host and the arrivals it admitted since
// it was last shared, at most ratelimit.ShareCap keys a tenant (package
// rateshare).
func (p *Proxy) DrainSharedKeys(f func(tenant, id string, k ratelimit.SharedKey, n uint32)) {
	p.rateTables.Range(func(k, v any) bool {
		tenant := k.(string)
		v.(*ratelimit.Table).DrainKeys(func(id string, k ratelimit.SharedKey, n uint32) { f(tenant, id, k, n) })
		return true
	})
}

// DebitSharedKey counts n arrivals another host admitted for key k of the
// tenant's per-client or per-header limit id against this host's.
func (p *Proxy) DebitSharedKey(tenant, id string, k ratelimit.SharedKey, n int64) {
	if v, ok := p.rateTables.Load(tenant); ok {
		v.(*ratelimit.Table).DebitKey(id, k, n, ratelimit.Now())
	}
}

// ShareRateKeys makes this host share the hot keys of its tenants'
// per-client and per-header limits (a rateshare.Sharer drains them),
// with header values hashed under key, which every host of the cluster
// has, so that their keys match.
func (p *Proxy) ShareRateKeys(key [16]byte) {
	p.rateShareKey.Store(&key)
	p.rateTables.Range(func(_, v any) bool {
		t := v.(*ratelimit.Table)
		t.SetHashKey(key)
		t.SetShareCap(ratelimit.ShareCap(t.Stats().Max))
		return true
	})
}
