package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"

	"github.com/teapot-lb/teapot-lb/api"
)

// updateBucket bounds the UPDATE messages one session sends: a token
// bucket that refills at the tenant's bgp.maxUpdatesPerSecond up to the
// burst (api.TenantBGPUpdateBurst), each UPDATE taking one. The relay
// reads the session's count of received UPDATEs on every pass (at least
// every 2s, within 100ms of a change).
type updateBucket struct {
	tokens float64
	count  uint64 // UPDATE messages received, as last read
	at     time.Time
}

// newBucket starts a bucket full at count.
func newBucket(count uint64, now time.Time, burst float64) *updateBucket {
	return &updateBucket{tokens: burst, count: count, at: now}
}

// take reads the session's count at now and reports whether the session
// went over its rate. A count lower than the last (a new session whose
// counters start again) refills the bucket.
func (b *updateBucket) take(count uint64, now time.Time, rate, burst float64) bool {
	if count < b.count {
		*b = *newBucket(count, now, burst)
		return false
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(burst, b.tokens+rate*dt)
	}
	b.tokens -= float64(count - b.count)
	b.count, b.at = count, now
	return b.tokens < 0
}

// rateLimit is a session closed for its update rate, until when it is
// dialled again.
type rateLimit struct {
	since  time.Time
	reason string
}

// checkRate bounds the UPDATE messages of the established session with
// a (tenant b): one over its rate is closed (the relay disables the peer,
// so gobgp sends a Cease and forgets its routes), counted and reported,
// and dialled again LimitHold later. It returns the state and reason to
// show while the session is held back ("" when it is not).
func (r *Relay) checkRate(ctx context.Context, a netip.Addr, b *gobgpapi.Peer, tb *tenantRules, now time.Time) (string, string) {
	if lim, ok := r.rateLimited[a]; ok {
		if now.Sub(lim.since) >= r.cfg.LimitHold {
			if err := r.srv.EnablePeer(ctx, &gobgpapi.EnablePeerRequest{Address: a.String()}); err == nil {
				delete(r.rateLimited, a)
				delete(r.buckets, a)
				r.dmu.Lock()
				if rb := r.ribs[a]; rb != nil {
					rb.rateClosedAt, rb.bucket, rb.updates = time.Time{}, nil, 0
					rb.reset()
				}
				r.dmu.Unlock()
				return "", ""
			}
		}
		return stateUpdateLimit, lim.reason
	}
	if tb == nil {
		return "", ""
	}
	rate, burst := float64(api.TenantBGPUpdateRate(tb.bgp)), float64(api.TenantBGPUpdateBurst(tb.bgp))
	reason := fmt.Sprintf("sent UPDATE messages faster than maxUpdatesPerSecond (%d per second, bursts of %d); dialled again %s after it was closed",
		api.TenantBGPUpdateRate(tb.bgp), api.TenantBGPUpdateBurst(tb.bgp), r.cfg.LimitHold)
	var since time.Time
	r.dmu.Lock()
	if rb := r.ribs[a]; rb != nil {
		rb.rate, rb.burst = rate, burst
		since = rb.rateClosedAt
	}
	r.dmu.Unlock()
	if since.IsZero() {
		// Not closed as gobgp's events came (onPaths): gobgp's own count
		// of the session's UPDATEs, which also holds those it took in
		// without an event.
		if b.GetState().GetSessionState() != gobgpapi.PeerState_SESSION_STATE_ESTABLISHED {
			return "", ""
		}
		count := b.GetState().GetMessages().GetReceived().GetUpdate()
		bk := r.buckets[a]
		if bk == nil {
			r.buckets[a] = newBucket(count, now, burst)
			return "", ""
		}
		if !bk.take(count, now, rate, burst) {
			return "", ""
		}
		if err := r.srv.DisablePeer(ctx, &gobgpapi.DisablePeerRequest{Address: a.String(), Communication: "update rate over the bound"}); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("cannot close a tenant BGP session over its update rate", "peer", a, "err", err)
			}
			return "", ""
		}
		since = now
		r.dmu.Lock()
		if rb := r.ribs[a]; rb != nil {
			rb.reset()
			rb.rateClosedAt = now
		}
		r.dmu.Unlock()
	}
	r.rateLimited[a] = rateLimit{since: since, reason: reason}
	tenant := r.tenantOf(a)
	r.mu.Lock()
	r.rateLimits[tenant]++
	r.mu.Unlock()
	r.log.Warn("tenant BGP session closed", "tenant", tenant, "peer", r.speaker(a), "reason", reason)
	r.event(tenant, fmt.Sprintf("BGP session with %s closed: %s", r.speaker(a), reason))
	return stateUpdateLimit, reason
}

// stateUpdateLimit is the state of a session held back for its update
// rate.
const stateUpdateLimit = "update-limit"

// closeOverRate closes a's session for sending UPDATE messages faster
// than its bound, as onPaths found: gobgp sends a Cease and drops the
// session's routes; the next pass reports it (checkRate).
func (r *Relay) closeOverRate(a netip.Addr) {
	if err := r.srv.DisablePeer(r.ctx, &gobgpapi.DisablePeerRequest{Address: a.String(), Communication: "update rate over the bound"}); err != nil && r.ctx.Err() == nil {
		r.log.Warn("cannot close a tenant BGP session over its update rate", "peer", a, "err", err)
	}
}
