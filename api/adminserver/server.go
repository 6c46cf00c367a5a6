// Package adminserver is the admin API's edge: it checks who is calling,
// checks the shape of each request, hands it to the store and turns the
// store's errors into gRPC codes with messages an operator can act on.
package adminserver

import (
	"context"
	"crypto"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Store is what the admin API needs of the replicated state.
type Store interface {
	Apply(ctx context.Context, req *pb.ApplyRequest, internal bool) (*pb.ApplyResponse, error)
	Delete(ctx context.Context, req *pb.DeleteRequest, internal bool) (*pb.DeleteResponse, error)
	Get(ctx context.Context, ref *pb.ObjectRef) (*pb.Object, error)
	List(ctx context.Context, kind, tenant string) ([]*pb.Object, uint64, error)
	Status(ctx context.Context) (*pb.ClusterStatusResponse, error)
	CreateJoinToken(ctx context.Context, ttl time.Duration) (*pb.CreateJoinTokenResponse, error)
	RemoveNode(ctx context.Context, id string) error
	DrainNode(ctx context.Context, id string, draining bool) (*pb.Node, error)
	// Observe gathers what the hosts see (never from Raft).
	Observe(ctx context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error)
	// Backup reads a consistent copy of the state and the cluster CA.
	Backup(ctx context.Context) (*pb.Backup, error)
}

// Recoverer is what a store offers that can turn its host into a one-host
// cluster while it runs (the Recover call; without it, Unimplemented).
type Recoverer interface {
	RecoverInPlace(ctx context.Context) (forgotten []string, err error)
	Revision() uint64
}

// Recover turns the host into a one-host cluster after a lost majority.
func (s *Server) Recover(ctx context.Context, _ *pb.RecoverRequest) (*pb.RecoverResponse, error) {
	r, ok := s.store.(Recoverer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this host cannot recover in place")
	}
	ctx, cancel := withDefault(ctx)
	defer cancel()
	gone, err := r.RecoverInPlace(ctx)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	return &pb.RecoverResponse{Forgotten: gone, Revision: r.Revision()}, nil
}

// DefaultTimeout bounds a request whose caller set no deadline.
const DefaultTimeout = 15 * time.Second

// Server implements pb.AdminServer over a Store.
type Server struct {
	pb.UnimplementedAdminServer
	store Store
	// dashKey signs dashboard tokens (nil: none are signed here).
	dashKey crypto.Signer
	// dnsKeys rolls the keys of the zones this host signs (nil: none).
	dnsKeys DNSKeys
}

var _ pb.AdminServer = (*Server)(nil)

// New returns the admin API over store.
func New(store Store) *Server { return &Server{store: store} }

func withDefault(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// readableKinds may be read through the admin API.
var readableKinds = map[string]bool{
	api.KindTenant: true, api.KindVIPPool: true, api.KindLoadBalancer: true, api.KindNode: true, api.KindCertificate: true,
}

func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	resp, err := s.store.Apply(ctx, req, false)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	// The answer is this call's own: only its list of objects is replaced
	// (the stored objects are not touched), so every other field passes.
	shown := make([]*pb.Object, len(resp.GetObjects()))
	for i, o := range resp.GetObjects() {
		shown[i] = api.RedactSecrets(o)
	}
	resp.Objects = shown
	return resp, nil
}

func (s *Server) Delete(ctx context.Context, req *pb.DeleteRequest) (*pb.DeleteResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	ref, err := normalizeRef(req.GetRef(), true)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	resp, err := s.store.Delete(ctx, &pb.DeleteRequest{Ref: ref, DryRun: req.GetDryRun()}, false)
	return resp, api.ToStatus(err)
}

// DryRun checks an apply or a delete as Apply and Delete would, and
// writes nothing.
func (s *Server) DryRun(ctx context.Context, req *pb.DryRunRequest) (*pb.DryRunResponse, error) {
	switch w := req.GetWrite().(type) {
	case *pb.DryRunRequest_Apply:
		a := proto.Clone(w.Apply).(*pb.ApplyRequest)
		a.DryRun = true
		resp, err := s.Apply(ctx, a)
		if err != nil {
			return nil, err
		}
		return &pb.DryRunResponse{Apply: resp}, nil
	case *pb.DryRunRequest_Delete:
		d := proto.Clone(w.Delete).(*pb.DeleteRequest)
		d.DryRun = true
		resp, err := s.Delete(ctx, d)
		if err != nil {
			return nil, err
		}
		return &pb.DryRunResponse{Delete: resp}, nil
	}
	return nil, api.ToStatus(fmt.Errorf("dry run: give an apply or a delete to check: %w", api.ErrInvalid))
}

func (s *Server) Get(ctx context.Context, req *pb.GetRequest) (*pb.Object, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	ref, err := normalizeRef(req.GetRef(), true)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	obj, err := s.store.Get(ctx, ref)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	return api.RedactSecrets(obj), nil
}

func (s *Server) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	ref, err := normalizeRef(&pb.ObjectRef{Kind: req.GetKind(), Tenant: req.GetTenant()}, false)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	objs, rev, err := s.store.List(ctx, ref.Kind, ref.Tenant)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	objs, next, err := page(objs, req)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	shown := make([]*pb.Object, len(objs))
	for i, o := range objs {
		shown[i] = api.RedactSecrets(o)
	}
	return &pb.ListResponse{Objects: shown, Revision: rev, NextPageToken: next}, nil
}

func (s *Server) ClusterStatus(ctx context.Context, _ *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	resp, err := s.store.Status(ctx)
	return resp, api.ToStatus(err)
}

func (s *Server) CreateJoinToken(ctx context.Context, req *pb.CreateJoinTokenRequest) (*pb.CreateJoinTokenResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	resp, err := s.store.CreateJoinToken(ctx, time.Duration(req.GetTtlSeconds())*time.Second)
	return resp, api.ToStatus(err)
}

func (s *Server) RemoveNode(ctx context.Context, req *pb.RemoveNodeRequest) (*pb.RemoveNodeResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	if req.GetId() == "" {
		return nil, api.ToStatus(fmt.Errorf("node id must not be empty: %w", api.ErrInvalid))
	}
	return &pb.RemoveNodeResponse{}, api.ToStatus(s.store.RemoveNode(ctx, req.GetId()))
}

func (s *Server) DrainNode(ctx context.Context, req *pb.DrainNodeRequest) (*pb.DrainNodeResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	if req.GetId() == "" {
		return nil, api.ToStatus(fmt.Errorf("node id must not be empty: %w", api.ErrInvalid))
	}
	node, err := s.store.DrainNode(ctx, req.GetId(), !req.GetUndo())
	if err != nil {
		return nil, api.ToStatus(err)
	}
	return &pb.DrainNodeResponse{Node: node}, nil
}

// normalizeRef accepts kind aliases and checks that a name (and for
// namespaced kinds a tenant) is given where one is needed.
func normalizeRef(ref *pb.ObjectRef, needName bool) (*pb.ObjectRef, error) {
	kind, err := api.ParseKind(ref.GetKind())
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, api.ErrInvalid)
	}
	if !readableKinds[kind] {
		return nil, fmt.Errorf("%s objects are not readable through the admin API: %w", kind, api.ErrForbidden)
	}
	out := &pb.ObjectRef{Kind: kind, Tenant: ref.GetTenant(), Name: ref.GetName()}
	if needName {
		if out.Name == "" {
			return nil, fmt.Errorf("%s needs a name: %w", kind, api.ErrInvalid)
		}
		if api.Namespaced(kind) && out.Tenant == "" {
			return nil, fmt.Errorf("%s %s needs a tenant (--tenant or TENANT/NAME): %w", kind, out.Name, api.ErrInvalid)
		}
	}
	if !api.Namespaced(kind) {
		out.Tenant = ""
	}
	return out, nil
}

// backupChunk is the size of one BackupChunk.
const backupChunk = 1 << 20

// Backup streams the encoded backup in chunks.
func (s *Server) Backup(_ *pb.BackupRequest, stream pb.Admin_BackupServer) error {
	ctx, cancel := withDefault(stream.Context())
	defer cancel()
	b, err := s.store.Backup(ctx)
	if err != nil {
		return api.ToStatus(err)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		return api.ToStatus(err)
	}
	for len(data) > 0 {
		n := min(len(data), backupChunk)
		if err := stream.Send(&pb.BackupChunk{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
