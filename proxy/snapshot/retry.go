package snapshot

import (
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Retry sends a request again when an attempt failed (routes[].retry).
type Retry struct {
	// Codes are the member statuses retried; connection errors and
	// backend timeouts always are.
	Codes []int
	// Attempts is the number of retries after the first attempt (>= 1).
	Attempts int
	// Backoff is the least wait before a retry (> 0).
	Backoff time.Duration
}

// retryOf compiles routes[].retry (nil when unset), with the defaults
// filled in.
func retryOf(r *pb.RouteRetry) *Retry {
	if r == nil {
		return nil
	}
	out := &Retry{Attempts: api.DefaultRetryAttempts, Backoff: api.DefaultRetryBackoff}
	if r.Attempts != nil {
		out.Attempts = int(r.GetAttempts())
	}
	if d := r.GetBackoff(); d != nil && d.AsDuration() > 0 {
		out.Backoff = d.AsDuration()
	}
	for _, c := range r.GetCodes() {
		out.Codes = append(out.Codes, int(c))
	}
	return out
}

// backendHeaders compiles routes[].backends[].requestHeaderModifier:
// one edit per backend, in order, or nil when no backend has one.
func backendHeaders(bs []*pb.RouteBackend) []*HeaderEdit {
	var out []*HeaderEdit
	for i, b := range bs {
		if m := b.GetRequestHeaderModifier(); m != nil {
			if out == nil {
				out = make([]*HeaderEdit, len(bs))
			}
			out[i] = headerEdit(m)
		}
	}
	return out
}
