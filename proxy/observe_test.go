package proxy

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// eventLog collects the proxy's events.
type eventLog struct {
	mu  sync.Mutex
	evs []*pb.Event
}

func (l *eventLog) add(ev *pb.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) count(typ string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func (l *eventLog) has(typ, lb string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs {
		if ev.Type == typ && ev.LoadBalancer == lb {
			return true
		}
	}
	return false
}

// A listener whose port is busy is retried with backoff and opens once
// the port is freed, without any new state; the observation and the
// events follow it.
func TestBusyListenerIsRetriedUntilThePortIsFree(t *testing.T) {
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.2:%d", port)
	busy, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	be := startBackend(t, "127.0.0.1", echo)

	var events eventLog
	p, _ := newProxy(t, Config{Events: events.add, BindRetry: 20 * time.Millisecond, MaxBindRetry: 100 * time.Millisecond})
	plane := watchPlane(t, p)
	update(t, p, l4LB("web", "127.0.0.2", port, "tcp", be.addr))
	eventually(t, "the busy listener observed not ready", func() bool { r, ok := plane.ready("acme/web"); return ok && r != "" })

	if ps := p.Status()["acme/web"]; len(ps) != 1 || !strings.Contains(ps[0].Reason, "cannot listen on "+addr) {
		t.Fatalf("problems with a busy port: %v", ps)
	}
	var h pb.HostObservation
	p.Observe(observe.Filter{LB: "acme/web"}, &h)
	if len(h.Listeners) != 1 || h.Listeners[0].Bound || !strings.Contains(h.Listeners[0].Error, "address already in use") || h.Listeners[0].Since == nil {
		t.Fatalf("observed listener with a busy port: %v", h.Listeners)
	}
	if !events.has(observe.EventBindFailed, "acme/web") {
		t.Fatal("no bind-failed event")
	}
	// Retries keep failing while the port is busy, without repeating the
	// event.
	time.Sleep(300 * time.Millisecond)
	if n := events.count(observe.EventBindFailed); n != 1 {
		t.Errorf("%d bind-failed events for one failing listener", n)
	}

	busy.Close()
	deadline := time.Now().Add(20 * time.Second)
	for len(p.Status()["acme/web"]) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("listener not opened after the port was freed: %v", p.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	h = pb.HostObservation{}
	p.Observe(observe.Filter{}, &h)
	if len(h.Listeners) != 1 || !h.Listeners[0].Bound || h.Listeners[0].Error != "" {
		t.Fatalf("observed listener after the retry: %v", h.Listeners)
	}
	if !events.has(observe.EventBindOK, "acme/web") {
		t.Error("no bind-ok event")
	}
	eventually(t, "the observed state ready once the listener opened", func() bool { r, ok := plane.ready("acme/web"); return ok && r == "" })
}

// Member health as the checks see it: observed per pool with the reason,
// and a down member is an event.
func TestObserveMemberHealth(t *testing.T) {
	port := freePort(t)
	be := startBackend(t, "127.0.0.1", echo)
	dead := deadAddr(t)
	var events eventLog
	p, _ := newProxy(t, Config{Events: events.add})
	lb := l4LB("web", "127.0.0.3", port, "tcp", be.addr, dead)
	lb.Pools["app"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Interval: dur(50 * time.Millisecond), Timeout: dur(time.Second)}
	update(t, p, lb)

	eventually(t, "the dead member seen down", func() bool {
		var h pb.HostObservation
		p.Observe(observe.Filter{Tenant: "acme"}, &h)
		if len(h.Pools) != 1 || len(h.Pools[0].Members) != 2 {
			return false
		}
		for _, m := range h.Pools[0].Members {
			if m.Address == dead && !m.Healthy && m.Down && strings.HasPrefix(m.Reason, "health check fails") && m.LastCheck != nil {
				return true
			}
		}
		return false
	})
	eventually(t, "a member-down event", func() bool { return events.has(observe.EventMemberDown, "acme/web") })
	var h pb.HostObservation
	p.Observe(observe.Filter{Tenant: "other"}, &h)
	if len(h.Pools)+len(h.Listeners)+len(h.Problems) != 0 {
		t.Errorf("another tenant's filter sees %v", &h)
	}
}

// TestReadiness: a load balancer with a live member is ready, and so is
// one without members (every host refuses its connections alike); one
// whose listener cannot be compiled is not.
func TestReadiness(t *testing.T) {
	port := freePort(t)
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	broken := l4LB("broken", "127.0.0.4", port, "tcp", be.addr)
	broken.Listeners[0].Pool = "missing"
	update(t, p, l4LB("up", "127.0.0.2", port, "tcp", be.addr), l4LB("off", "127.0.0.3", port, "tcp"), broken)
	r := p.Readiness()
	if r["acme/up"] != "" || r["acme/off"] != "" || r["acme/broken"] == "" {
		t.Fatalf("readiness %q", r)
	}
}
