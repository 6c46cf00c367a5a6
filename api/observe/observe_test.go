package observe

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestEventsRingIsBoundedAndCursorWorks(t *testing.T) {
	e := NewEvents("n1", 4)
	changed := e.Changed()
	for i := 1; i <= 6; i++ {
		e.Add(&pb.Event{Type: EventMemberDown, LoadBalancer: fmt.Sprintf("acme/lb%d", i%2), Message: fmt.Sprint(i)})
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed by Add")
	}
	all, last := e.Since(0, Filter{}, 0)
	if last != 6 || len(all) != 4 {
		t.Fatalf("got %d events, last %d; want the 4 newest, last 6", len(all), last)
	}
	for i, ev := range all {
		if ev.Seq != uint64(i+3) || ev.NodeId != "n1" || ev.Time == nil || ev.Severity != Info {
			t.Errorf("event %d: %v", i, ev)
		}
	}
	newer, _ := e.Since(5, Filter{}, 0)
	if len(newer) != 1 || newer[0].Seq != 6 {
		t.Errorf("after 5: %v", newer)
	}
	odd, _ := e.Since(0, Filter{LB: "acme/lb1"}, 0)
	if len(odd) != 2 || odd[0].Seq != 3 || odd[1].Seq != 5 {
		t.Errorf("lb filter: %v", odd)
	}
	if none, _ := e.Since(0, Filter{Tenant: "other"}, 0); len(none) != 0 {
		t.Errorf("tenant filter: %v", none)
	}
	newest, _ := e.Since(0, Filter{}, 2)
	if len(newest) != 2 || newest[1].Seq != 6 {
		t.Errorf("max 2: %v", newest)
	}
	e.Add(&pb.Event{Message: strings.Repeat("x", 10000)})
	if got, _ := e.Since(6, Filter{}, 0); len(got[0].Message) > maxMessage+4 {
		t.Errorf("message not bounded: %d bytes", len(got[0].Message))
	}
}

func TestFilter(t *testing.T) {
	for _, c := range []struct {
		f           Filter
		tenant, lb  string
		match, mtnt bool
	}{
		{Filter{}, "acme", "acme/web", true, true},
		{Filter{Tenant: "acme"}, "", "acme/web", true, true},
		{Filter{Tenant: "beta"}, "", "acme/web", false, false},
		{Filter{LB: "acme/web"}, "", "acme/web", true, true},
		{Filter{LB: "acme/web"}, "", "acme/api", false, true},
		{Filter{LB: "acme/web"}, "acme", "", false, true},
		{Filter{LB: "beta/web"}, "acme", "", false, false},
	} {
		if got := c.f.Match(c.tenant, c.lb); got != c.match {
			t.Errorf("%+v.Match(%q, %q) = %v", c.f, c.tenant, c.lb, got)
		}
		tenant := c.tenant
		if tenant == "" {
			tenant, _, _ = strings.Cut(c.lb, "/")
		}
		if got := c.f.MatchTenant(tenant); got != c.mtnt {
			t.Errorf("%+v.MatchTenant(%q) = %v", c.f, tenant, got)
		}
	}
}

func TestHostAsksSourcesUnlessEventsOnly(t *testing.T) {
	h := NewHost("n1")
	calls := 0
	h.Add(SourceFunc(func(f Filter, o *pb.HostObservation) {
		calls++
		o.Problems = append(o.Problems, &pb.LoadBalancerProblem{LoadBalancer: f.LB})
	}))
	h.Events().Add(&pb.Event{Type: EventBindFailed, LoadBalancer: "acme/web"})
	o := h.Observe(&pb.ObserveRequest{LoadBalancer: "acme/web"})
	if calls != 1 || len(o.Problems) != 1 || o.Problems[0].LoadBalancer != "acme/web" || len(o.Events) != 1 || o.LastEvent != 1 || o.NodeId != "n1" || !o.Reachable {
		t.Fatalf("observation: %v", o)
	}
	o = h.Observe(&pb.ObserveRequest{EventsOnly: true, EventsAfter: map[string]uint64{"n1": 1}})
	if calls != 1 || len(o.Events) != 0 || o.LastEvent != 1 {
		t.Fatalf("events only: calls %d, %v", calls, o)
	}
}

// A load balancer's selection has the certificate events of the names
// it routes, not those of its tenant's other names or other tenants.
func TestCertEventsScopedToTheLoadBalancersNames(t *testing.T) {
	t.Parallel()
	e := NewEvents("n1", 0)
	e.Add(&pb.Event{Type: EventCertIssued, Tenant: "acme", Host: "shop.acme.example"})
	e.Add(&pb.Event{Type: EventCertFailed, Tenant: "acme", Host: "old.acme.example"})
	e.Add(&pb.Event{Type: EventCertIssued, Tenant: "beta", Host: "shop.acme.example"})
	e.Add(&pb.Event{Type: EventMemberDown, Tenant: "acme", LoadBalancer: "acme/api"})
	got, _ := e.Since(0, Filter{LB: "acme/shop"}, 0)
	hosts := []*pb.HostObservation{{Events: got}}
	KeepCertEventsOf(hosts, &pb.LoadBalancer{Tenant: "acme", Name: "shop", Routes: []*pb.Route{{Host: "shop.acme.example"}}})
	if len(hosts[0].Events) != 1 || hosts[0].Events[0].Seq != 1 {
		t.Errorf("acme/shop's events: %v, want the certificate of shop.acme.example alone", hosts[0].Events)
	}
	got, _ = e.Since(0, Filter{LB: "acme/shop"}, 0)
	hosts = []*pb.HostObservation{{Events: got}}
	KeepCertEventsOf(hosts, nil)
	if len(hosts[0].Events) != 0 {
		t.Errorf("a load balancer not stored kept %v", hosts[0].Events)
	}
}
