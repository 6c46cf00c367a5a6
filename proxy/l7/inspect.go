package l7

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

// MaxTenantInspectBodies bounds the body bytes a server holds at once for
// one tenant's routes' Inspect (a WAF's request bodies, each up to the
// route's InspectBody): they are read before the request is inspected and
// kept until it ends, while a slow member takes the body. The buffer is
// charged as it grows with the bytes that came, so a client that
// announces a large body and sends little holds little; a request whose
// buffer would pass the bound is answered 503 (OutcomeInspectLimit), so
// the clients of one tenant's routes cannot make the host hold a buffer
// per request they keep in flight.
const MaxTenantInspectBodies = 32 << 20

// inspectChunk is what an inspected body is read by (and its buffer's
// least size once a byte came).
const inspectChunk = 16 << 10

// tenantBytes counts bytes held per tenant against a bound.
type tenantBytes struct {
	mu       sync.Mutex
	byTenant map[string]int
}

// take charges n bytes to tenant; false, charging nothing, when that
// would pass limit.
func (b *tenantBytes) take(tenant string, n, limit int) bool {
	if n == 0 {
		return true
	}
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
// sent on). The buffer is charged to the tenant (MaxTenantInspectBodies)
// as it grows; *held is what is charged, which the caller gives back when
// the request ends (set before Inspect runs, so a panic there loses
// nothing). It reports false when Inspect answered the request or the
// tenant's bound refused it.
func (s *Server) inspect(w http.ResponseWriter, q *rtRequest, route *Route, held *int) bool {
	r := q.r
	var body []byte
	if r.Body != nil && r.Body != http.NoBody && route.InspectBody > 0 {
		var err error
		body, err = s.readInspected(r.Body, q.stats.Tenant, route.InspectBody, held)
		switch {
		case errors.Is(err, errInspectLimit):
			s.failHTTP(w, q, 503, OutcomeInspectLimit)
			return false
		case err != nil:
			s.failHTTP(w, q, 400, OutcomeClientError)
			return false
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	}
	h, status, note := route.Inspect(r, body, q.scope.pp.src, q.scope.pp.dst)
	q.stats.Inspected = note
	if h == nil {
		return true
	}
	h.ServeHTTP(w, r)
	q.stats.Status, q.stats.Outcome = status, OutcomeLocal
	return false
}

var errInspectLimit = errors.New("the tenant's inspected bodies are at their bound")

// readInspected reads up to limit bytes of body, growing its buffer only
// as bytes come and charging each growth to tenant (*held: the buffer's
// size charged). A body that ends before a byte came costs nothing.
func (s *Server) readInspected(body io.Reader, tenant string, limit int, held *int) ([]byte, error) {
	var buf []byte
	scratch := make([]byte, min(inspectChunk, limit))
	for len(buf) < limit {
		n, err := body.Read(scratch[:min(len(scratch), limit-len(buf))])
		if n > 0 {
			if len(buf)+n > cap(buf) {
				grown := min(max(2*cap(buf), len(buf)+n, inspectChunk), limit)
				if !s.inspected.take(tenant, grown-cap(buf), MaxTenantInspectBodies) {
					return nil, errInspectLimit
				}
				*held += grown - cap(buf)
				buf = append(make([]byte, 0, grown), buf...)
			}
			buf = append(buf, scratch[:n]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}
