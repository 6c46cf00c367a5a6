package client

import (
	"context"

	"google.golang.org/grpc"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Lister is the admin API's List call.
type Lister interface {
	List(ctx context.Context, in *pb.ListRequest, opts ...grpc.CallOption) (*pb.ListResponse, error)
}

// ListAll follows the pages of the admin API's List and returns every
// object of req's kind (and tenant) and the highest revision a page was
// read at.
func ListAll(ctx context.Context, l Lister, req *pb.ListRequest) ([]*pb.Object, uint64, error) {
	var out []*pb.Object
	var rev uint64
	next := &pb.ListRequest{Kind: req.GetKind(), Tenant: req.GetTenant(), PageSize: req.GetPageSize()}
	for {
		resp, err := l.List(ctx, next)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, resp.GetObjects()...)
		rev = max(rev, resp.GetRevision())
		if resp.GetNextPageToken() == "" {
			return out, rev, nil
		}
		next.PageToken = resp.GetNextPageToken()
	}
}
