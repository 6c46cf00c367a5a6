package l7

import (
	"errors"
	"io"
)

// MaxTenantH2Bodies bounds the HTTP/2 request body bytes a server holds
// at once for one tenant: what its clients sent within their streams'
// flow-control windows and its members have not read yet. Each stream
// holds at most its 64 KiB window, and the tenant's streams in flight are
// bounded (ConnInfo.Streams), but that bound follows the host's
// descriptors: tens of thousands of streams, gigabytes. Past this bound
// the stream whose DATA would pass it is reset (ENHANCE_YOUR_CALM,
// OutcomeBodyLimit); the other tenants' clients are not touched. The
// same bound holds, on the tenant's MemberBudget, for the response bytes
// its HTTP/2 members sent within their 128 KiB stream windows that its
// clients have not taken yet.
const MaxTenantH2Bodies = 32 << 20

// errTenantBodies ends a stream whose body passed MaxTenantH2Bodies.
var errTenantBodies = errors.New("http2: the tenant's buffered request bodies are at their bound")

// errTenantResponses ends a member's HTTP/2 stream whose response body
// would take what its tenant's clients have not taken yet past
// MaxTenantH2Bodies (MemberBudget.holdResponse).
var errTenantResponses = errors.New("http2: the tenant's buffered member responses are at their bound")

// holdBody charges n more buffered body bytes of the connection to its
// tenant; false, charging nothing, when that would pass the bound.
// c.mu held.
func (c *h2Conn) holdBody(n int) bool {
	if n == 0 || c.bodiesDone {
		return true
	}
	if !c.s.h2bodies.take(c.hc.info.Tenant, n, MaxTenantH2Bodies) {
		return false
	}
	c.bodyHeld += n
	return true
}

// releaseBody gives back n buffered body bytes, read or dropped. c.mu
// held.
func (c *h2Conn) releaseBody(n int) {
	if n == 0 || c.bodiesDone {
		return
	}
	c.bodyHeld -= n
	c.s.h2bodies.give(c.hc.info.Tenant, n)
}

// releaseBodies gives back what the connection still holds once every
// stream ended; later releases change nothing.
func (c *h2Conn) releaseBodies() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.bodiesDone {
		c.s.h2bodies.give(c.hc.info.Tenant, c.bodyHeld)
		c.bodyHeld, c.bodiesDone = 0, true
	}
}

// relayOutcome is how a request whose response was relayed ended, by
// the relay's error: OutcomeBodyLimit when its member's stream was reset
// at its tenant's bound on buffered responses.
func relayOutcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, errTenantResponses), errors.Is(err, errTenantBodies):
		// The member's stream, or the client's (its upload while the
		// response was relayed), at its tenant's bound.
		return OutcomeBodyLimit
	}
	return OutcomeAborted
}

// abortedOutcome is how a request whose client stream ended before its
// response ends: OutcomeBodyLimit when the stream was reset at its
// tenant's body bound, else OutcomeAborted. c.mu held.
func (st *h2Stream) abortedOutcome() Outcome {
	if errors.Is(st.err, errTenantBodies) {
		return OutcomeBodyLimit
	}
	return OutcomeAborted
}

// abortedOutcome is abortedOutcome of the HTTP/2 stream that w answers
// (the response writer, or the request body when it is the stream's,
// counted or not), else OutcomeAborted.
func abortedOutcome(w any, body io.Reader) Outcome {
	if cb, ok := body.(*countedBody); ok {
		body = cb.ReadCloser
	}
	st, ok := w.(*h2Stream)
	if !ok {
		st, ok = body.(*h2Stream)
	}
	if ok {
		st.c.mu.Lock()
		defer st.c.mu.Unlock()
		return st.abortedOutcome()
	}
	if b, ok := body.(*h2ReqBody); ok {
		b.c.mu.Lock()
		defer b.c.mu.Unlock()
		if st, ok := b.stream(); ok {
			return st.abortedOutcome()
		}
	}
	return OutcomeAborted
}
