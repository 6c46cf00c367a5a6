package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestCheapRequestFloodSlowsOnlyItsTenant: tenant b floods its listener
// with cheap requests (a route to a member, nothing a sub-budget
// charges) from 48 keep-alive connections, as fast as they are
// answered: without a host CPU budget that takes every core of the
// machine and a's latency with it. The accountant bills the process's
// CPU to b by its requests, b waits at its gate once in debt, and a's
// p99 stays near its quiet baseline.
func TestCheapRequestFloodSlowsOnlyItsTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	member := startHTTPMember(t)
	// a may use a core (the host's default here); b a tenth of one
	// (its quotas.cpuMillicores).
	cpu := cpubudget.New(cpubudget.Options{HostMillicores: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cpu.Run(ctx)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil), CPU: cpu})
	port := freePort(t)
	objs := twoTenants(httpLB("a", "plain", "127.0.0.2", port, member), httpLB("b", "flood", "127.0.0.3", port, member))
	for _, o := range objs {
		if tn := o.GetTenant(); tn.GetName() == "b" {
			tn.Quotas = &pb.Quotas{CpuMillicores: 100}
		}
	}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	urlA := "http://" + vipAddr("127.0.0.2", port) + "/a"
	urlB := "http://" + vipAddr("127.0.0.3", port) + "/b"

	latencies(t, client, urlA, 50) // warm up
	quiet := latencies(t, client, urlA, 400)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served atomic.Int64
	for range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(urlB)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				served.Add(1)
			}
		}()
	}
	b := cpu.Tenant("b")
	eventually(t, "tenant b's flood to run", func() bool { return served.Load() > 500 })
	start, before := time.Now(), served.Load()
	abused := latencies(t, client, urlA, 400)
	rate := float64(served.Load()-before) / time.Since(start).Seconds()
	close(stop)
	wg.Wait()

	qp50, qp99, ap50, ap99 := pct(quiet, 50), pct(quiet, 99), pct(abused, 50), pct(abused, 99)
	sb, sa := b.HostStat(), cpu.Tenant("a").HostStat()
	t.Logf("tenant a quiet p50 %v p99 %v; with b's flood p50 %v p90 %v p95 %v p99 %v; b served %.0f requests a second, charged %v (%d throttles, held %v); a charged %v (%d throttles)",
		qp50, qp99, ap50, pct(abused, 90), pct(abused, 95), ap99, rate, sb.Spent, sb.Throttles, sb.Throttled, sa.Spent, sa.Throttles)
	slack := 50 * time.Millisecond
	if raceEnabled {
		slack = 100 * time.Millisecond
	}
	if limit := max(2*qp99, qp99+slack); ap99 > limit {
		t.Errorf("tenant a's p99 went from %v to %v (limit %v)", qp99, ap99, limit)
	}
	if sb.Throttles == 0 {
		t.Errorf("tenant b was never held at its budget")
	}
	if sa.Throttles != 0 {
		t.Errorf("tenant a was throttled %d times", sa.Throttles)
	}
	if sb.Millicores != 100 || sa.Millicores != 1000 {
		t.Errorf("budgets of b %d and a %d millicores, want 100 (its quota) and 1000 (the host's default)", sb.Millicores, sa.Millicores)
	}
	if sb.Spent <= sa.Spent {
		t.Errorf("b charged %v, a %v: want b's flood billed to b", sb.Spent, sa.Spent)
	}
}
