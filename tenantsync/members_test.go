package tenantsync_test

import (
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// Member health reaches the agent with the ack, and a change of health
// alone (no change of the stored state) is pushed.
func TestStatusCarriesMemberHealth(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	members := func(lb string) []*pb.MemberState {
		if lb != "acme/svc-ns-a" {
			return nil
		}
		return []*pb.MemberState{{Pool: "web", Address: "10.20.0.1:80", Healthy: healthy.Load()}}
	}
	h := startHost(t, tenantsync.Config{Heartbeat: 200 * time.Millisecond, Members: members})
	h.seed(t)
	s := h.open(t, "acme")
	ack := s.change(upsert(tcpLB("svc-ns-a", &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")))

	wait := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a loaded 2-core CI machine
		for time.Now().Before(deadline) {
			m, err := s.stream.Recv()
			if err != nil {
				t.Fatalf("waiting for member health %v: %v", want, err)
			}
			for _, o := range m.GetStatus().GetObjects() {
				if o.GetName() == "svc-ns-a" && len(o.GetMembers()) == 1 && o.GetMembers()[0].GetHealthy() == want {
					return
				}
			}
		}
		t.Fatalf("member health %v never reached the agent", want)
	}
	// The ack tells the members' health as the pushes do (a push of the
	// same revision may come before it).
	if ms := result(t, ack, "svc-ns-a").GetMembers(); len(ms) != 1 || !ms[0].GetHealthy() {
		t.Fatalf("the ack tells members %v, want one healthy", ms)
	}
	healthy.Store(false)
	wait(false)
}
