package health

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// tarpit accepts connections and never answers, holding them until the
// test ends.
func tarpit(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return netip.MustParseAddrPort(l.Addr().String())
}

// TestTarpitChecksDoNotDelayOtherTenants: tenant b has 400 HTTP checks
// against a tarpit with the longest timeout; tenant a's member, healthy at
// first, is marked down within fall x interval plus a little after it
// stops listening, and comes back as quickly.
func TestTarpitChecksDoNotDelayOtherTenants(t *testing.T) {
	r := NewRegistry(Options{}) // 256 checks in flight on the host
	defer r.Close()
	pit := tarpit(t)
	for i := range 400 {
		hc := &snapshot.HealthCheck{HTTP: true, Path: fmt.Sprintf("/slow/%d", i), Interval: time.Second, Timeout: time.Hour, Rise: 1, Fall: 1}
		defer r.Release(r.AcquireFor("b", pit, hc))
	}
	time.Sleep(1500 * time.Millisecond) // every one of b's checks is hanging now

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(l.Addr().String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hc := &snapshot.HealthCheck{Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 2, Fall: 3}
	a := r.AcquireFor("a", addr, hc)
	defer r.Release(a)
	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %v while b's checks hang (%+v)", what, within, a.Status())
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitFor("a's first check", 3*time.Second, func() bool { return !a.Status().LastCheck.IsZero() })
	if !a.Healthy() {
		t.Fatalf("a's listening member is down: %+v", a.Status())
	}
	l.Close()
	slack := 3 * time.Second
	waitFor("a's member down", time.Duration(hc.Fall)*hc.Interval+slack, func() bool { return !a.Healthy() })
}
