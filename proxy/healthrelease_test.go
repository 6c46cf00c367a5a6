package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// tarpits starts n listeners that accept connections and never answer;
// open counts the connections they hold (until the prober closes them).
func tarpits(t *testing.T, n int) (addrs []string, accepted, open *atomic.Int64) {
	t.Helper()
	accepted, open = new(atomic.Int64), new(atomic.Int64)
	var mu sync.Mutex
	var held []net.Conn
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				open.Add(1)
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
				go func() {
					defer open.Add(-1)
					_, _ = io.Copy(io.Discard, c) // until the prober closes
				}()
			}
		}()
		t.Cleanup(func() { l.Close() })
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return addrs, accepted, open
}

// TestDeletedLBChecksStopAtOnce: a tenant's load balancer whose HTTP
// checks hang on tarpits (the longest timeout) fills the tenant's budget
// of checks in flight. Once it is deleted, its checks end at once (their
// connections close) and the tenant's next load balancer is checked
// within a second or two, not after the dead checks time out.
func TestDeletedLBChecksStopAtOnce(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "127.0.0.1", echo)
	p, _ := newProxy(t, Config{})
	keep := l4LB("keep", "127.0.0.3", freePort(t), "tcp", be.addr) // the tenant's budget outlives pit
	pitAddrs, accepted, open := tarpits(t, 48)
	pit := l4LB("pit", "127.0.0.3", freePort(t), "tcp", pitAddrs...)
	pit.Pools["app"].HealthCheck = &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/"}, Interval: dur(10 * time.Second), Timeout: dur(10 * time.Second)}
	update(t, p, keep, pit)
	// The tenant's budget (MaxConcurrentChecks/8 = 32) is full of hanging
	// checks, the others wait for it.
	eventually(t, "the tarpits to hold the tenant's checks", func() bool { return accepted.Load() >= 32 })

	// A member with nothing listening: it is down once its first check ran.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	fresh := l4LB("fresh", "127.0.0.3", freePort(t), "tcp", closed)
	fresh.Pools["app"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, Interval: dur(100 * time.Millisecond), Timeout: dur(100 * time.Millisecond), Fall: 1}
	t0 := time.Now()
	update(t, p, keep, fresh)
	deadline := t0.Add(3 * time.Second)
	for {
		if ms := p.Members("acme/fresh"); len(ms) == 1 && !ms[0].Healthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new load balancer's first check did not run within %v of deleting the tarpitted one (%d tarpit connections open)", time.Since(t0), open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the new load balancer's first check ran %v after the update", time.Since(t0).Round(time.Millisecond))
	for time.Now().Before(deadline) && open.Load() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if n := open.Load(); n > 0 {
		t.Errorf("%d checks of the deleted load balancer still hold tarpit connections %v after the update", n, time.Since(t0))
	}
	if n := accepted.Load(); n > 48 {
		t.Errorf("the deleted load balancer's waiting checks ran after it was deleted: %d connections to 48 tarpits", n)
	}
}
