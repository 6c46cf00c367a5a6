package l7

import (
	"bytes"
	"io"
	"net/http"
	"sync"
)

// MaxTenantInspectBodies bounds the body bytes a server holds at once for
// one tenant's routes' Inspect (a WAF's request bodies, each up to the
// route's InspectBody): they are read before the request is inspected and
// kept until it ends, and an inspection may wait for the tenant's CPU
// budget meanwhile. A request whose body would pass it is answered 503
// (OutcomeTenantLimit) before its body is read, so the clients of one
// tenant's routes cannot make the host hold a buffer per request they
// keep in flight.
const MaxTenantInspectBodies = 32 << 20

// tenantBytes counts bytes held per tenant against a bound.
type tenantBytes struct {
	mu       sync.Mutex
	byTenant map[string]int
}

// take charges n bytes to tenant; false, charging nothing, when that
// would pass limit.
func (b *tenantBytes) take(tenant string, n, limit int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byTenant == nil {
		b.byTenant = map[string]int{}
	}
	if b.byTenant[tenant]+n > limit {
		return false
	}
	b.byTenant[tenant] += n
	return true
}

// give returns n bytes that take charged to tenant.
func (b *tenantBytes) give(tenant string, n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byTenant[tenant] -= n; b.byTenant[tenant] <= 0 {
		delete(b.byTenant, tenant)
	}
}

// held returns the bytes charged to tenant.
func (b *tenantBytes) held(tenant string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byTenant[tenant]
}

// inspect runs the route's Inspect over the request, with the first
// InspectBody bytes of its body read (and given back to the body that is
// sent on), charged to the tenant (MaxTenantInspectBodies) until the
// caller gives back held when the request ends. It reports false when
// Inspect answered the request or the tenant's bound refused it.
func (s *Server) inspect(w http.ResponseWriter, q *rtRequest, route *Route) (ok bool, held int) {
	r := q.r
	var body []byte
	if r.Body != nil && r.Body != http.NoBody && route.InspectBody > 0 {
		reserve := route.InspectBody
		if r.ContentLength >= 0 && r.ContentLength < int64(reserve) {
			reserve = int(r.ContentLength)
		}
		if !s.inspected.take(q.stats.Tenant, reserve, MaxTenantInspectBodies) {
			s.failHTTP(w, q, 503, OutcomeTenantLimit)
			return false, 0
		}
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, int64(route.InspectBody)))
		s.inspected.give(q.stats.Tenant, reserve-len(body))
		held = len(body)
		if err != nil {
			s.failHTTP(w, q, 400, OutcomeClientError)
			return false, held
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	}
	h, status, note := route.Inspect(r, body, q.scope.pp.src, q.scope.pp.dst)
	q.stats.Inspected = note
	if h == nil {
		return true, held
	}
	h.ServeHTTP(w, r)
	q.stats.Status, q.stats.Outcome = status, OutcomeLocal
	return false, held
}
