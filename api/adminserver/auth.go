package adminserver

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/pki"
)

// Public is the role of methods that authenticate their callers themselves
// (a join token instead of a certificate).
const Public = "public"

// Rules maps a gRPC method, or a service prefix ending in "/", to the
// certificate role that may call it. Anything not listed is refused.
type Rules map[string]string

// DefaultRules are the rules of an LB host's API listener.
var DefaultRules = Rules{
	"/teapot.v1.Admin/":        pki.RoleAdmin,
	"/teapot.v1.Certificates/": pki.RoleAdmin,
	"/teapot.v1.Cluster/Join":  Public,
	"/teapot.v1.Cluster/":      pki.RoleNode,
	// The tenant agent's stream, and the operator's calls for its credentials.
	"/teapot.v1.TenantSync/":        pki.RoleTenant,
	"/teapot.v1.TenantCredentials/": pki.RoleAdmin,
}

func (r Rules) role(method string) (string, bool) {
	if role, ok := r[method]; ok {
		return role, true
	}
	if i := strings.LastIndex(method, "/"); i > 0 {
		role, ok := r[method[:i+1]]
		return role, ok
	}
	return "", false
}

// Authorize checks the caller of method against the rules.
func (r Rules) Authorize(ctx context.Context, method string) error {
	want, ok := r.role(method)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s is not served here", method)
	}
	if want == Public {
		return nil
	}
	id, ok := pki.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "a client certificate from the cluster CA is required")
	}
	if id.Role != want {
		return status.Errorf(codes.PermissionDenied, "%s may not call %s (needs a %s certificate)", id, method, want)
	}
	return nil
}

// Unary is the interceptor form of Authorize.
func (r Rules) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := r.Authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// Stream is the interceptor form of Authorize for streams.
func (r Rules) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := r.Authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}
