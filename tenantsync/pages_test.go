package tenantsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// The admin API's List pages by count; client.ListAll walks every page
// and sees each object once.
func TestAdminListPages(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var objs []*pb.Object
	for i := range 7 {
		objs = append(objs, api.Wrap(&pb.Tenant{Name: fmt.Sprintf("t%02d", i)}))
	}
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: objs}, false); err != nil {
		t.Fatal(err)
	}
	admin := pb.NewAdminClient(h.dial(t, pki.Identity{Role: pki.RoleAdmin, Name: "ops"}))
	first, err := admin.List(ctx, &pb.ListRequest{Kind: "tenant", PageSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetObjects()) != 4 || first.GetNextPageToken() == "" {
		t.Fatalf("first page of 4: %d objects, next %q", len(first.GetObjects()), first.GetNextPageToken())
	}
	all, _, err := client.ListAll(ctx, admin, &pb.ListRequest{Kind: "tenant", PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range all {
		name := o.GetTenant().GetName()
		if seen[name] {
			t.Fatalf("%s listed twice", name)
		}
		seen[name] = true
	}
	if len(all) != 9 { // acme, beta and seven more
		t.Fatalf("ListAll over pages of 2 found %d tenants, want 9: %v", len(all), seen)
	}
	_, err = admin.List(ctx, &pb.ListRequest{Kind: "tenant", PageToken: "!!"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a broken page token: %v, want InvalidArgument", err)
	}
}
