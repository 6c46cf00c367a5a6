package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
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

// TestListenerTrustedProxies: trustedProxies is per listener. The same
// spoofed fields from 127.0.0.1 reach the member on a listener that trusts
// 127.0.0.0/8 and are replaced on one that trusts nobody (the default).
func TestListenerTrustedProxies(t *testing.T) {
	member := startHTTPMember(t)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil)})
	port := freePort(t)
	httpLB := func(name, vip string, trusted ...string) *pb.LoadBalancer {
		lb := l4LB(name, vip, port, "http", member)
		lb.Listeners[0].Pool = ""
		lb.Listeners[0].TrustedProxies = trusted
		lb.Routes = []*pb.Route{{Path: "/", Pool: "app"}}
		return lb
	}
	update(t, p, httpLB("plain", "127.0.0.2"), httpLB("behind", "127.0.0.3", "127.0.0.0/8"))
	ask := func(vip string) string {
		c, err := net.DialTimeout("tcp", vipAddr(vip, port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Real-IP: 10.6.6.6\r\nX-Forwarded-For: 10.6.6.9\r\nX-Request-Id: mine\r\n\r\n")
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := ask("127.0.0.2"); strings.Contains(got, "10.6.6.") || strings.Contains(got, "mine") || !strings.Contains(got, "xff=127.0.0.1;") {
		t.Errorf("untrusting listener forwarded the client's fields:\n%s", got)
	}
	if got := ask("127.0.0.3"); !strings.Contains(got, "real=10.6.6.6;") || !strings.Contains(got, "xff=10.6.6.9,127.0.0.1;") || !strings.Contains(got, "rid=mine;") {
		t.Errorf("trusting listener dropped a trusted proxy's fields:\n%s", got)
	}
}

// startHTTPMember serves the fields a request arrived with.
func startHTTPMember(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "real=%s;xff=%s;rid=%s;", r.Header.Get("X-Real-Ip"), strings.Join(r.Header.Values("X-Forwarded-For"), ","), r.Header.Get("X-Request-Id"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
