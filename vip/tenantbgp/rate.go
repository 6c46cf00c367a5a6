package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// updateBucket bounds what one session sends: a token bucket that
// refills at the tenant's bgp.maxUpdatesPerSecond up to a burst, each
// thing counted taking one. Each session has two as gobgp's events come
// (onPaths): one of the route changes its UPDATE messages carry (each
// prefix announced or withdrawn, an End-of-RIB one; bursts of
// api.TenantBGPRouteBurst, a whole table), one of the messages (bursts
// of api.TenantBGPUpdateBurst). On every pass (at least every 2s, within
// 100ms of a change) the relay also reads gobgp's count of the session's
// received UPDATE messages into a third, of messages: that count holds
// those that came without an event (an UPDATE without prefixes), and
// gobgp counts no route changes, so the pass's bucket is a floor in
// messages.
type updateBucket struct {
	tokens float64
	count  uint64 // things counted, as last read
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
// a (tenant b) as gobgp counts them, and takes up a session onPaths
// closed for its route changes or messages: one over its rate is closed
// (the relay disables the peer, so gobgp sends a Cease and forgets its
// routes), counted and reported, and dialled again LimitHold later. It returns the state and reason to
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
					rb.changeBucket, rb.changes = nil, 0
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
	reason := rateReason(tb.bgp, r.cfg.LimitHold)
	var since time.Time
	r.dmu.Lock()
	if rb := r.ribs[a]; rb != nil {
		rb.rate, rb.burst, rb.changeBurst = rate, burst, float64(api.TenantBGPRouteBurst(tb.bgp))
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

// rateReason is why a session of b was closed for its update rate, for
// the operator and the tenant.
func rateReason(b *pb.TenantBGP, hold time.Duration) string {
	burst := fmt.Sprintf("bursts of %d", api.TenantBGPRouteBurst(b))
	if msgs := api.TenantBGPUpdateBurst(b); msgs != api.TenantBGPRouteBurst(b) {
		burst = fmt.Sprintf("bursts of %d route changes or %d UPDATE messages", api.TenantBGPRouteBurst(b), msgs)
	}
	return fmt.Sprintf("sent route changes faster than maxUpdatesPerSecond (%d per second, %s); dialled again %s after it was closed",
		api.TenantBGPUpdateRate(b), burst, hold)
}

// stateUpdateLimit is the state of a session held back for its update
// rate.
const stateUpdateLimit = "update-limit"

// closeOverRate closes a's session for sending route changes or UPDATE
// messages faster than its bound, as onPaths found: gobgp sends a Cease
// and drops the session's routes; the next pass reports it (checkRate).
func (r *Relay) closeOverRate(a netip.Addr) {
	if err := r.srv.DisablePeer(r.ctx, &gobgpapi.DisablePeerRequest{Address: a.String(), Communication: "update rate over the bound"}); err != nil && r.ctx.Err() == nil {
		r.log.Warn("cannot close a tenant BGP session over its update rate", "peer", a, "err", err)
	}
}
