package tenantsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// setQuotas updates tenant acme's quotas through the store as the admin
// API does.
func (h *host) setQuotas(t *testing.T, name string, q *pb.Quotas) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindTenant, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	tn := o.GetTenant()
	tn.Quotas = q
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(tn)}}, false); err != nil {
		t.Fatal(err)
	}
}

func (h *host) count(t *testing.T, tenant string) int {
	t.Helper()
	objs, _, err := h.node.List(context.Background(), api.KindLoadBalancer, tenant)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// The load-balancer quota holds through the tenant stream, whether the
// load balancers arrive in one change (one write) or one by one.
func TestLoadBalancerQuotaHolds(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	h.setQuotas(t, "acme", &pb.Quotas{LoadBalancers: 3})
	s := h.open(t, "acme")

	var lbs []*pb.LoadBalancer
	for i := range 5 {
		lbs = append(lbs, tcpLB(fmt.Sprintf("svc-ns-%d", i), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80"))
	}
	ack := s.change(upsert(lbs...))
	refused, stored := 0, ""
	for _, r := range ack.GetResults() {
		if r.GetError() == "" {
			stored = r.GetName()
		} else {
			refused++
			if !strings.Contains(r.GetError(), "quotas.loadBalancers") {
				t.Errorf("%s refused for another reason: %s", r.GetName(), r.GetError())
			}
		}
	}
	if n := h.count(t, "acme"); n != 3 || refused != 2 {
		t.Fatalf("tenant stores %d load balancers with 2 refused expected, got %d refused; quota 3; ack %v", n, refused, ack)
	}
	for i := 5; i < 8; i++ {
		ack := s.change(upsert(tcpLB(fmt.Sprintf("svc-ns-%d", i), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")))
		if r := result(t, ack, fmt.Sprintf("svc-ns-%d", i)); !strings.Contains(r.GetError(), "quotas.loadBalancers") {
			t.Fatalf("load balancer %d beyond the quota: %v", i, r)
		}
	}
	if n := h.count(t, "acme"); n != 3 {
		t.Fatalf("tenant stores %d load balancers, quota 3", n)
	}
	// An update of a stored one (whichever of the first change's went
	// in) still goes through at the quota.
	up := tcpLB(stored, &pb.VIPRequest{Pool: "public"}, "10.20.0.2:80")
	if r := result(t, s.change(upsert(up)), stored); r.GetError() != "" {
		t.Fatalf("update at the quota refused: %v", r)
	}
}

// Per-load-balancer bounds and per-tenant totals come from the quotas,
// with defaults when unset, and name the quota to raise.
func TestObjectBoundsThroughTenantStream(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	s := h.open(t, "acme")

	many := func(name string, listeners, routes int) *pb.LoadBalancer {
		lb := &pb.LoadBalancer{
			Name: name, Vip: &pb.VIPRequest{Pool: "public"},
			Pools: map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.20.0.1:80"}}}},
		}
		for i := range listeners {
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: uint32(1000 + i), Protocol: "http"})
		}
		for i := range routes {
			lb.Routes = append(lb.Routes, &pb.Route{Host: "shop.acme.example", Path: fmt.Sprintf("/p%d", i), Pool: "web"})
		}
		return lb
	}
	want := func(lb *pb.LoadBalancer, needle string) {
		t.Helper()
		r := result(t, s.change(upsert(lb)), lb.GetName())
		if needle == "" {
			if r.GetError() != "" {
				t.Fatalf("%s refused: %s", lb.GetName(), r.GetError())
			}
			return
		}
		if !strings.Contains(r.GetError(), needle) {
			t.Fatalf("%s: error %q, want it to mention %q", lb.GetName(), r.GetError(), needle)
		}
	}
	d := api.DefaultQuotas()
	want(many("svc-ns-l", int(d.ListenersPerLb)+1, 1), "quotas.listenersPerLb")
	want(many("svc-ns-r", 1, int(d.RoutesPerLb)+1), "quotas.routesPerLb")

	long := many("svc-ns-p", 1, 1)
	long.Routes[0].Path = "/" + strings.Repeat("a", 1<<20)
	r := result(t, s.change(upsert(long)), "svc-ns-p")
	if !strings.Contains(r.GetError(), "routes[0].path") || len(r.GetError()) > 1000 {
		t.Fatalf("a 1 MiB path: error %.300q (%d bytes), want a short refusal naming routes[0].path", r.GetError(), len(r.GetError()))
	}

	// Raised by the operator, the same load balancer is stored; the tenant
	// total then bounds the next one.
	h.setQuotas(t, "acme", &pb.Quotas{RoutesPerLb: 3000, Routes: 4000})
	want(many("svc-ns-r", 1, 2500), "")
	want(many("svc-ns-r2", 1, 2000), "quotas.routes")
	want(many("svc-ns-r3", 1, 1500), "")
	if n := h.count(t, "acme"); n != 2 {
		t.Fatalf("tenant stores %d load balancers, want 2", n)
	}
}

// Health checks a tenant writes are bounded: a minimum interval, a
// timeout below the interval and at most 10s (a tarpit cannot hold the
// checker for minutes).
func TestHealthCheckBoundsThroughTenantStream(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	s := h.open(t, "acme")
	for i, c := range []struct {
		interval, timeout time.Duration
		want              string
	}{
		{10 * time.Millisecond, 0, "shorter than 1s"},
		{10 * time.Minute, 300 * time.Second, "longer than 10s"},
		{2 * time.Second, 2 * time.Second, "equals the interval"},
		{0, 6 * time.Second, "not shorter than the default interval"},
		{2 * time.Second, time.Second, ""},
	} {
		lb := tcpLB(fmt.Sprintf("svc-hc-%d", i), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")
		hc := &pb.HealthCheck{Tcp: &pb.TCPCheck{}}
		if c.interval > 0 {
			hc.Interval = durationpb.New(c.interval)
		}
		if c.timeout > 0 {
			hc.Timeout = durationpb.New(c.timeout)
		}
		lb.Pools["web"].HealthCheck = hc
		r := result(t, s.change(upsert(lb)), lb.GetName())
		if c.want == "" && r.GetError() != "" || !strings.Contains(r.GetError(), c.want) {
			t.Errorf("interval %s timeout %s: error %q, want %q", c.interval, c.timeout, r.GetError(), c.want)
		}
	}
}
