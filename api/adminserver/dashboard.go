package adminserver

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// defaultDashboardTTL is a dashboard token's lifetime when the request
// names none.
const defaultDashboardTTL = time.Hour

// WithDashboardSigner lets the server sign dashboard tokens with key (the
// cluster CA key) and returns s. Without it CreateDashboardToken fails.
func (s *Server) WithDashboardSigner(key crypto.Signer) *Server {
	s.dashKey = key
	return s
}

// CreateDashboardToken signs a read-only dashboard token.
func (s *Server) CreateDashboardToken(_ context.Context, req *pb.CreateDashboardTokenRequest) (*pb.CreateDashboardTokenResponse, error) {
	if s.dashKey == nil {
		return nil, api.ToStatus(errors.New("this host cannot sign dashboard tokens: it holds no CA key"))
	}
	ttl := defaultDashboardTTL
	if req.GetTtlSeconds() != 0 {
		ttl = time.Duration(req.GetTtlSeconds()) * time.Second
	}
	if ttl < pki.MinDashboardTTL || ttl > pki.MaxDashboardTTL {
		return nil, api.ToStatus(fmt.Errorf("ttl_seconds %d: want between %d and %d (--ttl 1m to 168h): %w",
			req.GetTtlSeconds(), int(pki.MinDashboardTTL/time.Second), int(pki.MaxDashboardTTL/time.Second), api.ErrInvalid))
	}
	tok, claims, err := pki.SignDashboardToken(s.dashKey, time.Now(), ttl)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	return &pb.CreateDashboardTokenResponse{Token: tok, Expires: timestamppb.New(claims.ExpiresAt()), Id: claims.ID}, nil
}
