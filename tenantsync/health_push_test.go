package tenantsync_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestHealthPushCarriesTheLoadBalancersChanged: a stream of a tenant with
// 500 load balancers is pushed the status of the one whose members'
// health changed in the observed state, alone, and nothing for a change
// of another tenant's load balancer of the same name; the push comes from
// the watch, not a timer (the heartbeat here is 10 minutes).
func TestHealthPushCarriesTheLoadBalancersChanged(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	const n = 500
	plane := observe.NewPlane()
	h := startHost(t, tenantsync.Config{Heartbeat: 10 * time.Minute, Observed: plane})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "wide", Cidrs: []string{"198.18.0.0/20"}, Mode: "static"}),
		api.Wrap(&pb.Tenant{Name: "big", Networks: []string{"10.20.0.0/16"}, Pools: []string{"wide"},
			Quotas: &pb.Quotas{LoadBalancers: n, Addresses: n, Listeners: n, Members: n}}),
	}}, false); err != nil {
		t.Fatal(err)
	}
	all := map[string]observe.LBState{}
	for i := range n {
		all[fmt.Sprintf("big/svc-%d", i)] = memberState("10.20.0.1:80", true)
	}
	plane.Set(all, nil)
	s := h.open(t, "big")
	for from := 0; from < n; from += 250 {
		var lbs []*pb.LoadBalancer
		for i := from; i < from+250; i++ {
			lbs = append(lbs, tcpLB(fmt.Sprintf("svc-%d", i), &pb.VIPRequest{Pool: "wide"}, "10.20.0.1:80"))
		}
		for _, r := range s.change(upsert(lbs...)).GetResults() {
			if r.GetError() != "" {
				t.Fatalf("%s: %s", r.GetName(), r.GetError())
			}
		}
	}
	// Another tenant's load balancer of the same name changes first; then
	// svc-7's member goes down. The first health push must be svc-7's alone.
	plane.Set(map[string]observe.LBState{"other/svc-7": memberState("10.30.0.1:80", false)}, nil)
	plane.Set(map[string]observe.LBState{"big/svc-7": memberState("10.20.0.1:80", false)}, nil)
	deadline := time.Now().Add(30 * time.Second) // a loaded 2-core CI machine
	for {
		m := s.recvWithin(time.Until(deadline))
		if m == nil {
			t.Fatal("the health change of svc-7 never reached the agent")
		}
		objs := m.GetStatus().GetObjects()
		var downs []string
		for _, o := range objs {
			for _, ms := range o.GetMembers() {
				if !ms.GetHealthy() {
					downs = append(downs, o.GetName())
				}
			}
		}
		if len(downs) == 0 {
			continue // the writes' own pushes
		}
		if len(objs) != 1 || objs[0].GetName() != "svc-7" {
			names := make([]string, len(objs))
			for i, o := range objs {
				names[i] = o.GetName()
			}
			t.Fatalf("the health push carries %v (down: %v); want svc-7 alone", names, downs)
		}
		return
	}
}

// TestHealthPushesAreCoalesced: 200 members of one load balancer of 1,000
// go down one at a time, a millisecond apart. Each push carries the whole
// load balancer's members, so a push per change would cost the host the
// square of the members on each of the tenant's streams (as 1,000
// failing health checks did); the stream is pushed at most once per
// HealthPushEvery, and the last push carries every change.
func TestHealthPushesAreCoalesced(t *testing.T) {
	t.Parallel()
	const members, changes = 1000, 200
	plane := observe.NewPlane()
	h := startHost(t, tenantsync.Config{Heartbeat: 10 * time.Minute, Observed: plane})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "wide", Cidrs: []string{"198.18.0.0/20"}, Mode: "static"}),
		api.Wrap(&pb.Tenant{Name: "big", Networks: []string{"10.20.0.0/16"}, Pools: []string{"wide"},
			Quotas: &pb.Quotas{Members: members, MembersPerPool: members, HealthChecks: members}}),
	}}, false); err != nil {
		t.Fatal(err)
	}
	state := observe.LBState{}
	var addrs []string
	for i := range members {
		a := fmt.Sprintf("10.20.%d.%d:80", i/250, 1+i%250)
		addrs = append(addrs, a)
		state.Members = append(state.Members, observe.Member{Pool: "web", Addr: netip.MustParseAddrPort(a), Healthy: true})
	}
	plane.Set(map[string]observe.LBState{"big/svc-big": state}, nil)
	s := h.open(t, "big")
	if r := s.change(upsert(tcpLB("svc-big", &pb.VIPRequest{Pool: "wide"}, addrs...))).GetResults(); len(r) != 1 || r[0].GetError() != "" {
		t.Fatalf("upsert: %v", r)
	}
	start := time.Now()
	for i := range changes {
		next := observe.LBState{Members: slices.Clone(state.Members)}
		for j := 0; j <= i; j++ {
			next.Members[j].Healthy = false
		}
		plane.Set(map[string]observe.LBState{"big/svc-big": next}, nil)
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	pushes := 0
	deadline := time.Now().Add(30 * time.Second) // a loaded 2-core CI machine
	for {
		m := s.recvWithin(time.Until(deadline))
		if m == nil {
			t.Fatalf("after %d pushes, none carried all %d members down", pushes, changes)
		}
		objs := m.GetStatus().GetObjects()
		if len(objs) == 0 {
			continue
		}
		pushes++
		down := 0
		for _, ms := range objs[0].GetMembers() {
			if !ms.GetHealthy() {
				down++
			}
		}
		if down == changes {
			break
		}
	}
	// One at once, one per interval of the changes, one for the last.
	if bound := int(took/tenantsync.HealthPushEvery) + 2; pushes > bound {
		t.Errorf("%d health pushes for %d changes in %s, want at most %d (one per %s)", pushes, changes, took.Round(time.Millisecond), bound, tenantsync.HealthPushEvery)
	}
	t.Logf("%d health pushes for %d changes in %s", pushes, changes, took.Round(time.Millisecond))
}
