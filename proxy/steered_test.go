package proxy

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
	"github.com/teapot-lb/teapot-lb/proxy/steer"
)

// steeredObjects are two tenants, acme and bolt, a pool of documentation
// addresses and lbs.
func steeredObjects(lbs ...*pb.LoadBalancer) []*pb.Object {
	out := []*pb.Object{
		{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "lab", Cidrs: []string{"192.0.2.0/24", "2001:db8::/64"}, Mode: "static"}}},
	}
	for _, t := range []string{"acme", "bolt"} {
		out = append(out, &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: t, Networks: []string{"127.0.0.0/8"}}}})
	}
	for _, lb := range lbs {
		out = append(out, wrapLB(lb))
	}
	return out
}

func tenantLB(tenant, name, vip string, port int, member string) *pb.LoadBalancer {
	lb := l4LB(name, vip, port, "tcp", member)
	lb.Tenant = tenant
	return lb
}

// answers dials addr and returns the first line the member behind it
// writes ("" when the connection is refused or closed at once).
func answers(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	// A fresh namespace's IPv6 loopback address is, now and then, briefly
	// unroutable right after it was added (ENETUNREACH; seen under load):
	// dial again for up to 2 s.
	for tries := 0; errors.Is(err, syscall.ENETUNREACH) && tries < 100; tries++ {
		time.Sleep(20 * time.Millisecond)
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
	}
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 16)
	n, _ := c.Read(b)
	return string(b[:n])
}

// TestSteeredListeners: with Config.Steer, TCP listeners have no socket
// of their own. Their addresses are steered to one socket per tenant and
// address family, each connection reaches the load balancer it was
// addressed to, an address nobody listens on is refused, a listener that
// moves to another tenant moves to that tenant's socket, and the sockets
// close with their last listener.
func TestSteeredListeners(t *testing.T) {
	says := func(word string) *backend {
		return startBackend(t, "127.0.0.1", func(c net.Conn) { c.Write([]byte(word)) })
	}
	// Members live in this test's namespace, where the proxy dials.
	a1, a2, b1 := says("a1"), says("a2"), says("b1")
	netnstest.Run(t, []string{"192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32", "192.0.2.9/32", "2001:db8::1/128"}, func() {
		st, err := steer.Open(1024)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		p, _ := newProxy(t, Config{Steer: st})
		defer p.Close()
		apply := func(lbs ...*pb.LoadBalancer) {
			t.Helper()
			if err := p.Update(steeredObjects(lbs...), 1); err != nil {
				t.Fatalf("Update: %v", err)
			}
		}
		web := tenantLB("acme", "web", "192.0.2.1", 80, a1.addr)
		api := tenantLB("acme", "api", "192.0.2.2", 80, a2.addr)
		db := tenantLB("bolt", "db", "192.0.2.3", 80, b1.addr)
		db.Listeners = append(db.Listeners, &pb.Listener{Port: 5432, Protocol: "tcp", Pool: "app"})
		db6 := tenantLB("bolt", "db6", "2001:db8::1", 80, b1.addr)
		apply(web, api, db, db6)

		want := map[string]string{"192.0.2.1:80": "a1", "192.0.2.2:80": "a2", "192.0.2.3:80": "b1", "192.0.2.3:5432": "b1", "[2001:db8::1]:80": "b1"}
		for addr, word := range want {
			if got := answers(t, addr); got != word {
				t.Errorf("%s answered %q; want %q", addr, got, word)
			}
		}
		p.mu.Lock()
		shared, own := len(p.steering.shared), 0
		for _, s := range p.sockets {
			if s.tcp != nil {
				own++
			}
		}
		p.mu.Unlock()
		if shared != 3 || own != 0 {
			t.Errorf("%d shared sockets and %d of a listener's own; want 3 (acme, bolt, bolt over IPv6) and 0", shared, own)
		}
		for _, addr := range []string{"192.0.2.9:80", "192.0.2.1:81"} {
			if got := answers(t, addr); got != "" {
				t.Errorf("%s has no listener, but answered %q", addr, got)
			}
		}
		// The shared socket's own loopback address serves nothing.
		p.mu.Lock()
		sh := p.steering.shared[sharedKey{tenant: "acme"}].ln.Addr().String()
		p.mu.Unlock()
		expectRefused(t, sh)

		// 192.0.2.2:80 moves from acme to bolt in one change.
		moved := tenantLB("bolt", "api", "192.0.2.2", 80, b1.addr)
		apply(web, moved, db, db6)
		if got := answers(t, "192.0.2.2:80"); got != "b1" {
			t.Errorf("192.0.2.2:80 moved to bolt, but answered %q", got)
		}
		if got := answers(t, "192.0.2.1:80"); got != "a1" {
			t.Errorf("192.0.2.1:80 answered %q; want a1", got)
		}

		// A connection that reaches a tenant's socket for another
		// tenant's listener (an address steered to it before the listener
		// moved) is refused.
		p.mu.Lock()
		acme := p.steering.shared[sharedKey{tenant: "acme"}]
		p.mu.Unlock()
		if err := st.Add(netip.MustParseAddrPort("192.0.2.3:80"), acme.slot); err != nil {
			t.Fatal(err)
		}
		if got := answers(t, "192.0.2.3:80"); got != "" {
			t.Errorf("bolt's listener was reached through acme's socket and answered %q", got)
		}

		// Only bolt is left: acme's socket closes.
		apply(db)
		if got := answers(t, "192.0.2.1:80"); got != "" {
			t.Errorf("192.0.2.1:80 was removed, but answered %q", got)
		}
		if got := answers(t, "192.0.2.3:5432"); got != "b1" {
			t.Errorf("192.0.2.3:5432 answered %q; want b1", got)
		}
		p.mu.Lock()
		_, acmeOpen := p.steering.shared[sharedKey{tenant: "acme"}]
		shared = len(p.steering.shared)
		p.mu.Unlock()
		if acmeOpen || shared != 1 {
			t.Errorf("%d shared sockets open (acme's: %t); want bolt's alone", shared, acmeOpen)
		}
		p.Close()
		if got := answers(t, "192.0.2.3:5432"); got != "" {
			t.Errorf("the proxy is closed, but 192.0.2.3:5432 answered %q", got)
		}
	})
}
