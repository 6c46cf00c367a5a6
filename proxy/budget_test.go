package proxy

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestDeriveBudgets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		nofile              uint64
		host, tenant, pipes int
	}{
		{1024, 360, 90, 25},        // 1024 - 102 - 512 = 410 descriptors, 25 pipes of 2
		{20000, 15302, 3825, 1093}, // 20000 - 2000 - 512 = 17488
		{65536, 51163, 12790, 3654},
		{1048576, 935015, 233753, maxPipes},
		{100, 2, 2, 0},
	} {
		if b := DeriveBudgets(tc.nofile); b.Host != tc.host || b.Tenant != tc.tenant || b.Pipes != tc.pipes {
			t.Errorf("DeriveBudgets(%d) = %+v, want host %d tenant %d pipes %d", tc.nofile, b, tc.host, tc.tenant, tc.pipes)
		}
	}
}

// TestLimitsWithBudgets: a bound left at zero takes its pair's (a
// connection holds two descriptors), else the derived budget.
func TestLimitsWithBudgets(t *testing.T) {
	t.Parallel()
	b := Budgets{Host: 1001, Tenant: 251, Pipes: 10}
	for _, tc := range []struct {
		in, want Limits
	}{
		{Limits{}, Limits{MaxConnectionsPerTenant: 125, MaxDescriptorsPerTenant: 250, MaxHostConnections: 500, MaxHostDescriptors: 1000, SplicePipes: 10}},
		{Limits{MaxConnectionsPerTenant: 2, MaxHostDescriptors: 7, SplicePipes: -1},
			Limits{MaxConnectionsPerTenant: 2, MaxDescriptorsPerTenant: 4, MaxHostConnections: 3, MaxHostDescriptors: 7, SplicePipes: -1}},
	} {
		if got := tc.in.withBudgets(b); got != tc.want {
			t.Errorf("%+v.withBudgets = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestTenantBudgetKeepsHostAnswering lowers this process's descriptor
// limit, derives the default budgets from it, and opens idle connections
// to tenant b's VIP until the proxy refuses them: b holds no more than its
// budget, and tenant a's load balancer and a listener outside the proxy
// (standing for the admin API and Raft, which share the process) keep
// answering.
func TestTenantBudgetKeepsHostAnswering(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	limit := uint64(openFDs(t) + 1400)
	if limit > old.Max {
		t.Fatalf("the hard descriptor limit %d is below %d", old.Max, limit)
	}
	lowered := old
	lowered.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	budget := DeriveBudgets(limit)

	be := startBackend(t, "127.0.0.1", echo)
	admin := startBackend(t, "127.0.0.1", echo)
	p, m := newProxy(t, Config{}) // budgets derived from the lowered limit
	port := freePort(t)
	lbB := l4LB("b", "127.0.0.3", port, "tcp", be.addr)
	lbB.Tenant = "globex"
	objs := append(labObjects(l4LB("a", "127.0.0.2", port, "tcp", be.addr), lbB),
		&pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "globex", Networks: []string{"127.0.0.0/8"}}}})
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}

	refusedB := func() (refused, opened int64) {
		for _, l := range m.Report().Listeners {
			if l.LB == "globex/b" {
				refused += l.Refused[RefusedTenantLimit]
				opened += l.Opened
			}
		}
		return
	}
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if r, _ := refusedB(); r >= 5 {
			break
		}
		if i > int(limit) || time.Now().After(deadline) {
			t.Fatalf("%d connections to b and none refused", i)
		}
		c, err := net.DialTimeout("tcp", vipAddr("127.0.0.3", port), 2*time.Second)
		if errors.Is(err, syscall.ECONNRESET) {
			continue // refused under our eyes
		}
		if err != nil {
			for _, c := range held {
				c.Close() // give the descriptors back before failing
			}
			held = nil
			t.Fatalf("after %d connections to b: %v", i, err)
		}
		held = append(held, c)
		if i%16 == 0 {
			time.Sleep(time.Millisecond) // let the proxy accept
		}
	}
	eventually(t, "b's accepted connections to settle", func() bool {
		_, opened := refusedB()
		return opened == int64(budget.Tenant/2)
	})
	refused, opened := refusedB()
	t.Logf("descriptor limit %d: budgets %+v; b holds %d connections, %d refused", limit, budget, opened, refused)

	for _, addr := range []string{vipAddr("127.0.0.2", port), admin.addr} {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("%s while b is at its budget: %v", addr, err)
		}
		if err := roundTrip(c, []byte("still answering")); err != nil {
			t.Errorf("%s while b is at its budget: %v", addr, err)
		}
		c.Close()
	}
}

// TestConnectionQuotas: a tenant's quotas.connectionsPerListener and
// quotas.connections override the host's defaults.
func TestConnectionQuotas(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, m := newProxy(t, Config{})
	port := freePort(t)
	objs := labObjects(l4LB("a", "127.0.0.2", port, "tcp", be.addr), l4LB("b", "127.0.0.3", port, "tcp", be.addr),
		l4LB("c", "127.0.0.4", port, "tcp", be.addr))
	objs[0].GetTenant().Quotas = &pb.Quotas{Connections: 2, ConnectionsPerListener: 1}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	for _, vip := range []string{"127.0.0.2", "127.0.0.3"} {
		c, err := net.DialTimeout("tcp", vipAddr(vip, port), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := roundTrip(c, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	expectRefused(t, vipAddr("127.0.0.2", port)) // its listener's one connection
	expectRefused(t, vipAddr("127.0.0.4", port)) // the tenant's two
	got := map[string]int64{}
	for _, l := range m.Report().Listeners {
		for reason, n := range l.Refused {
			got[l.LB+" "+reason] += n
		}
	}
	if got["acme/a "+RefusedListenerLimit] != 1 || got["acme/c "+RefusedTenantLimit] != 1 || len(got) != 2 {
		t.Errorf("refusals %v", got)
	}
	// The host's page shows what the tenant holds against its budget.
	var h pb.HostObservation
	p.Observe(observe.Filter{}, &h)
	if len(h.TenantUsage) != 1 || h.TenantUsage[0].Tenant != "acme" || h.TenantUsage[0].Connections != 2 ||
		h.TenantUsage[0].Descriptors < 2 || h.TenantUsage[0].MaxDescriptors != 4 {
		t.Errorf("tenant usage %v, want acme holding 2 connections and 2 or more of its 4 descriptors", h.TenantUsage)
	}
	if r := h.Resources; r.GetConnections() != 2 || r.GetMaxConnections() <= 2 || r.GetDescriptors() < 2 || r.GetMaxDescriptors() <= 2 {
		t.Errorf("host budgets %v", r)
	}
	h = pb.HostObservation{}
	p.Observe(observe.Filter{Tenant: "other"}, &h)
	if len(h.TenantUsage) != 0 {
		t.Errorf("another tenant's selection shows %v", h.TenantUsage)
	}
}
