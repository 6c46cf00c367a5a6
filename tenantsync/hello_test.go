package tenantsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// Streams that never say hello are closed after the hello deadline and
// give their slots back; the tenant's agent then connects.
func TestSilentStreamsReleaseTheirSlots(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{MaxStreams: 2, HelloTimeout: 500 * time.Millisecond})
	h.seed(t)
	cc := h.dial(t, pki.Identity{Role: pki.RoleTenant, Name: "acme", UID: h.uid(t, "acme")})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var silent []pb.TenantSync_SyncClient
	for range 2 {
		s, err := pb.NewTenantSyncClient(cc).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, s)
	}
	for i, s := range silent {
		_, err := s.Recv()
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no hello") {
			t.Fatalf("silent stream %d ended with %v, want the server to close it for want of a hello", i, err)
		}
	}
	waitFor := time.Now().Add(10 * time.Second)
	for {
		s, err := pb.NewTenantSyncClient(cc).Sync(ctx)
		if err == nil {
			err = s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Hello{Hello: &pb.SyncHello{Agent: "test"}}})
		}
		var m *pb.SyncResponse
		if err == nil {
			m, err = s.Recv()
		}
		if err == nil && m.GetWelcome() != nil {
			return
		}
		if time.Now().After(waitFor) {
			t.Fatalf("the agent cannot connect after the silent streams were closed: %v %v", m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Removing a name that does not exist is answered as not found.
func TestRemovalOfUnknownNameIsNotFound(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	s := h.open(t, "acme")
	ack := s.change(&pb.SyncChange{Removals: []string{"svc-ns-never"}})
	r := result(t, ack, "svc-ns-never")
	if !strings.Contains(r.GetError(), "does not exist") {
		t.Fatalf("removal of an unknown name: %v, want it answered as not found", r)
	}
}
