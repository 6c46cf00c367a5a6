package tenantsync_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
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

// heldCPU is a tenant CPU budget that can be put in debt: Wait blocks
// while held. It counts the pushes it was charged for (Run) and the
// waits begun.
type heldCPU struct {
	mu      sync.Mutex
	held    chan struct{} // nil: not in debt
	waiting atomic.Int64
	runs    atomic.Int64
}

func (c *heldCPU) Wait(ctx context.Context) bool {
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if held == nil {
		return true
	}
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case <-held:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *heldCPU) Run(f func()) { c.runs.Add(1); f() }

func (c *heldCPU) hold() {
	c.mu.Lock()
	c.held = make(chan struct{})
	c.mu.Unlock()
}

func (c *heldCPU) release() {
	c.mu.Lock()
	close(c.held)
	c.held = nil
	c.mu.Unlock()
}

// TestHealthPushesAreChargedToTheTenant: a stream's member-health pushes
// are charged to its tenant's CPU budget (Config.CPU), and while the
// tenant is in debt of it they wait; once it is out of debt the next
// push carries what changed meanwhile. Another tenant's budget is not
// asked.
func TestHealthPushesAreChargedToTheTenant(t *testing.T) {
	t.Parallel()
	plane := observe.NewPlane()
	var mu sync.Mutex
	budgets := map[string]*heldCPU{}
	cpuOf := func(tenant string) tenantsync.TenantCPU {
		mu.Lock()
		defer mu.Unlock()
		if budgets[tenant] == nil {
			budgets[tenant] = &heldCPU{}
		}
		return budgets[tenant]
	}
	h := startHost(t, tenantsync.Config{Heartbeat: 10 * time.Minute, Observed: plane, CPU: cpuOf})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "wide", Cidrs: []string{"198.18.0.0/20"}, Mode: "static"}),
		api.Wrap(&pb.Tenant{Name: "big", Networks: []string{"10.20.0.0/16"}, Pools: []string{"wide"}}),
	}}, false); err != nil {
		t.Fatal(err)
	}
	plane.Set(map[string]observe.LBState{"big/svc-a": memberState("10.20.0.1:80", true)}, nil)
	s := h.open(t, "big")
	if r := s.change(upsert(tcpLB("svc-a", &pb.VIPRequest{Pool: "wide"}, "10.20.0.1:80"))).GetResults(); len(r) != 1 || r[0].GetError() != "" {
		t.Fatalf("upsert: %v", r)
	}
	budget := cpuOf("big").(*heldCPU)
	msgs := make(chan *pb.SyncResponse, 64)
	go func() {
		defer close(msgs)
		for {
			m, err := s.stream.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	// pushed waits for a health push that tells the member healthy (or
	// not), at most within.
	pushed := func(healthy bool, within time.Duration) bool {
		timer := time.NewTimer(within)
		defer timer.Stop()
		for {
			var m *pb.SyncResponse
			select {
			case m = <-msgs:
			case <-timer.C:
				return false
			}
			if m == nil {
				t.Fatal("the stream ended")
			}
			for _, o := range m.GetStatus().GetObjects() {
				for _, ms := range o.GetMembers() {
					if ms.GetHealthy() == healthy {
						return true
					}
				}
			}
		}
	}
	plane.Set(map[string]observe.LBState{"big/svc-a": memberState("10.20.0.1:80", false)}, nil)
	if !pushed(false, 30*time.Second) {
		t.Fatal("the member's failure never reached the agent")
	}
	// The status of the load balancer's own change (its address) may
	// carry the failure first, uncharged as any object's status is: the
	// health push follows it.
	for deadline := time.Now().Add(10 * time.Second); budget.runs.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a health push was not charged to its tenant's CPU budget")
		}
	}

	budget.hold()
	deadline := time.Now().Add(30 * time.Second)
	for budget.waiting.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream's next health push never waited for its tenant's budget")
		}
		time.Sleep(time.Millisecond)
	}
	runs := budget.runs.Load()
	plane.Set(map[string]observe.LBState{"big/svc-a": memberState("10.20.0.1:80", true)}, nil)
	if pushed(true, time.Second) {
		t.Fatal("a health push went out while its tenant was in debt of its CPU budget")
	}
	if got := budget.runs.Load(); got != runs {
		t.Fatalf("%d pushes charged while the tenant was in debt", got-runs)
	}
	budget.release()
	if !pushed(true, 30*time.Second) {
		t.Fatal("the member's recovery never reached the agent once its tenant was out of debt")
	}
	mu.Lock()
	defer mu.Unlock()
	for name := range budgets {
		if name != "big" {
			t.Errorf("tenant %s's budget was asked for big's pushes", name)
		}
	}
}
