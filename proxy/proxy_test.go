package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

var _ Metrics = (*metrics.Memory)(nil)

func tcpKey(vip string, port int) snapshot.Key {
	return snapshot.Key{Addr: netip.MustParseAddrPort(vipAddr(vip, port)), Network: snapshot.TCP}
}

func (p *Proxy) socketAt(k snapshot.Key) *socket {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sockets[k]
}

func TestUpdateNoChanges(t *testing.T) {
	p, _ := newProxy(t, Config{})
	port := freePort(t)
	objs := labObjects(l4LB("a", "127.0.0.2", port, "tcp", "127.0.0.1:9"))
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(labObjects(l4LB("a", "127.0.0.2", port, "tcp", "127.0.0.1:9")), 2); !errors.Is(err, ErrNoChanges) {
		t.Errorf("same state again: %v, want ErrNoChanges", err)
	}
	p.Close()
	if err := p.Update(objs, 3); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

func TestConfigSwapKeepsConnections(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	be2 := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	port, port2 := freePort(t), freePort(t)
	a := l4LB("a", "127.0.0.2", port, "tcp", be.addr)
	update(t, p, a)
	sock := p.socketAt(tcpKey("127.0.0.2", port))
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("before")); err != nil {
		t.Fatal(err)
	}
	changes := []struct {
		name string
		lbs  func() []*pb.LoadBalancer
	}{
		{"another load balancer added", func() []*pb.LoadBalancer {
			return []*pb.LoadBalancer{a, l4LB("b", "127.0.0.3", port2, "tcp", be2.addr)}
		}},
		{"members of its pool changed", func() []*pb.LoadBalancer {
			a2 := clone(a)
			a2.Pools["app"].Members = append(a2.Pools["app"].Members, &pb.Member{Address: be2.addr})
			return []*pb.LoadBalancer{a2}
		}},
		{"the member its connection uses removed", func() []*pb.LoadBalancer {
			a2 := clone(a)
			a2.Pools["app"].Members[0].Address = be2.addr
			return []*pb.LoadBalancer{a2}
		}},
		{"its idle timeout changed", func() []*pb.LoadBalancer {
			a2 := clone(a)
			a2.Listeners[0].IdleTimeout = dur(time.Hour)
			return []*pb.LoadBalancer{a2}
		}},
	}
	for _, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			update(t, p, ch.lbs()...)
			if got := p.socketAt(tcpKey("127.0.0.2", port)); got != sock {
				t.Fatal("the listening socket was replaced")
			}
			if err := roundTrip(c, []byte("after "+ch.name)); err != nil {
				t.Fatalf("connection broken: %v", err)
			}
			n, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if err := roundTrip(n, []byte("new connection")); err != nil {
				t.Fatalf("new connection: %v", err)
			}
		})
	}
}

func TestRemovedListenerDrains(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{DrainTimeout: 300 * time.Millisecond})
	port := freePort(t)
	update(t, p, l4LB("a", "127.0.0.2", port, "tcp", be.addr))
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("before")); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	update(t, p)
	if _, err := net.Dial("tcp", vipAddr("127.0.0.2", port)); err == nil {
		t.Error("a removed listener still accepts")
	}
	if err := roundTrip(c, []byte("draining")); err != nil {
		t.Fatalf("connection cut before the drain timeout: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data after the drain")
	}
	if d := time.Since(removed); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before the 300ms drain timeout", d)
	}
}

func TestListenerChangesHands(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{DrainTimeout: 200 * time.Millisecond})
	port := freePort(t)
	update(t, p, l4LB("old", "127.0.0.2", port, "tcp", be.addr))
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("x")); err != nil {
		t.Fatal(err)
	}
	update(t, p, l4LB("new", "127.0.0.2", port, "tcp", be.addr))
	n, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the old load balancer's connection outlived the drain")
	}
	if err := roundTrip(n, []byte("y")); err != nil {
		t.Fatalf("the new load balancer's connection: %v", err)
	}
}

func TestStatus(t *testing.T) {
	port := freePort(t)
	// Something else holds 127.0.0.4:port.
	blocker, err := net.Listen("tcp", vipAddr("127.0.0.4", port))
	if err != nil {
		t.Fatal(err)
	}
	// The retry timer stays out of the way: Update retries here.
	p, _ := newProxy(t, Config{BindRetry: time.Hour})
	web := &pb.LoadBalancer{Name: "web", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Routes:    []*pb.Route{{Host: "shop.acme.example", Pool: "app"}},
		Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: "127.0.0.1:9"}}}},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.5"},
	}
	blocked := l4LB("blocked", "127.0.0.4", port, "tcp", "127.0.0.1:9")
	broken := l4LB("broken", "127.0.0.6", port, "tcp", "127.0.0.1:9", "nonsense")
	objs := labObjects(web, blocked, broken, l4LB("fine", "127.0.0.7", port, "tcp", "127.0.0.1:9"))
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"acme/web":     "listeners[0]: http listeners need the L7 handler, which this host does not run; 127.0.0.5:" + fmt.Sprint(port) + "/tcp is not open",
		"acme/blocked": "listeners[0]: cannot listen on 127.0.0.4:" + fmt.Sprint(port) + "/tcp: listen tcp4 127.0.0.4:" + fmt.Sprint(port) + ": bind: address already in use; retried with backoff (free the port or move the listener)",
		"acme/broken":  `pools.app.members[1]: "nonsense" is not IP:port (like 10.20.0.11:30080 or [2001:db8::1]:80); member skipped`,
		"acme/fine":    "",
	}
	check := func(want map[string]string) {
		t.Helper()
		st := p.Status()
		if len(st) != len(want) {
			t.Errorf("status %v", st)
		}
		for lb, w := range want {
			var got []string
			for _, pr := range st[lb] {
				got = append(got, pr.Field+": "+pr.Reason)
			}
			if g := strings.Join(got, "\n"); g != w {
				t.Errorf("%s: got %q\nwant %q", lb, g, w)
			}
		}
	}
	check(want)
	if err := p.Update(objs, 2); !errors.Is(err, ErrNoChanges) {
		t.Errorf("retrying a still blocked listener: %v, want ErrNoChanges", err)
	}
	blocker.Close()
	if err := p.Update(objs, 3); err != nil {
		t.Errorf("the listener that opened now: %v", err)
	}
	want["acme/blocked"] = ""
	check(want)
}

// recordingHandler is an L7 handler that echoes lines and records what
// the proxy hands it.
type recordingHandler struct {
	served chan *ListenerSnapshot
	ended  chan bool
}

func (h *recordingHandler) ServeConn(ctx context.Context, c net.Conn, current func() *ListenerSnapshot) {
	h.served <- current()
	buf := make([]byte, 64)
	go func() {
		<-ctx.Done()
		h.ended <- current() == nil
	}()
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		c.Write(buf[:n])
	}
}

func TestL7HandlerSeam(t *testing.T) {
	h := &recordingHandler{served: make(chan *ListenerSnapshot, 1), ended: make(chan bool, 1)}
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{HTTP: h, DrainTimeout: 100 * time.Millisecond})
	port := freePort(t)
	web := &pb.LoadBalancer{Name: "web", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Routes:    []*pb.Route{{Host: "shop.acme.example", Pool: "app"}},
		Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: be.addr}}}},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.5"},
	}
	update(t, p, web)
	if st := p.Status()["acme/web"]; len(st) != 0 {
		t.Fatalf("problems %v", st)
	}
	c, err := net.Dial("tcp", vipAddr("127.0.0.5", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("GET")); err != nil {
		t.Fatal(err)
	}
	l := <-h.served
	r := l.Routes.Match("shop.acme.example", "/")
	if r == nil {
		t.Fatal("the handler's listener has no route for shop.acme.example")
	}
	pool := l.Pool(r.Pool)
	if m := pool.Pick([]byte{127, 0, 0, 1}); m == nil || m.Addr.String() != be.addr {
		t.Fatalf("picked %v, want %s", m, be.addr)
	}
	update(t, p)
	select {
	case gone := <-h.ended:
		if !gone {
			t.Error("current() still returns the removed listener")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end when its listener was removed")
	}
}

func TestTenantConnectionLimit(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, m := newProxy(t, Config{Limits: Limits{MaxConnectionsPerTenant: 2}})
	port := freePort(t)
	update(t, p, l4LB("a", "127.0.0.2", port, "tcp", be.addr), l4LB("b", "127.0.0.3", port, "tcp", be.addr))
	for _, vip := range []string{"127.0.0.2", "127.0.0.3"} {
		c, err := net.Dial("tcp", vipAddr(vip, port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := roundTrip(c, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	expectRefused(t, vipAddr("127.0.0.2", port))
	var refused int64
	for _, l := range m.Report().Listeners {
		refused += l.Refused[RefusedTenantLimit]
	}
	if refused != 1 {
		t.Errorf("%d tenant-limit refusals", refused)
	}
}

func TestHealthStateSurvivesSwaps(t *testing.T) {
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{Limits: Limits{EjectAfter: 1, EjectFor: time.Hour}})
	port := freePort(t)
	dead := deadAddr(t)
	a := l4LB("a", "127.0.0.2", port, "tcp", dead, be.addr)
	update(t, p, a)
	key := tcpKey("127.0.0.2", port)
	// Round robin tries the dead member first; one failure ejects it.
	c, err := net.Dial("tcp", vipAddr("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("x")); err != nil {
		t.Fatal(err)
	}
	deadUsable := func() bool {
		for _, m := range p.current.Load().listener(key).Backend().Members() {
			if m.Addr.String() == dead {
				return m.Usable()
			}
		}
		t.Fatal("dead member not in the pool")
		return false
	}
	if deadUsable() {
		t.Fatal("the dead member was not ejected")
	}
	before := p.current.Load().listener(key).Backend()
	a2 := clone(a)
	a2.Pools["app"].Members = append(a2.Pools["app"].Members, &pb.Member{Address: "127.0.0.1:1"})
	update(t, p, a2, l4LB("b", "127.0.0.3", port, "tcp", be.addr))
	if p.current.Load().listener(key).Backend() == before {
		t.Fatal("the changed pool was not rebuilt")
	}
	if deadUsable() {
		t.Error("the ejection was lost when the pool was rebuilt")
	}
}
