package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/rateshare"
)

// TestTotalLimitHoldsAcrossTwoHosts: two LB hosts (two data planes, each
// with its own listener on real sockets) serve one load balancer whose
// route has a total limit of 100 requests a second, as two hosts do
// behind one VIP by ECMP; a client fleet of 16 addresses sends each of
// them half of 10× the limit for 3 s. Their rateshare.Sharers exchange
// counts over UDP every 50 ms, and the hosts together serve what
// ratelimit's share.go bounds: at most rate × W + burst + (N−1) ×
// (rate × (T + d) + burst), and at least 80% of rate × W. Counted alone,
// each host would serve the limit: about twice it.
func TestTotalLimitHoldsAcrossTwoHosts(t *testing.T) {
	const (
		rate, burst = 100, 10
		interval    = 50 * time.Millisecond
		delivery    = 50 * time.Millisecond // d: generous for a loaded machine (loopback: µs)
		run         = 3 * time.Second
		perHost     = 5 * rate // half of 10× the limit
		fleet       = 8        // client addresses per host
	)
	member := startCountingMember(t)
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var sharers []*rateshare.Sharer
	var vips []string
	for i, vip := range []string{"127.0.0.2", "127.0.0.6"} {
		srv := l7.New(l7.Config{})
		t.Cleanup(func() { srv.Close() })
		p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
		lb := httpLB("acme", "web", vip, port, member.addr)
		lb.Routes[0].RateLimit = &pb.RateLimit{RequestsPerSecond: rate, Burst: burst, Key: "total"}
		update(t, p, lb)
		if st := p.Status()["acme/web"]; len(st) != 0 {
			t.Fatalf("host %d problems: %v", i, st)
		}
		s, err := rateshare.New(rateshare.Config{Addr: "127.0.0.1:0", Key: []byte("cluster key"), Interval: interval, Source: p})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sharers = append(sharers, s)
		vips = append(vips, vip)
	}
	sharers[0].SetPeers([]netip.AddrPort{sharers[1].Addr()})
	sharers[1].SetPeers([]netip.AddrPort{sharers[0].Addr()})
	for _, s := range sharers {
		go s.Run(ctx)
	}

	var served, refused, sent [2]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(run)
	for h, vip := range vips {
		url := "http://" + vipAddr(vip, port) + "/"
		for c := range fleet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := sourceClient(t, fmt.Sprintf("127.0.%d.%d", 10+h, 10+c))
				every := time.Second * fleet / perHost
				for next := start; time.Now().Before(end); next = next.Add(every) {
					time.Sleep(time.Until(next))
					resp, err := cl.Get(url)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent[h].Add(1)
					switch resp.StatusCode {
					case http.StatusOK:
						served[h].Add(1)
					case http.StatusTooManyRequests:
						refused[h].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	w := time.Since(start)
	total := served[0].Load() + served[1].Load()
	offered := sent[0].Load() + sent[1].Load()
	hi := rate*w.Seconds() + burst + (rate*(interval+delivery).Seconds() + burst)
	lo := 0.8 * rate * w.Seconds()
	t.Logf("%v: offered %d (%.0f/s), served %d (%d + %d; %.0f/s), refused %d + %d; bound [%.0f, %.0f]; share %+v %+v",
		w.Round(time.Millisecond), offered, float64(offered)/w.Seconds(), total, served[0].Load(), served[1].Load(), float64(total)/w.Seconds(),
		refused[0].Load(), refused[1].Load(), lo, hi, sharers[0].Stats(), sharers[1].Stats())
	if float64(offered) < 4*rate*w.Seconds() {
		t.Fatalf("the fleet offered %d requests in %v, under 4× the limit: the machine is too loaded for this test to say anything", offered, w)
	}
	if float64(total) > hi || float64(total) < lo {
		t.Fatalf("the two hosts served %d in %v; want %.0f to %.0f", total, w, lo, hi)
	}
	if served[0].Load() == 0 || served[1].Load() == 0 {
		t.Fatalf("a host served nothing: %d + %d", served[0].Load(), served[1].Load())
	}
}
