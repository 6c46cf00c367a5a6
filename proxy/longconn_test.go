package proxy

import (
	"io"
	"net"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// named serves a connection by writing name, then echoing.
func named(name string) func(net.Conn) {
	return func(c net.Conn) {
		if _, err := io.WriteString(c, name); err != nil {
			return
		}
		echo(c)
	}
}

// dialNamed connects to addr and returns the connection and the name of
// the member that answered.
func dialNamed(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	buf := make([]byte, 1)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read the member's name: %v", err)
	}
	return c, string(buf)
}

// A long-lived connection (a Kubernetes watch through a tcp or
// tls-passthrough listener) is never cut by the configuration: it
// survives changes of its pool and load balancer, and when its member
// leaves the pool it drains (keeps flowing until either end closes it)
// while new connections go to the members that remain. The drain timeout
// is 200ms here: a connection cut by it would fail the later round trips.
func TestLongConnectionsSurviveChangesAndDrainWhenTheirMemberLeaves(t *testing.T) {
	a := startBackend(t, "127.0.0.1", named("A"))
	b := startBackend(t, "127.0.0.1", named("B"))
	p, _ := newProxy(t, Config{})
	port, other := freePort(t), freePort(t)
	addr := vipAddr("127.0.0.2", port)
	lb := l4LB("api", "127.0.0.2", port, "tcp", a.addr)
	lb.Listeners[0].IdleTimeout = dur(time.Hour)
	update(t, p, lb)
	watch, name := dialNamed(t, addr)
	if name != "A" {
		t.Fatalf("first connection went to %s", name)
	}
	alive := func(step string) {
		t.Helper()
		if err := roundTrip(watch, []byte(step)); err != nil {
			t.Fatalf("the long-lived connection broke after %s: %v", step, err)
		}
	}
	alive("start")

	// Changes of the pool and of the load balancer around it.
	lb = clone(lb)
	lb.Pools["app"].Members = append(lb.Pools["app"].Members, &pb.Member{Address: b.addr})
	lb.Pools["app"].Algorithm = "least-request"
	lb.Pools["app"].ConnectTimeout = dur(2 * time.Second)
	update(t, p, lb)
	lb = clone(lb)
	lb.Listeners = append(lb.Listeners, &pb.Listener{Port: uint32(other), Protocol: "tcp", Pool: "app"})
	update(t, p, lb)
	time.Sleep(4 * p.cfg.DrainTimeout)
	alive("pool and listener changes")

	// A leaves the pool: new connections go to B, the old one drains.
	lb = clone(lb)
	lb.Pools["app"].Members = []*pb.Member{{Address: b.addr}}
	update(t, p, lb)
	for i := range 5 {
		if _, name := dialNamed(t, addr); name != "B" {
			t.Fatalf("new connection %d after A left went to %s", i, name)
		}
	}
	time.Sleep(4 * p.cfg.DrainTimeout)
	alive("its member left the pool")

	// The member ending the connection ends it for the client too.
	a.close()
	_ = watch.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := watch.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes after the member closed the connection", n)
	}
}

// With healthCheck.closeOnDown, a member's established connections end
// once its check takes it down (clients reconnect to a member that is
// up); without it they drain. The check probes a port of its own, so the
// connection's port keeps serving while the check fails.
func TestCloseOnDownEndsConnectionsOfAMemberTakenDown(t *testing.T) {
	for _, closeOnDown := range []bool{true, false} {
		t.Run(map[bool]string{true: "closeOnDown", false: "drain"}[closeOnDown], func(t *testing.T) {
			checkPort := freePort(t)
			checked, err := net.Listen("tcp", vipAddr("127.0.0.5", checkPort))
			if err != nil {
				t.Fatal(err)
			}
			defer checked.Close()
			go func() {
				for {
					c, err := checked.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			a := startBackend(t, "127.0.0.5", named("A"))
			p, _ := newProxy(t, Config{})
			port := freePort(t)
			lb := l4LB("api", "127.0.0.2", port, "tcp", a.addr)
			lb.Listeners[0].IdleTimeout = dur(time.Hour)
			lb.Pools["app"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Port: uint32(checkPort),
				Interval: dur(100 * time.Millisecond), Timeout: dur(100 * time.Millisecond), Fall: 1, CloseOnDown: closeOnDown}
			update(t, p, lb)
			conn, name := dialNamed(t, vipAddr("127.0.0.2", port))
			if name != "A" {
				t.Fatalf("connected to %s", name)
			}
			if err := roundTrip(conn, []byte("up")); err != nil {
				t.Fatal(err)
			}

			checked.Close() // the check fails; the member's data port still serves
			start := time.Now()
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if closeOnDown {
				if n, err := conn.Read(make([]byte, 1)); err == nil {
					t.Fatalf("read %d bytes: the connection of a member taken down stays open", n)
				}
				t.Logf("closed %s after the check's port closed", time.Since(start).Round(time.Millisecond))
				return
			}
			eventually(t, "member A down", func() bool {
				ms := p.Members(lb.Tenant + "/" + lb.Name)
				return len(ms) == 1 && !ms[0].Healthy
			})
			// A connection looks at its member's check every downPoll:
			// the absence of a close is shown by two looks after it.
			time.Sleep(2 * downPoll)
			if err := roundTrip(conn, []byte("still")); err != nil {
				t.Fatalf("without closeOnDown the connection of a member taken down was cut: %v", err)
			}
		})
	}
}
