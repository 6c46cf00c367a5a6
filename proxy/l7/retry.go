package l7

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Retries. A route's Retry sends a request again, to a member of the same
// backend picked anew, when an attempt failed: the member answered one of
// Codes, no connection could be made or it closed before a response head
// (connection errors), or the attempt passed its response-head timeout
// (the route's BackendTimeout). It is applied in proxyHTTP, which every
// path of both HTTP versions takes for a route with RouteExt.

// Retry is a route's retry policy. A published value is never modified.
type Retry struct {
	// Codes are the member statuses that are retried.
	Codes []int
	// Attempts is the number of retries after the first attempt.
	Attempts int
	// Backoff is the least wait before the first retry; it doubles for
	// each further one, up to retryBackoffCap times itself, and up to as
	// much again is added at random.
	Backoff time.Duration
}

// Retry bounds.
const (
	// MaxRetryBody is the largest request body kept for retries: a
	// body of known length up to it is read before the first attempt;
	// a larger or chunked one streams to the member once and is never
	// retried.
	MaxRetryBody = 64 << 10
	// MaxTenantRetryBodies bounds the request bodies kept for retries
	// that one tenant's requests hold at once on one server (64 bodies of
	// MaxRetryBody): a request whose body would pass it streams to the
	// member once and is never retried, so the clients of one tenant's
	// routes cannot make a host hold a buffer per request they keep in
	// flight.
	MaxTenantRetryBodies = 4 << 20
	// RetryBudgetPercent is the share of a tenant's requests in flight on
	// routes with retries that may be retrying at once on one server;
	// MinRetryConcurrency retries may run whatever the share (as Envoy's
	// retry budgets). Past both, a failed attempt is the answer.
	RetryBudgetPercent  = 20
	MinRetryConcurrency = 3
	// retryBackoffCap bounds the exponential backoff, in multiples of
	// Backoff.
	retryBackoffCap = 10
	// retryDrain is what is read of a retried response's body so that
	// its member connection can be reused; a longer body closes it.
	retryDrain = 16 << 10
)

func (p *Retry) retriesStatus(code int) bool { return slices.Contains(p.Codes, code) }

// backoff returns the wait before retry n (0 for the first).
func (p *Retry) backoff(n int) time.Duration {
	d := p.Backoff << min(n, 4)
	d = min(d, retryBackoffCap*p.Backoff)
	if d > 0 {
		d += rand.N(d)
	}
	return d
}

// retryBudget counts, per tenant, the requests in flight on routes with
// retries and those of them that are retrying, and holds the bytes of the
// bodies they keep to send again.
type retryBudget struct {
	mu       sync.Mutex
	byTenant map[string]*retryCount
	// kept: the bodies each tenant's requests keep, at most
	// MaxTenantRetryBodies.
	kept tenantBytes
}

type retryCount struct{ active, retrying int }

// begin counts a request of tenant on a route with retries; end undoes it.
func (b *retryBudget) begin(tenant string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byTenant == nil {
		b.byTenant = map[string]*retryCount{}
	}
	c := b.byTenant[tenant]
	if c == nil {
		c = &retryCount{}
		b.byTenant[tenant] = c
	}
	c.active++
}

func (b *retryBudget) end(tenant string, retried bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.byTenant[tenant]
	c.active--
	if retried {
		c.retrying--
	}
	if c.active <= 0 {
		delete(b.byTenant, tenant)
	}
}

// keep charges a body of n bytes kept for retries to tenant; false when
// that would pass its bound.
func (b *retryBudget) keep(tenant string, n int) bool {
	return b.kept.take(tenant, n, MaxTenantRetryBodies)
}

// take marks one request of tenant as retrying; false when the tenant's
// budget is spent.
func (b *retryBudget) take(tenant string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.byTenant[tenant]
	if c == nil || c.retrying >= max(MinRetryConcurrency, c.active*RetryBudgetPercent/100) {
		return false
	}
	c.retrying++
	return true
}

// retrier is one request's retry state on the round-trip path.
type retrier struct {
	s      *Server
	pol    *Retry
	tenant string
	body   []byte // the buffered body, sent again on each attempt
	replay bool   // the body can be sent again
	// unkept: the body could have been kept but for the tenant's bound
	// (MaxTenantRetryBodies), so a failed attempt counts as denied.
	unkept bool
	n      int  // retries done
	slot   bool // a retry slot of the tenant's budget is held
	wait   time.Duration
}

// newRetrier returns the retry state of q under pol (nil pol: none). It
// reads a request body of known length up to MaxRetryBody (and q.limit)
// so that it can be sent again, when the tenant's kept bodies leave room
// for it (MaxTenantRetryBodies); false when that read failed.
func (s *Server) newRetrier(q *rtRequest, pol *Retry) (*retrier, bool) {
	if pol == nil || pol.Attempts <= 0 {
		return nil, true
	}
	rt := &retrier{s: s, pol: pol, tenant: q.stats.Tenant, replay: true}
	r := q.r
	if q.stats.HTTP3 && r.ContentLength < 0 && bodiless(r.Method) {
		endedBody(r)
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		switch {
		case r.ContentLength < 0 || r.ContentLength > MaxRetryBody || (q.limit > 0 && r.ContentLength > q.limit):
			rt.replay = false // streamed once, never retried
		case !s.retries.keep(rt.tenant, int(r.ContentLength)):
			rt.replay, rt.unkept = false, true // streamed once, never retried
		default:
			rt.body = make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, rt.body); err != nil {
				s.retries.kept.give(rt.tenant, len(rt.body))
				return nil, false
			}
			r.Body = io.NopCloser(bytes.NewReader(rt.body))
		}
	}
	s.retries.begin(rt.tenant)
	return rt, true
}

// bodiless reports whether requests of method carry no body as a rule.
func bodiless(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// endedBody sets an HTTP/3 request's body of unknown length to
// http.NoBody when it has ended: quic-go gives every request a body, of
// unknown length without a Content-Length, though a GET's stream ends
// with its head, and a body of unknown length is never retried. A body
// that has bytes is given them back and stays of unknown length.
func endedBody(r *http.Request) {
	var one [1]byte
	n, err := r.Body.Read(one[:])
	if n == 0 && err == io.EOF {
		r.Body.Close()
		r.Body, r.ContentLength = http.NoBody, 0
		return
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(one[:n]), r.Body), r.Body}
}

// done gives back what the request held of its tenant's budget.
func (rt *retrier) done() {
	if rt != nil {
		rt.s.retries.end(rt.tenant, rt.slot)
		rt.s.retries.kept.give(rt.tenant, len(rt.body))
	}
}

// nextBody returns what the next attempt sends: body for the first, a
// fresh reader of the buffered body for a retry.
func (rt *retrier) nextBody(body io.ReadCloser) io.ReadCloser {
	if rt == nil || rt.body == nil || rt.n == 0 {
		return body
	}
	return io.NopCloser(bytes.NewReader(rt.body))
}

// may reports whether a failed attempt can be retried: there are
// attempts left, the body can be sent again, the tenant's budget has room
// and the backoff ends before the request's deadline. It sets the wait.
func (rt *retrier) may(q *rtRequest) bool {
	if rt == nil || !rt.replay || rt.n >= rt.pol.Attempts {
		if rt != nil && rt.unkept {
			q.stats.RetriesDenied++
		}
		return false
	}
	if !rt.slot {
		if !rt.s.retries.take(rt.tenant) {
			q.stats.RetriesDenied++
			return false
		}
		rt.slot = true
	}
	rt.wait = rt.pol.backoff(rt.n)
	return q.deadline.IsZero() || time.Until(q.deadline) > rt.wait
}

// again waits the backoff that may set and counts the retry; false when
// the client left meanwhile.
func (rt *retrier) again(q *rtRequest) bool {
	t := time.NewTimer(rt.wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-q.r.Context().Done():
		return false
	}
	rt.n++
	q.stats.Retries++
	return true
}

// retriesError reports whether err (from an attempt) is one a retry
// policy retries: a connection error or a timeout of the attempt, not the
// tenant's member-connection budget.
func retriesError(err error) bool {
	if errors.Is(err, ErrMemberLimit) {
		return false
	}
	return errors.Is(err, ErrConnect) || errors.Is(err, ErrUpstreamClosed) || errors.Is(err, ErrUpstreamTimeout)
}

// discardResponse drops a response that is not relayed (a retried
// attempt's, one respHeader refuses). What it reads of the body counts
// toward the tenant's CPU budget as copyResponse counts a relayed one,
// with the framing and trailer section of an HTTP/1.1 member's chunked
// body: reading retryDrain bytes of data may take far more of them.
func discardResponse(w http.ResponseWriter, resp *http.Response, cpu CPU) {
	n, _ := io.CopyN(io.Discard, resp.Body, retryDrain)
	if hb, ok := resp.Body.(unsentBody); ok {
		n += hb.unsentBytes()
	}
	resp.Body.Close()
	if cpu != nil {
		var m meter
		m.add(cpu, WorkTLSBytes, n)
	} else {
		chargeRead(w, n)
	}
}
