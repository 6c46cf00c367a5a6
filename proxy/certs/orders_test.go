package certs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/certs/pebbletest"
)

// The order limiter: a tenant starts at most perHour orders an hour
// (a burst, then one every hour/perHour), whatever its names; a failing
// name waits FirstOrderBackoff, doubling per failure up to
// MaxOrderBackoff; another tenant is never held back.
func TestOrderLimiter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newOrderLimiter(3)
	for i := range 3 {
		if err := l.admit("b", fmt.Sprintf("n%d.b.example", i), t0); err != nil {
			t.Fatalf("order %d within the burst: %v", i+1, err)
		}
	}
	err := l.admit("b", "n3.b.example", t0)
	if !errors.Is(err, ErrOrderLimited) || !strings.Contains(err.Error(), "the next may start in 20m0s") || !strings.Contains(err.Error(), "--acme-orders-per-tenant") {
		t.Fatalf("fourth order of the hour: %v", err)
	}
	if err := l.admit("a", "shop.a.example", t0); err != nil {
		t.Fatalf("another tenant's order: %v", err)
	}
	if err := l.admit("b", "n3.b.example", t0.Add(20*time.Minute)); err != nil {
		t.Fatalf("an order once a third of the hour passed: %v", err)
	}

	// Backoff of a failing name: 1m, 2m, 4m, ... capped at a day.
	l = newOrderLimiter(1000)
	now := t0
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute} {
		if err := l.admit("b", "bad.b.example", now); err != nil {
			t.Fatalf("order %d: %v", i+1, err)
		}
		l.done("bad.b.example", true, now)
		if err := l.admit("b", "bad.b.example", now.Add(want-time.Second)); !errors.Is(err, ErrOrderLimited) || !strings.Contains(err.Error(), "failed") {
			t.Fatalf("order %d+1 before %s: %v", i+1, want, err)
		}
		now = now.Add(want)
	}
	for range 20 {
		l.done("bad.b.example", true, now)
	}
	if b := l.names["bad.b.example"]; b.next.Sub(now) != MaxOrderBackoff {
		t.Errorf("backoff after many failures %s, want %s", b.next.Sub(now), MaxOrderBackoff)
	}
	if err := l.admit("b", "good.b.example", now); err != nil {
		t.Errorf("another name of the tenant: %v", err)
	}
	l.done("bad.b.example", false, now)
	if err := l.admit("b", "bad.b.example", now); err != nil {
		t.Errorf("a name that succeeded since: %v", err)
	}
}

// Against a real ACME server: tenant b, at one order an hour, gets one of
// its two names and is told when the other's order may start; tenant a's
// name is issued all the same.
func TestACMEOrdersLimitedPerTenant(t *testing.T) {
	ports := pebbletest.FreePorts(t, 2)
	httpAddr, tlsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports[0], TLSPort: ports[1]})
	store := newMemStore()
	m, err := New(Config{Store: store, Host: "h1", CA: peb.Directory, Roots: peb.Roots, Logger: testLogger(t), OrdersPerHour: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Close() })
	go m.Run(ctx)
	hs := &http.Server{Handler: m.HTTPChallengeHandler()}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	// The CA validates through HTTP-01 or TLS-ALPN-01 at one port each;
	// b's listener answers TLS-ALPN-01 for b's names, and HTTP-01 answers
	// every name.
	serveTLS(t, tlsAddr, m.Terminator(greeter{}), listener("b", true, nil, "one.b.example", "two.b.example"))

	objs := []*pb.Object{
		acmeTenant("a", 0, "a.example"), acmeLB("a", "web", "shop.a.example"),
		acmeTenant("b", 0, "b.example"), acmeLB("b", "web", "one.b.example", "two.b.example"),
	}
	var limited *pb.Certificate
	deadline := time.Now().Add(90 * time.Second)
	for {
		m.Update(store.objectsWith(objs...))
		one, two := store.cert("b", "one.b.example"), store.cert("b", "two.b.example")
		valid := 0
		for _, c := range []*pb.Certificate{one, two} {
			switch {
			case c.GetState() == StateValid:
				valid++
			case strings.Contains(c.GetLastError(), "ACME order rate limited"):
				limited = c
			}
		}
		if valid == 1 && limited != nil && store.cert("a", "shop.a.example").GetState() != StatePending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b: one=%v two=%v; a: %v", one, two, store.cert("a", "shop.a.example"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(limited.GetLastError(), "tenant b started its 1 ACME orders of the hour") {
		t.Errorf("b's limited name says %q", limited.GetLastError())
	}
	if c := store.cert("a", "shop.a.example"); c.GetState() != StateValid {
		t.Errorf("a's certificate held back by b's orders: %v", c)
	}
}
