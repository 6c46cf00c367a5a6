package api

import (
	"fmt"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of routes[].retry. A retry multiplies what one request costs the
// members, so each request retries at most MaxRetryAttempts times, and the
// data plane bounds the retries of a tenant by its requests in flight
// (proxy/l7's RetryBudgetPercent).
const (
	// MaxRetryAttempts bounds routes[].retry.attempts.
	MaxRetryAttempts = 5
	// DefaultRetryAttempts is routes[].retry.attempts unset.
	DefaultRetryAttempts = 1
	// MaxRetryCodes bounds routes[].retry.codes.
	MaxRetryCodes = 32
	// MaxRetryBackoff bounds routes[].retry.backoff.
	MaxRetryBackoff = 10 * time.Second
	// DefaultRetryBackoff is routes[].retry.backoff unset.
	DefaultRetryBackoff = 25 * time.Millisecond
)

// checkRouteRetry checks routes[].retry.
func checkRouteRetry(ck *checker, f string, r *pb.RouteRetry, redirect bool) {
	if r == nil {
		return
	}
	if redirect {
		ck.invalidf(f, "a route with a requestRedirect filter answers at the load balancer and has nothing to retry; remove retry")
	}
	if r.Attempts != nil && (r.GetAttempts() < 1 || r.GetAttempts() > MaxRetryAttempts) {
		ck.invalidf(f+".attempts", "must be from 1 to %d, got %d", MaxRetryAttempts, r.GetAttempts())
	}
	if !tooMany(ck, f+".codes", len(r.GetCodes()), MaxRetryCodes) {
		seen := map[uint32]bool{}
		for i, c := range r.GetCodes() {
			cf := fmt.Sprintf("%s.codes[%d]", f, i)
			switch {
			case c < 400 || c > 599:
				ck.invalidf(cf, "must be a status from 400 to 599, got %d", c)
			case seen[c]:
				ck.invalidf(cf, "status %d is listed twice; keep one", c)
			}
			seen[c] = true
		}
	}
	if d := r.GetBackoff(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 || d.AsDuration() > MaxRetryBackoff {
			ck.invalidf(f+".backoff", "must be a duration from 0 to %s, got %s", MaxRetryBackoff, fmtDuration(d))
		}
	}
}

// checkBackendHeaders checks routes[].backends[].requestHeaderModifier.
func checkBackendHeaders(ck *checker, f string, b *pb.RouteBackend) {
	if m := b.GetRequestHeaderModifier(); m != nil {
		if b.GetUnavailable() {
			ck.invalidf(f+".requestHeaderModifier", "an unavailable backend is answered with 500 and sends nothing; remove it")
			return
		}
		checkHeaderModifier(ck, f+".requestHeaderModifier", m, true)
	}
}

// retryFeaturesUsed returns the uses of FeatureRouteRetry and
// FeatureBackendHeaders by route i of obj.
func retryFeaturesUsed(obj *pb.Object, i int, r *pb.Route) []FeatureUse {
	var out []FeatureUse
	if r.GetRetry() != nil {
		out = append(out, FeatureUse{Feature: FeatureRouteRetry, Field: fmt.Sprintf("%s: routes[%d].retry", RefString(RefOf(obj)), i)})
	}
	for j, b := range r.GetBackends() {
		if b.GetRequestHeaderModifier() != nil {
			out = append(out, FeatureUse{Feature: FeatureBackendHeaders, Field: fmt.Sprintf("%s: routes[%d].backends[%d].requestHeaderModifier", RefString(RefOf(obj)), i, j)})
		}
	}
	return out
}
