package translate

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// unsupportedRetry says why an HTTPRoute rule's retry cannot be served
// ("" when it can): past the API's bounds (api.MaxRetryAttempts,
// api.MaxRetryBackoff, codes 400-599).
func unsupportedRetry(i int, rt *gwv1.HTTPRouteRetry) string {
	if rt == nil {
		return ""
	}
	if rt.Attempts != nil && (*rt.Attempts < 1 || *rt.Attempts > api.MaxRetryAttempts) {
		return fmt.Sprintf("rules[%d].retry.attempts: must be from 1 to %d, got %d", i, api.MaxRetryAttempts, *rt.Attempts)
	}
	if len(rt.Codes) > api.MaxRetryCodes {
		return fmt.Sprintf("rules[%d].retry.codes: at most %d, got %d", i, api.MaxRetryCodes, len(rt.Codes))
	}
	for j, c := range rt.Codes {
		if c < 400 || c > 599 {
			return fmt.Sprintf("rules[%d].retry.codes[%d]: must be a status from 400 to 599, got %d", i, j, c)
		}
	}
	if rt.Backoff != nil {
		d, err := time.ParseDuration(string(*rt.Backoff))
		if err != nil || d < 0 || d > api.MaxRetryBackoff {
			return fmt.Sprintf("rules[%d].retry.backoff: must be a duration from 0 to %s", i, api.MaxRetryBackoff)
		}
	}
	return ""
}

// unsupportedBackendFilters says why a rule's backendRef filters cannot
// be served ("" when they can): RequestHeaderModifier is, once per
// backendRef.
func unsupportedBackendFilters(i int, bs []gwv1.HTTPBackendRef) string {
	for j, b := range bs {
		n := 0
		for k, f := range b.Filters {
			if f.Type != gwv1.HTTPRouteFilterRequestHeaderModifier {
				return fmt.Sprintf("rules[%d].backendRefs[%d].filters[%d]: filter type %s is not supported on a backendRef (RequestHeaderModifier is); put it on the rule", i, j, k, f.Type)
			}
			if n++; n > 1 {
				return fmt.Sprintf("rules[%d].backendRefs[%d].filters[%d]: a second RequestHeaderModifier; merge them", i, j, k)
			}
		}
	}
	return ""
}

// httpRetry translates a rule's retry (nil when unset).
func httpRetry(rt *gwv1.HTTPRouteRetry) *pb.RouteRetry {
	if rt == nil {
		return nil
	}
	out := &pb.RouteRetry{}
	for _, c := range rt.Codes {
		out.Codes = append(out.Codes, uint32(c))
	}
	if rt.Attempts != nil {
		out.Attempts = proto.Uint32(uint32(*rt.Attempts))
	}
	if rt.Backoff != nil {
		if d, err := time.ParseDuration(string(*rt.Backoff)); err == nil && d > 0 {
			out.Backoff = durationpb.New(d)
		}
	}
	return out
}

// backendHeaderFilters gives each translated backend of a rule the
// RequestHeaderModifier of its backendRef; out holds one backend per ref,
// in order. An unavailable backend sends nothing and gets none.
func backendHeaderFilters(out []*pb.RouteBackend, refs []gwv1.HTTPBackendRef) {
	if len(out) != len(refs) {
		return
	}
	for i, b := range refs {
		for _, f := range b.Filters {
			if f.Type == gwv1.HTTPRouteFilterRequestHeaderModifier && !out[i].GetUnavailable() {
				out[i].RequestHeaderModifier = headerModifier(f.RequestHeaderModifier)
			}
		}
	}
}
