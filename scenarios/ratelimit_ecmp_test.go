package scenarios

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTotalRateLimitAcrossECMP: the three LB hosts of the BGP lab
// announce one VIP, and the router spreads connections over them by
// ECMP (hashed on ports). A route of it with a total limit of 50 requests
// a second gets, from the outside client, 10× that for 3 s on a new
// connection each: the hosts share their counts (serve's rate share, the
// heartbeat port + 1), and together serve what ratelimit's share.go
// bounds, rate × W + burst + (N−1) × (rate × (T + d) + burst) with T 50
// ms and d taken as 50 ms, where three hosts counting alone would serve
// three times the limit.
func TestTotalRateLimitAcrossECMP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster and a BGP router")
	}
	needTools(t, "bird", "birdc")
	const (
		rate, burst = 50, 10
		run         = 3 * time.Second
		offered     = 10 * rate
		clients     = 25
		window      = 100 * time.Millisecond // T + d
	)
	l := newVIPLab(t, labOptions{bgp: true, teapot: true})
	l.waitHops(t, bgpVIP4, l.lbs)
	manifest := filepath.Join(l.dir, "limited.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(`
kind: LoadBalancer
name: edge4
tenant: acme
vip: { pool: edge, address: "%s" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web, rateLimit: { requestsPerSecond: %d, burst: %d, key: total } }]
pools: { web: { members: ["192.0.2.50:8080"] } }
`, bgpVIP4, rate, burst)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	url := "http://" + netip.AddrPortFrom(bgpVIP4, 80).String() + "/"
	tr := &http.Transport{DialContext: l.outside.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func() int {
		resp, err := c.Get(url)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Every host has the limit once a request is refused.
	waitFor(t, settleTimeout, "the limit in force", func() error {
		for range 4 * burst {
			if get() == http.StatusTooManyRequests {
				return nil
			}
		}
		return fmt.Errorf("no 429 in %d requests", 4*burst)
	})
	time.Sleep(time.Second) // the burst back

	var served, refused, sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(run)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every := time.Second * clients / offered
			for next := start; time.Now().Before(end); next = next.Add(every) {
				time.Sleep(time.Until(next))
				code := get()
				sent.Add(1)
				switch code {
				case http.StatusOK:
					served.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	w := time.Since(start).Seconds()
	n := float64(len(l.lbs))
	hi := rate*w + burst + (n-1)*(rate*window.Seconds()+burst)
	lo := 0.8 * rate * w
	t.Logf("%.2fs: sent %d (%.0f/s), served %d (%.0f/s), refused %d; bound [%.0f, %.0f]; three hosts counting alone: about %.0f",
		w, sent.Load(), float64(sent.Load())/w, served.Load(), float64(served.Load())/w, refused.Load(), lo, hi, n*(rate*w+burst))
	if float64(sent.Load()) < 4*rate*w {
		t.Fatalf("the client sent %d requests in %.1fs, under 4× the limit: the machine is too loaded for this test to say anything", sent.Load(), w)
	}
	if s := float64(served.Load()); s > hi || s < lo {
		t.Fatalf("the hosts served %d in %.1fs; want %.0f to %.0f", served.Load(), w, lo, hi)
	}
}
