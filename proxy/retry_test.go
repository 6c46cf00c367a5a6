package proxy

import (
	"fmt"
	"net"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// TestChangeRetriesOnlyTheListenersItTouches: with 20 listeners that
// cannot open (their ports are taken), a change of another load balancer
// tries to open its own listener only, not the 20 again, and sets its own
// status alone; a change of one blocked load balancer tries its listener
// alone; the retry timer tries
// them all and opens the one whose port was freed, and the changes in
// between do not put the timer's backoff back to its start.
func TestChangeRetriesOnlyTheListenersItTouches(t *testing.T) {
	const blocked = 20
	port := freePort(t)
	var blockers []net.Listener
	var lbs []*pb.LoadBalancer
	for i := range blocked {
		vip := fmt.Sprintf("127.0.3.%d", i+1)
		b, err := net.Listen("tcp", vipAddr(vip, port))
		if err != nil {
			t.Fatal(err)
		}
		blockers = append(blockers, b)
		t.Cleanup(func() { b.Close() })
		lbs = append(lbs, l4LB(fmt.Sprintf("blocked-%d", i), vip, port, "tcp", "127.0.0.1:9"))
	}
	// The timer is held back at first so that only changes try.
	p, _ := newProxy(t, Config{BindRetry: time.Hour, MaxBindRetry: time.Hour})
	if err := p.Update(labObjects(lbs...), 1); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	binds, missing := p.binds, p.missing
	p.mu.Unlock()
	if binds != blocked || missing != blocked {
		t.Fatalf("first state: %d attempts, %d missing; want %d and %d", binds, missing, blocked, blocked)
	}

	// change applies lb and returns the attempts to open a listener and
	// the load balancers whose status was set again.
	change := func(rev uint64, lb *pb.LoadBalancer) (int, []string) {
		t.Helper()
		p.mu.Lock()
		before := p.binds
		p.mu.Unlock()
		touched, err := p.ApplyChange(snapshot.Change{Put: []*pb.Object{{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}}}}, rev)
		if err != nil {
			t.Fatalf("revision %d: %v", rev, err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.binds - before, touched
	}
	if n, touched := change(2, l4LB("fine", "127.0.4.1", port, "tcp", "127.0.0.1:9")); n != 1 || len(touched) != 1 {
		t.Errorf("a new load balancer: %d attempts to open a listener, statuses of %v set; want 1 attempt (its own) and its status alone", n, touched)
	}
	moved := l4LB("blocked-3", "127.0.3.4", port, "tcp", "127.0.0.1:9", "127.0.0.1:10")
	if n, touched := change(3, moved); n != 1 || len(touched) != 1 {
		t.Errorf("a blocked load balancer's member change: %d attempts, statuses of %v set; want 1 (its listener) and its status alone", n, touched)
	}
	if st := p.Status()["acme/blocked-3"]; len(st) != 1 {
		t.Errorf("blocked-3 still blocked: status %v", st)
	}

	// The timer tries them all: one port freed, its listener opens.
	blockers[7].Close()
	p.mu.Lock()
	p.cfg.BindRetry, p.cfg.MaxBindRetry = 50*time.Millisecond, 400*time.Millisecond
	p.scheduleRetry(true)
	p.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for len(p.Status()["acme/blocked-7"]) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("blocked-7 not opened by the retry timer after its port was freed: %v", p.Status()["acme/blocked-7"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Let the backoff grow, then change something: the delay stays.
	deadline = time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		d := p.retry.delay
		p.mu.Unlock()
		if d >= 200*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry delay is %s after 30s; want it doubled to 200ms or more", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	change(4, l4LB("fine", "127.0.4.1", port, "tcp", "127.0.0.1:9", "127.0.0.1:11"))
	p.mu.Lock()
	d, missing := p.retry.delay, p.missing
	p.mu.Unlock()
	if d < 200*time.Millisecond {
		t.Errorf("after a change of another load balancer the retry delay is %s; want the backoff kept (200ms or more)", d)
	}
	if missing != blocked-1 {
		t.Errorf("%d listeners missing, want %d", missing, blocked-1)
	}
}
