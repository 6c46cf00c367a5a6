package proxy

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestDeriveBudgets(t *testing.T) {
	for _, tc := range []struct {
		nofile       uint64
		host, tenant int
	}{
		{1024, 205, 51},      // 1024 - 102 - 512 = 410 descriptors, 2 per connection
		{65536, 29235, 7308}, // 65536 - 6553 - 512
		{1048576, 471603, 117900},
		{100, 1, 1},
	} {
		if b := DeriveBudgets(tc.nofile); b.Host != tc.host || b.Tenant != tc.tenant {
			t.Errorf("DeriveBudgets(%d) = %+v, want host %d tenant %d", tc.nofile, b, tc.host, tc.tenant)
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
		return opened == int64(budget.Tenant)
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
}
