package tenantsync

import (
	"fmt"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestRefusalsAreEventsOncePerReason(t *testing.T) {
	t.Parallel()
	var got []*pb.Event
	s := &Server{cfg: Config{Events: func(ev *pb.Event) { got = append(got, ev) }}}
	refused := []*pb.ObjectStatus{{Name: "svc-a", Error: "members outside the tenant's networks"}, {Name: "svc-b"}}
	s.noteRefusals("acme", refused)
	s.noteRefusals("acme", refused) // the agent resends: no new event
	if len(got) != 1 || got[0].Type != observe.EventTenantRefused || got[0].LoadBalancer != "acme/svc-a" || got[0].Tenant != "acme" {
		t.Fatalf("events: %v", got)
	}
	s.noteRefusals("acme", []*pb.ObjectStatus{{Name: "svc-a", Error: "port 22 is not allowed"}})
	s.noteRefusals("acme", []*pb.ObjectStatus{{Name: "svc-a"}})
	s.noteRefusals("acme", refused) // refused again after being written
	if len(got) != 3 {
		t.Fatalf("want a new event per new reason and after a success, got %v", got)
	}
	// A tenant cannot grow the memory or flood the ring without bound.
	var flood []*pb.ObjectStatus
	for i := range 2 * maxRefusalsPerTenant {
		flood = append(flood, &pb.ObjectStatus{Name: fmt.Sprintf("svc-%d", i), Error: "bad"})
	}
	got = nil
	s.noteRefusals("evil", flood)
	if len(got) != maxRefusalsPerTenant || len(s.refusals.m["evil"]) != maxRefusalsPerTenant {
		t.Fatalf("flood: %d events, %d remembered", len(got), len(s.refusals.m["evil"]))
	}
}
