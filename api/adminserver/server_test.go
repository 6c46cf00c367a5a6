package adminserver

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestRules(t *testing.T) {
	tests := []struct {
		method string
		role   string
		known  bool
	}{
		{"/teapot.v1.Admin/Apply", pki.RoleAdmin, true},
		{"/teapot.v1.Admin/DryRun", pki.RoleAdmin, true},
		{"/teapot.v1.Cluster/Join", Public, true},
		{"/teapot.v1.Cluster/Forward", pki.RoleNode, true},
		{"/teapot.v1.Other/Thing", "", false},
		{"/grpc.health.v1.Health/Check", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			role, ok := DefaultRules.role(tt.method)
			if role != tt.role || ok != tt.known {
				t.Fatalf("role %q %v, want %q %v", role, ok, tt.role, tt.known)
			}
		})
	}
	// Without a verified certificate only public methods pass.
	if err := DefaultRules.Authorize(context.Background(), "/teapot.v1.Cluster/Join"); err != nil {
		t.Fatal(err)
	}
	if code := status.Code(DefaultRules.Authorize(context.Background(), "/teapot.v1.Admin/List")); code != codes.Unauthenticated {
		t.Fatalf("code %v", code)
	}
	if code := status.Code(DefaultRules.Authorize(context.Background(), "/teapot.v1.Other/X")); code != codes.PermissionDenied {
		t.Fatalf("code %v", code)
	}
}

func TestNormalizeRef(t *testing.T) {
	tests := []struct {
		in      *pb.ObjectRef
		need    bool
		want    *pb.ObjectRef
		wantErr error
	}{
		{&pb.ObjectRef{Kind: "lb", Tenant: "acme", Name: "shop"}, true, &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}, nil},
		{&pb.ObjectRef{Kind: "pool", Tenant: "ignored", Name: "public"}, true, &pb.ObjectRef{Kind: api.KindVIPPool, Name: "public"}, nil},
		{&pb.ObjectRef{Kind: "lb", Name: "shop"}, true, nil, api.ErrInvalid},
		{&pb.ObjectRef{Kind: "tenant"}, true, nil, api.ErrInvalid},
		{&pb.ObjectRef{Kind: "tenant"}, false, &pb.ObjectRef{Kind: api.KindTenant}, nil},
		{&pb.ObjectRef{Kind: "gizmo", Name: "x"}, true, nil, api.ErrInvalid},
		{&pb.ObjectRef{Kind: "JoinToken", Name: "x"}, true, nil, api.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.in.String(), func(t *testing.T) {
			got, err := normalizeRef(tt.in, tt.need)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if tt.want != nil && (got.Kind != tt.want.Kind || got.Tenant != tt.want.Tenant || got.Name != tt.want.Name) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
