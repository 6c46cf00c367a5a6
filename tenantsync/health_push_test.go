package tenantsync_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestHealthPushAsksOnlyForTheLoadBalancersNamed: with member-health
// notifications, a stream of a tenant with 500 load balancers asks for
// the members of the one named when its health changes, and of none on
// the ticks in between, and still pushes the change; without them every
// tick asks for all 500 (what a tenant with 10,000 paid every 5 s).
func TestHealthPushAsksOnlyForTheLoadBalancersNamed(t *testing.T) {
	const n = 500
	var (
		mu      sync.Mutex
		asked   = map[string]int{}
		healthy atomic.Bool
	)
	healthy.Store(true)
	members := func(lb string) []*pb.MemberState {
		mu.Lock()
		asked[lb]++
		mu.Unlock()
		return []*pb.MemberState{{Pool: "web", Address: "10.20.0.1:80", Healthy: lb != "big/svc-7" || healthy.Load()}}
	}
	h := startHost(t, tenantsync.Config{Heartbeat: 100 * time.Millisecond, Members: members, MembersNotified: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "wide", Cidrs: []string{"198.18.0.0/20"}, Mode: "static"}),
		api.Wrap(&pb.Tenant{Name: "big", Networks: []string{"10.20.0.0/16"}, Pools: []string{"wide"},
			Quotas: &pb.Quotas{LoadBalancers: n, Addresses: n, Listeners: n, Members: n}}),
	}}, false); err != nil {
		t.Fatal(err)
	}
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
	count := func() (total, svc7 int) {
		mu.Lock()
		defer mu.Unlock()
		for lb, c := range asked {
			total += c
			if lb == "big/svc-7" {
				svc7 += c
			}
		}
		return total, svc7
	}
	// The writes' acks and pushes ask for every load balancer's members;
	// once they are done, ten ticks in a row (1 s) with no health change
	// must ask for none. A loaded 2-core CI machine gets 30 s to settle.
	settle := time.Now().Add(30 * time.Second)
	before, svc7Before := count()
	for stable := time.Now(); time.Since(stable) < time.Second; {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		lbsAsked := len(asked)
		mu.Unlock()
		if now, svc7 := count(); now != before || lbsAsked < n {
			if time.Now().After(settle) {
				t.Fatalf("ticks with no health change keep asking for members: %d load balancers asked so far, %d asks in the last 100 ms; want none once the %d writes are answered",
					lbsAsked, now-before, n)
			}
			before, svc7Before, stable = now, svc7, time.Now()
		}
	}

	healthy.Store(false)
	h.ts.MembersChanged([]string{"big/svc-7"})
	deadline := time.Now().Add(30 * time.Second) // a loaded 2-core CI machine
	for pushed := false; !pushed; {
		if time.Now().After(deadline) {
			t.Fatal("the health change of svc-7 never reached the agent")
		}
		m := s.recvWithin(time.Until(deadline))
		if m == nil {
			t.Fatal("the health change of svc-7 never reached the agent")
		}
		for _, o := range m.GetStatus().GetObjects() {
			if o.GetName() == "svc-7" && len(o.GetMembers()) == 1 && !o.GetMembers()[0].GetHealthy() {
				pushed = true
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	after, svc7 := count()
	if after-before != 1 || svc7-svc7Before != 1 {
		t.Errorf("one load balancer's health changed: asked for %d load balancers' members, %d of them svc-7; want svc-7 alone, once",
			after-before, svc7-svc7Before)
	}
}
