package tenantsync_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// memberState is the observed state of a load balancer with one member.
func memberState(addr string, healthy bool) observe.LBState {
	s := observe.LBState{Members: []observe.Member{{Pool: "web", Addr: netip.MustParseAddrPort(addr), Healthy: healthy}}}
	if !healthy {
		s.Ready = observe.NoHealthyMember
	}
	return s
}

// Member health reaches the agent with the ack, and a change of health
// alone (no change of the stored state) is pushed as soon as the
// observed state has it: the stream's heartbeat here is 10 minutes, so
// no timer carries it.
func TestStatusCarriesMemberHealth(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	plane := observe.NewPlane()
	plane.Set(map[string]observe.LBState{"acme/svc-ns-a": memberState("10.20.0.1:80", true)}, nil)
	h := startHost(t, tenantsync.Config{Heartbeat: 10 * time.Minute, Observed: plane})
	h.seed(t)
	s := h.open(t, "acme")
	ack := s.change(upsert(tcpLB("svc-ns-a", &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")))

	wait := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a loaded 2-core CI machine
		for time.Now().Before(deadline) {
			m := s.recvWithin(time.Until(deadline))
			if m == nil {
				break
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
	plane.Set(map[string]observe.LBState{"acme/svc-ns-a": memberState("10.20.0.1:80", false)}, nil)
	wait(false)
	plane.Set(map[string]observe.LBState{"acme/svc-ns-a": memberState("10.20.0.1:80", true)}, nil)
	wait(true)
}
