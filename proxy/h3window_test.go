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
// until they close), which quic-go stretches to three probe timeouts
// (RFC 9000 section 10.1).
//
// Nothing here is timed: a loaded 2-core host under the race detector
// measures round trips of 1.5-4.5 s (the clients' datagrams wait in the
// socket's receive buffer for a CPU), its first growth can come 11 s
// after the uploads start, and a connection whose CONNECTION_CLOSE it
// dropped ends at three probe timeouts of srtt+4*rttvar, 16-20 s after
// its client closed and more at higher loads. The test waits for the
// events themselves: a refusal, then the end of every connection.
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
		// The uploads last until the clients are closed below.
		c.Timeout = 0
		clients = append(clients, c)
		wg.Go(func() {
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	tb := p.tenantBudget("acme")
	grown := func() int64 { return tb.h3grown.Load() }
	// The growth is sampled until the bound has refused growths for a
	// second (or the growth went past the bound).
	var peak int64
	var refused time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		peak = max(peak, grown())
		if peak > bound {
			break
		}
		if tb.h3stopped.Load() > 0 {
			if refused.IsZero() {
				refused = time.Now()
			} else if time.Since(refused) > time.Second {
				break
			}
		}
	}
	stopped := tb.h3stopped.Load()
	t.Logf("%d connections uploading to a member that stopped reading: their windows grew by %d bytes together (bound %d), %d growths refused", conns, peak, bound, stopped)
	if peak > bound || stopped == 0 {
		t.Errorf("the tenant's windows grew by %d bytes and %d growths were refused, want at most %d (the bound) and some refused", peak, stopped, bound)
	}
	// The operator sees the refusals on the listener. A growth refused
	// is counted in h3stopped, then on the listener (h3Window.grow), and
	// growths are still refused: the listener's count is waited for, the
	// tenant's read first.
	var counted int64
	waited := false
	defer func() {
		// eventually's Fatalf runs this: the last counts read.
		if !waited {
			t.Logf("%s refusals counted on the listener: %d, want the %d growths refused", RefusedTenantWindow, counted, stopped)
		}
	}()
	eventually(t, "the refused growths counted on the listener", func() bool {
		stopped = tb.h3stopped.Load()
		counted = refusedFor(p.metrics.(*metrics.Memory), RefusedTenantWindow)
		return counted >= stopped
	})
	waited = true
	for _, c := range clients {
		c.tr.Close()
	}
	wg.Wait()
	closed := time.Now()
	for deadline := closed.Add(2 * time.Minute); tb.conns.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tb.conns.Load(); n != 0 {
		t.Fatalf("%d of the tenant's QUIC connections still open %v after their clients closed", n, time.Since(closed).Round(time.Second))
	}
	ended := time.Since(closed)
	// Each connection gives its growth back as its context ends, as it
	// gives back its connection charge.
	for deadline := time.Now().Add(5 * time.Second); grown() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if g := grown(); g != 0 {
		t.Errorf("%d bytes of window growth still charged after the connections ended", g)
	}
	t.Logf("the connections ended %v after their clients closed", ended.Round(100*time.Millisecond))
}
