package scenarios

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The rate-limit abuse (issue 36's limits, seen as a neighbour): b puts
// rate limits on its own routes and hammers them, from one address (the
// client's key) and with a fresh value of the header its other route is
// keyed by on every request (a new key each time, into b's table of keys).
const (
	rlClients = 16  // keep-alive connections, half on each route
	rlRate    = 400 // requests a second, all clients together: each route 10 times its limit
	rlLimit   = 20  // each route's requests per second, and its burst
	rlHeader  = "x-api-key"
	// rlCatchUp is how long after abuseFor a client that fell behind
	// still sends: its route has met its limit by then (a route's
	// clients send ten times it, each alone more than it), and the
	// phase stays within about twice abuseFor however late the attacker
	// runs.
	rlCatchUp = abuseFor
)

// rateLimitResult is what the rate-limit attacker got: responses by
// route and status code.
type rateLimitResult struct {
	Codes    map[string]int64 // "route status" → count; status "error" for failures
	FirstErr string
}

// attackRateLimit reads "addr host" and sends rlRate requests a second
// for abuseFor over rlClients connections, half to /client (limited per
// client address) and half to /key with a new rlHeader value each. A
// client that falls behind its schedule sends what it is late with at
// once, until rlCatchUp after the schedule's end: what it has not sent
// by then is left out (on a machine at a load of 15 the attacker
// process, at nice 19, took 20.6 s over the 3,200 requests of an 8 s phase).
func attackRateLimit(in *bufio.Scanner, out *json.Encoder) error {
	if !in.Scan() {
		return nil
	}
	addr, host, _ := strings.Cut(in.Text(), " ")
	var (
		mu       sync.Mutex
		codes    = map[string]int64{}
		firstErr string
		wg       sync.WaitGroup
	)
	count := func(route, code string, err error) {
		mu.Lock()
		defer mu.Unlock()
		codes[route+" "+code]++
		if err != nil && firstErr == "" {
			firstErr = err.Error()
		}
	}
	start := time.Now()
	stop := start.Add(abuseFor)
	for c := range rlClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			route := "/client"
			if c%2 == 1 {
				route = "/key"
			}
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
			defer hc.CloseIdleConnections()
			every := time.Second * rlClients / rlRate
			for i := 0; ; i++ {
				at := start.Add(every*time.Duration(i) + every*time.Duration(c)/rlClients)
				if at.After(stop) || time.Now().After(stop.Add(rlCatchUp)) {
					return
				}
				time.Sleep(time.Until(at))
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+route, nil)
				req.Host = host
				if route == "/key" {
					var k [16]byte
					rand.Read(k[:])
					req.Header.Set(rlHeader, hex.EncodeToString(k[:]))
				}
				resp, err := hc.Do(req)
				if err != nil {
					count(route, "error", err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				count(route, fmt.Sprint(resp.StatusCode), nil)
			}
		}()
	}
	wg.Wait()
	return out.Encode(rateLimitResult{Codes: codes, FirstErr: firstErr})
}

// phaseRateLimit: b's own rate-limited routes hammered at 10 times their
// limits, per client address and with a new header key per request.
// What b gets is its limits; what a gets is the goal.
func phaseRateLimit(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	// The clients are an attacker process, as b's other floods are.
	att := startAttacker(tb, "ratelimit")
	defer att.stop()
	host := "rl.b.example"
	limit := func(key string) *pb.RateLimit {
		rl := &pb.RateLimit{RequestsPerSecond: rlLimit, Burst: rlLimit}
		if key != "" {
			rl.Key, rl.Header = "header", key
		}
		return rl
	}
	lb := bLB("svc-ratelimit", []*pb.Listener{{Port: noisyHTTPPort, Protocol: "http"}},
		[]*pb.Route{
			{Host: host, Path: "/client", Pool: "web", RateLimit: limit("")},
			{Host: host, Path: "/key", Pool: "web", RateLimit: limit(rlHeader)},
		}, &pb.BackendPool{Members: memberList(l.bWeb.addr)})
	vip, refused := bUpsert(tb, b, lb)
	if vip == "" {
		tb.Errorf("b's rate-limited load balancer refused: %s", refused)
		return []string{"refused: " + shorten(refused)}
	}
	defer removeLBs(tb, b, "svc-ratelimit")
	addr := net.JoinHostPort(vip, fmt.Sprint(noisyHTTPPort))
	if !waitDial(tb, addr) {
		return nil
	}
	start := time.Now()
	var got rateLimitResult
	if err := att.send(addr + " " + host); err != nil {
		tb.Errorf("rate-limit attacker: %v", err)
		return nil
	}
	if err := att.recv(&got); err != nil {
		tb.Errorf("rate-limit attacker: %v", err)
		return nil
	}
	took := time.Since(start)
	var parts []string
	var sent int64
	for k, v := range got.Codes {
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
		sent += v
	}
	sort.Strings(parts)
	notes := []string{fmt.Sprintf("%d requests in %.1fs at %d/s to two routes limited to %d/s (%s)", sent, took.Seconds(), rlRate, rlLimit, strings.Join(parts, ", "))}
	if got.FirstErr != "" {
		notes = append(notes, "first error: "+shorten(got.FirstErr))
	}
	// Per client address: the burst and the rate over the phase, and
	// some slack for the clock; each new header value is a key of its
	// own, so /key is bounded by b's table of keys, not by the rate.
	served := got.Codes["/client 200"]
	if bound := int64(rlLimit) + int64(rlLimit*(took.Seconds()+1)); served > bound {
		tb.Errorf("b's /client served %d requests in %.1fs, over its limit of %d/s and burst %d (%d)", served, took.Seconds(), rlLimit, rlLimit, bound)
	}
	if got.Codes["/client 429"] == 0 && !l.together {
		tb.Errorf("b's /client never answered 429: the abuse did not meet its limit")
	}
	return notes
}
