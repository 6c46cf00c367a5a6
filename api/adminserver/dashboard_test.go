package adminserver

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestCreateDashboardToken(t *testing.T) {
	ca, err := pki.NewCA("c1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := New(nil).CreateDashboardToken(ctx, &pb.CreateDashboardTokenRequest{}); err == nil {
		t.Fatal("a server without the CA key signed a token")
	}
	s := New(nil).WithDashboardSigner(ca.Key)
	for _, ttl := range []uint32{59, 7*24*3600 + 1} {
		if _, err := s.CreateDashboardToken(ctx, &pb.CreateDashboardTokenRequest{TtlSeconds: ttl}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ttl %d: %v, want InvalidArgument", ttl, err)
		}
	}
	before := time.Now()
	resp, err := s.CreateDashboardToken(ctx, &pb.CreateDashboardTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.VerifyDashboardToken(ca.Cert.PublicKey, resp.GetToken(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != resp.GetId() || !resp.GetExpires().AsTime().Equal(c.ExpiresAt()) {
		t.Fatalf("response %v does not match the claims %+v", resp, c)
	}
	if d := c.ExpiresAt().Sub(before); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("default lifetime %v, want 1h", d)
	}
}
