package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
)

// The receive windows of one tenant's QUIC connections grow, together,
// by at most their bound (Limits.H3WindowGrowthPerTenant, 4 MiB here; 32
// MiB by default): 24 connections upload 16 MiB each to a member that
// takes a first part fast (its socket buffers), then reads nothing for
// 30 s. Each window grows while the body is read fast, toward
// H3ConnWindow, and the tenant's growth stops at the bound; it is all
// given back once the connections end: at the clients' CONNECTION_CLOSE,
// or, when a loaded host drops that datagram, at the listener's idle
// timeout (5 s here; the clients' keep-alives hold the connections open
// until they close).
func TestHTTP3WindowGrowthPerTenant(t *testing.T) {
	const bound = 4 << 20
	p, target, _ := startH3Edited(t, Limits{H3WindowGrowthPerTenant: bound}, func(lb *pb.LoadBalancer) {
		lb.Listeners[0].IdleTimeout = dur(5 * time.Second)
	})
	const conns = 24
	body := strings.Repeat("w", 16<<20)
	url := "https://gw.acme.example:" + portOf(target) + "/up?sleep=30s"
	var clients []*h3Client
	var wg sync.WaitGroup
	for range conns {
		c := newH3Client(t, target)
		clients = append(clients, c)
		wg.Go(func() {
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	grown := func() int64 { return p.tenantBudget("acme").h3grown.Load() }
	var peak int64
	for deadline, last, since := time.Now().Add(15*time.Second), int64(-1), time.Now(); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		g := grown()
		peak = max(peak, g)
		if g != last {
			last, since = g, time.Now()
		} else if g > 0 && time.Since(since) > 2*time.Second {
			break
		}
	}
	stopped := p.tenantBudget("acme").h3stopped.Load()
	t.Logf("%d connections uploading to a member that stopped reading: their windows grew by %d bytes together (bound %d), %d growths refused", conns, peak, bound, stopped)
	if peak > bound || stopped == 0 {
		t.Errorf("the tenant's windows grew by %d bytes and %d growths were refused, want at most %d (the bound) and some refused", peak, stopped, bound)
	}
	// The operator sees the refusals on the listener.
	counted := refusedFor(p.metrics.(*metrics.Memory), RefusedTenantWindow)
	if counted < stopped {
		t.Errorf("%s refusals counted on the listener: %d, want the %d growths refused", RefusedTenantWindow, counted, stopped)
	}
	for _, c := range clients {
		c.tr.Close()
	}
	wg.Wait()
	for deadline := time.Now().Add(20 * time.Second); grown() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if g := grown(); g != 0 {
		t.Errorf("%d bytes of window growth still charged after the connections ended", g)
	}
}
