package scenarios

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRateLimitAcrossECMP: the three LB hosts of the BGP lab announce one
// VIP, and the router spreads connections over them by ECMP (hashed on
// ports). The subtests share the lab (building it is most of their time);
// each applies its own edge4 and measures from its own start, and the
// shared-key counters it reads are differences over its own run.
func TestRateLimitAcrossECMP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a network lab with a three-host cluster and a BGP router")
	}
	needTools(t, "bird", "birdc")
	l := newVIPLab(t, labOptions{bgp: true, teapot: true})
	l.waitHops(t, bgpVIP4, l.lbs)
	t.Run("total", func(t *testing.T) { rateLimitTotalAcrossECMP(t, l) })
	t.Run("client", func(t *testing.T) { rateLimitClientAcrossECMP(t, l) })
}

// rateLimitTotalAcrossECMP: a route of edge4 with a total limit of 50 requests
// a second gets, from the outside client, 10× that for 3 s on a new
// connection each: the hosts share their counts (serve's rate share, the
// heartbeat port + 1), and together serve what ratelimit's share.go
// bounds, rate × W + burst + (N−1) × (rate × (T + d) + burst) with T 50
// ms and d taken as 50 ms, where three hosts counting alone would serve
// three times the limit.
func rateLimitTotalAcrossECMP(t *testing.T, l *vipLab) {
	const (
		rate, burst = 50, 10
		run         = 3 * time.Second
		offered     = 10 * rate
		clients     = 25
		window      = 100 * time.Millisecond // T + d
	)
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

// rateLimitClientAcrossECMP: one client opening a new connection for
// each request alternates between the hosts.
//
// A route limited to 20 requests a second per client (burst 8) gets 10×
// that from the client for 3 s: the hosts share the client's key once
// hot (serve's rate share) and together serve what ratelimit's share.go
// bounds for one key, rate × W + burst + (N−1) × (rate × (T + d) + burst +
// shareThreshold − 1), where three hosts counting alone would serve three
// times the limit.
//
// Then a flood of 20,000 distinct values of a header another route is
// limited by (a tenant, or its attacker, with a key each request; the
// tenant's rateLimitKeys at 1,600, so at most 16 keys shared a host each
// 50 ms): every host shares at most that many keys for the flood's
// duration, and counts the rest alone.
func rateLimitClientAcrossECMP(t *testing.T, l *vipLab) {
	const (
		rate, burst = 20, 8 // shareThreshold 2
		run         = 3 * time.Second
		offered     = 10 * rate
		clients     = 10
		window      = 100 * time.Millisecond // T + d
		maxKeys     = 1600
		shareCap    = 16 // ratelimit.ShareCap(maxKeys)
		floodValues = 20_000
	)
	if _, err := l.cli(l.lbs[0], "tenant", "update", "acme", "--max-rate-limit-keys", strconv.Itoa(maxKeys)); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(l.dir, "limited.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(`
kind: LoadBalancer
name: edge4
tenant: acme
vip: { pool: edge, address: "%s" }
listeners: [{ port: 80, protocol: http }]
routes:
  - { path: /client, pool: web, rateLimit: { requestsPerSecond: %d, burst: %d } }
  - { path: /flood, pool: web, rateLimit: { requestsPerSecond: 1, burst: 1, key: header, header: X-Api-Key } }
pools: { web: { members: ["192.0.2.50:8080"] } }
`, bgpVIP4, rate, burst)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	base := "http://" + netip.AddrPortFrom(bgpVIP4, 80).String()
	tr := &http.Transport{DialContext: l.outside.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(c *http.Client, path, key string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, settleTimeout, "the limit in force", func() error {
		for range 4 * burst {
			if get(c, "/client", "") == http.StatusTooManyRequests {
				return nil
			}
		}
		return fmt.Errorf("no 429 in %d requests", 4*burst)
	})
	time.Sleep(time.Second) // the burst back
	shared := func(name string) []float64 {
		var v []float64
		for _, n := range l.lbs {
			s, err := l.scrape(n)
			if err != nil {
				t.Fatalf("metrics of %s: %v", n.id, err)
			}
			v = append(v, sum(s, name, map[string]string{"tenant": "acme"}))
		}
		return v
	}

	// One client, alternating between the hosts.
	before := shared("teapot_lb_rate_limit_shared_keys_total")
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
				code := get(c, "/client", "")
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
	after := shared("teapot_lb_rate_limit_shared_keys_total")
	n := float64(len(l.lbs))
	hi := rate*w + burst + (n-1)*(rate*window.Seconds()+burst+1)
	lo := 0.8 * rate * w
	sharing := 0
	for i := range before {
		if after[i] > before[i] {
			sharing++
		}
	}
	t.Logf("one client: %.2fs: sent %d (%.0f/s), served %d (%.0f/s), refused %d; bound [%.0f, %.0f]; three hosts counting alone: about %.0f; hosts that shared its key: %d (keys shared %v -> %v)",
		w, sent.Load(), float64(sent.Load())/w, served.Load(), float64(served.Load())/w, refused.Load(), lo, hi, n*(rate*w+burst), sharing, before, after)
	if float64(sent.Load()) < 4*rate*w {
		t.Fatalf("the client sent %d requests in %.1fs, under 4× the limit: the machine is too loaded for this test to say anything", sent.Load(), w)
	}
	if sharing < 2 {
		t.Fatalf("%d hosts shared the client's key: the router did not spread its connections", sharing)
	}
	if s := float64(served.Load()); s > hi || s < lo {
		t.Fatalf("the hosts served the client %d in %.1fs; want %.0f to %.0f", served.Load(), w, lo, hi)
	}

	// A flood of distinct header values, over kept-alive connections.
	before = shared("teapot_lb_rate_limit_shared_keys_total")
	unsharedBefore := shared("teapot_lb_rate_limit_unshared_total")
	var next atomic.Int64
	start = time.Now()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ftr := &http.Transport{DialContext: l.outside.DialContext}
			defer ftr.CloseIdleConnections()
			fc := &http.Client{Transport: ftr, Timeout: 5 * time.Second}
			for i := next.Add(1); i <= floodValues; i = next.Add(1) {
				get(fc, "/flood", "flood-"+strconv.FormatInt(i, 10))
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	// The last drains go out.
	time.Sleep(200 * time.Millisecond)
	d2 := time.Since(start)
	after = shared("teapot_lb_rate_limit_shared_keys_total")
	unshared := shared("teapot_lb_rate_limit_unshared_total")
	bound := float64(shareCap) * (d2.Seconds()/0.05 + 2)
	var totalUnshared float64
	for i := range after {
		totalUnshared += unshared[i] - unsharedBefore[i]
	}
	t.Logf("flood: %d values in %v (%.0f/s); keys shared by each host %v -> %v (bound %.0f each: %d a 50 ms); counted alone %v -> %v",
		floodValues, d.Round(time.Millisecond), floodValues/d.Seconds(), before, after, bound, shareCap, unsharedBefore, unshared)
	for i := range after {
		if got := after[i] - before[i]; got > bound {
			t.Fatalf("%s shared %.0f keys of the flood in %v; the tenant's bound is %d each 50 ms (%.0f)", l.lbs[i].id, got, d2, shareCap, bound)
		}
	}
	if floodValues/d.Seconds() > 3*n*shareCap*20 && totalUnshared == 0 {
		t.Fatalf("a flood of %.0f keys a second over %d hosts kept no key local: the bound of %d keys each 50 ms was not applied", floodValues/d.Seconds(), len(l.lbs), shareCap)
	}
}
