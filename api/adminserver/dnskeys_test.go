package adminserver

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// statusStore answers Status with its nodes.
type statusStore struct {
	Store
	nodes []*pb.NodeStatus
}

func (s *statusStore) Status(context.Context) (*pb.ClusterStatusResponse, error) {
	return &pb.ClusterStatusResponse{Nodes: s.nodes}, nil
}

// rollRecorder is a DNS server's rollover: it records the steps asked.
type rollRecorder struct{ steps []pb.RollDNSKeyRequest_Step }

func (r *rollRecorder) RollKey(_ context.Context, zone string, step pb.RollDNSKeyRequest_Step, _ bool) (*pb.DNSZoneObservation, error) {
	r.steps = append(r.steps, step)
	return &pb.DNSZoneObservation{Zone: zone, Signed: true}, nil
}

// RollDNSKey refuses a request without a zone or step, a host without
// signed zones, and a START while a host of an earlier release (which
// would sign with the old key alone) answers; it passes the steps on
// otherwise.
func TestRollDNSKeyRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := &pb.NodeStatus{Id: "n1", Features: api.Features()}
	old := &pb.NodeStatus{Id: "n2", Version: "0.9.0", Features: []string{api.FeatureDryRun}}
	gone := &pb.NodeStatus{Id: "n3", Error: "unreachable"}
	st := &statusStore{nodes: []*pb.NodeStatus{now, old, gone}}
	rec := &rollRecorder{}
	s := New(st).WithDNSKeys(rec)
	for _, c := range []struct {
		req  *pb.RollDNSKeyRequest
		code codes.Code
		want string
	}{
		{&pb.RollDNSKeyRequest{Step: pb.RollDNSKeyRequest_STEP_START}, codes.InvalidArgument, "zone:"},
		{&pb.RollDNSKeyRequest{Zone: "acme.example"}, codes.InvalidArgument, "give START, FINISH or CANCEL"},
		{&pb.RollDNSKeyRequest{Zone: "acme.example", Step: 9}, codes.InvalidArgument, "give START, FINISH or CANCEL"},
		{&pb.RollDNSKeyRequest{Zone: "acme.example", Step: pb.RollDNSKeyRequest_STEP_START}, codes.FailedPrecondition, `host "n2" runs release "0.9.0", which signs with one key only: upgrade it first`},
	} {
		_, err := s.RollDNSKey(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%v: %v, want %s %q", c.req, err, c.code, c.want)
		}
	}
	if len(rec.steps) != 0 {
		t.Fatalf("refused requests reached the DNS server: %v", rec.steps)
	}
	// FINISH and CANCEL need no check: a host of an earlier release never
	// signed with the new key.
	if _, err := s.RollDNSKey(ctx, &pb.RollDNSKeyRequest{Zone: "acme.example", Step: pb.RollDNSKeyRequest_STEP_CANCEL}); err != nil {
		t.Fatal(err)
	}
	st.nodes = []*pb.NodeStatus{now, gone}
	if _, err := s.RollDNSKey(ctx, &pb.RollDNSKeyRequest{Zone: "acme.example", Step: pb.RollDNSKeyRequest_STEP_START}); err != nil {
		t.Fatal(err)
	}
	if len(rec.steps) != 2 {
		t.Fatalf("steps passed on: %v", rec.steps)
	}
	if _, err := New(st).RollDNSKey(ctx, &pb.RollDNSKeyRequest{Zone: "acme.example", Step: pb.RollDNSKeyRequest_STEP_START}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a host that signs no zone: %v", err)
	}
}
