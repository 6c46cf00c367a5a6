package tenantbgp

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// BenchmarkRouteMemory reports what a host holds per accepted route: the
// session's Adj-RIB-In in gobgp, the relay's judgement and observation
// (the kernel's route is not counted). Run it with -benchtime 1x.
func BenchmarkRouteMemory(b *testing.B) {
	const n = 10000
	port := freePort(b)
	routes := &memRoutes{}
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: routes, PeerPort: port,
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	sp := startTenantSpeaker(b, "", port)
	for i := range n {
		sp.path(b, fmt.Sprintf("10.244.%d.%d/32", i/250, 1+i%250), false)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	before := heap()
	for b.Loop() {
		r.Update(kubeState(n, true))
		deadline := time.Now().Add(60 * time.Second)
		for len(routes.get()) < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d routes installed", len(routes.get()), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	after := heap()
	b.ReportMetric(float64(after-before)/n, "B/route")
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
