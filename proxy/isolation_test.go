package proxy

import (
	"net"
	"os"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count descriptors: %v", err)
	}
	return len(ents)
}

// TestNeverDialsOwnListeners: a member equal to a listener of the snapshot
// (its own, or another load balancer's) is never
// dialled, by traffic or by health checks: each client is refused at once,
// the listeners accept exactly the clients' connections and no descriptor
// is left behind.
func TestNeverDialsOwnListeners(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, m := newProxy(t, Config{})
	port := freePort(t)
	self := l4LB("self", "127.0.0.2", port, "tcp", vipAddr("127.0.0.2", port))
	self.Listeners[0].MaxConnections = 64 // bounds the loop the old code made
	other := l4LB("other", "127.0.0.3", port, "tcp", vipAddr("127.0.0.2", port), vipAddr("127.0.0.4", port))
	other.Listeners[0].MaxConnections = 64
	other.Pools["app"].HealthCheck = &pb.HealthCheck{Interval: dur(50 * time.Millisecond), Timeout: dur(20 * time.Millisecond)}
	good := l4LB("good", "127.0.0.4", port, "tcp", be.addr)
	update(t, p, self, other, good)

	before := openFDs(t)
	const clients = 10
	for range clients {
		expectRefused(t, vipAddr("127.0.0.2", port))
		expectRefused(t, vipAddr("127.0.0.3", port))
	}
	time.Sleep(300 * time.Millisecond) // several health check intervals
	opened := map[string]int64{}
	for _, l := range m.Report().Listeners {
		opened[l.LB] += l.Opened
		if l.LB != "acme/good" && l.Refused[RefusedNoMember] != clients {
			t.Errorf("%s: %d no-member refusals, want %d", l.LB, l.Refused[RefusedNoMember], clients)
		}
	}
	for _, lb := range []string{"acme/self", "acme/other"} {
		if opened[lb] != clients {
			t.Errorf("%s accepted %d connections for %d clients: the proxy dialled its own listener", lb, opened[lb], clients)
		}
	}
	eventually(t, "descriptors back to where they were", func() bool { return openFDs(t) <= before+2 })
	for _, mh := range p.Members("acme/other") {
		if mh.Healthy {
			t.Errorf("member %s (a VIP) is usable", mh.Addr)
		}
	}
	// The load balancer beside them still serves.
	c, err := net.DialTimeout("tcp", vipAddr("127.0.0.4", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("still here")); err != nil {
		t.Fatal(err)
	}
}
