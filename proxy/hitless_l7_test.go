package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"golang.org/x/net/websocket"
)

// shopHost is the host the load balancer under test routes to its web
// pool.
const shopHost = "shop.acme.example"

// TestHitlessL7ConfigChanges applies hundreds of config changes — other
// load balancers coming and going with changing members, weights and
// routes, and changes to the load balancer under test that keep its routes
// (weights, an unrelated route, the health check, the idle timeout) —
// while long TCP streams and WebSockets echo continuously and keep-alive
// HTTP clients send requests: no request may fail, no stream or WebSocket
// may break, every echo must come back byte for byte, and the keep-alive
// connections must survive.
func TestHitlessL7ConfigChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs for several seconds")
	}
	const (
		streams     = 25
		sockets     = 25
		httpClients = 8
		maxRequests = 1500 // per HTTP client
		changes     = 250
		budget      = 90 * time.Second
	)
	webAddrs := make([]string, 3)
	for i := range webAddrs {
		webAddrs[i] = startWebBackend(t, fmt.Sprintf("web-%d", i))
	}
	spareWeb := startWebBackend(t, "spare")
	echoAddrs := make([]string, 3)
	for i := range echoAddrs {
		echoAddrs[i] = startBackend(t, "127.0.0.1", echo).addr
	}

	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), DrainTimeout: 100 * time.Millisecond})
	httpPort, tcpPort := freePort(t), freePort(t)
	otherPorts := []int{freePort(t), freePort(t), freePort(t)}
	main := mainL7LB("127.0.0.2", httpPort, tcpPort, webAddrs, echoAddrs)
	update(t, p, main)
	if st := p.Status()["acme/main"]; len(st) != 0 {
		t.Fatalf("problems of the load balancer under test: %v", st)
	}
	httpTarget := vipAddr("127.0.0.2", httpPort)
	tcpTarget := vipAddr("127.0.0.2", tcpPort)

	var (
		stop       atomic.Bool
		failures   atomic.Int64
		firstErr   sync.Once
		errText    atomic.Value
		roundTrips atomic.Int64
		wsMessages atomic.Int64
		requests   atomic.Int64
		httpDials  atomic.Int64
	)
	fail := func(err error) {
		failures.Add(1)
		firstErr.Do(func() { errText.Store(err.Error()) })
	}
	var wg sync.WaitGroup
	ready := make(chan struct{}, streams+sockets)
	for i := range streams {
		wg.Go(func() {
			c, err := net.Dial("tcp", tcpTarget)
			ready <- struct{}{}
			if err != nil {
				fail(fmt.Errorf("stream %d connect: %w", i, err))
				return
			}
			defer c.Close()
			for n := 0; !stop.Load(); n++ {
				msg := fmt.Appendf(nil, "stream %d round trip %d %s", i, n, strings.Repeat("x", n%97))
				if err := roundTrip(c, msg); err != nil {
					fail(fmt.Errorf("stream %d round trip %d: %w", i, n, err))
					return
				}
				roundTrips.Add(1)
				time.Sleep(3 * time.Millisecond)
			}
		})
	}
	for i := range sockets {
		wg.Go(func() {
			ws, err := dialWebSocket(httpTarget)
			ready <- struct{}{}
			if err != nil {
				fail(fmt.Errorf("websocket %d: %w", i, err))
				return
			}
			defer ws.Close()
			for n := 0; !stop.Load(); n++ {
				msg := fmt.Sprintf("websocket %d message %d %s", i, n, strings.Repeat("y", (n*31)%500))
				if err := wsRoundTrip(ws, msg); err != nil {
					fail(fmt.Errorf("websocket %d message %d: %w", i, n, err))
					return
				}
				wsMessages.Add(1)
				time.Sleep(3 * time.Millisecond)
			}
		})
	}
	for range streams + sockets {
		<-ready
	}
	if f := failures.Load(); f != 0 {
		t.Fatalf("setting up the long connections: %v", errText.Load())
	}
	for i := range httpClients {
		wg.Go(func() {
			client := keepAliveClient(httpTarget, &httpDials)
			defer client.CloseIdleConnections()
			for n := 0; n < maxRequests && !stop.Load(); n++ {
				path := fmt.Sprintf("/hello/%d/%d", i, n)
				if err := getExact(client, path); err != nil {
					fail(fmt.Errorf("http client %d request %d: %w", i, n, err))
					return
				}
				requests.Add(1)
				time.Sleep(time.Millisecond)
			}
		})
	}

	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Now()
	applied := 0
	for n := 0; n < changes && time.Since(start) < budget; n++ {
		lbs := []*pb.LoadBalancer{changeMain(main, spareWeb, rng)}
		for j, port := range otherPorts {
			if rng.IntN(3) == 0 {
				continue
			}
			lbs = append(lbs, otherLB(j, port, append([]string{spareWeb}, webAddrs...), echoAddrs, rng))
		}
		if err := p.Update(labObjects(lbs...), uint64(n+2)); err != nil && !errors.Is(err, ErrNoChanges) {
			t.Fatalf("change %d: %v", n, err)
		} else if err == nil {
			applied++
		}
		if st := p.Status()["acme/main"]; len(st) != 0 {
			t.Fatalf("change %d: problems of the load balancer under test: %v", n, st)
		}
		time.Sleep(time.Duration(rng.IntN(16)) * time.Millisecond)
	}
	// Let traffic run on the last configuration for a moment.
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d changes applied in %v; %d HTTP requests over %d connections, %d websocket messages, %d stream round trips, %d failures",
		applied, time.Since(start).Round(time.Millisecond), requests.Load(), httpDials.Load(),
		wsMessages.Load(), roundTrips.Load(), failures.Load())
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d failures; first: %v", f, errText.Load())
	}
	if applied < 150 {
		t.Errorf("only %d changes applied in %v, want at least 150", applied, budget)
	}
	if d := httpDials.Load(); d > httpClients {
		t.Errorf("the HTTP clients dialled %d connections, want %d: keep-alive connections were closed", d, httpClients)
	}
	if requests.Load() < 500 || wsMessages.Load() < 500 || roundTrips.Load() < 500 {
		t.Errorf("too little traffic ran: %d requests, %d websocket messages, %d stream round trips",
			requests.Load(), wsMessages.Load(), roundTrips.Load())
	}
}

// mainL7LB is the load balancer under test: an http listener routing
// shopHost to pool "web" and a tcp listener to pool "echo".
func mainL7LB(vip string, httpPort, tcpPort int, web, echo []string) *pb.LoadBalancer {
	members := func(addrs []string) []*pb.Member {
		ms := make([]*pb.Member, len(addrs))
		for i, a := range addrs {
			ms[i] = &pb.Member{Address: a}
		}
		return ms
	}
	return &pb.LoadBalancer{
		Name:   "main",
		Tenant: "acme",
		Listeners: []*pb.Listener{
			{Port: uint32(httpPort), Protocol: "http"},
			{Port: uint32(tcpPort), Protocol: "tcp", Pool: "echo"},
		},
		Routes: []*pb.Route{{Host: shopHost, Pool: "web"}},
		Pools: map[string]*pb.BackendPool{
			"web":  {Members: members(web)},
			"echo": {Members: members(echo)},
		},
		Status: &pb.LoadBalancerStatus{Address: vip},
	}
}

// changeMain returns main with changes that keep its routes to shopHost:
// random weights, an unrelated route to spare that comes and goes, a
// health check whose interval changes, and a changing idle timeout.
func changeMain(main *pb.LoadBalancer, spare string, rng *rand.Rand) *pb.LoadBalancer {
	lb := clone(main)
	randomWeights(lb.Pools["web"], rng)
	randomWeights(lb.Pools["echo"], rng)
	if rng.IntN(2) == 0 {
		lb.Routes = append(lb.Routes, &pb.Route{Host: "extra.acme.example", Path: "/extra", Pool: "spare"})
		lb.Pools["spare"] = &pb.BackendPool{Members: []*pb.Member{{Address: spare}}}
	}
	if rng.IntN(3) != 0 {
		lb.Pools["web"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{},
			Interval: dur(time.Duration(1+rng.IntN(3)) * time.Second)}
	}
	if rng.IntN(2) == 0 {
		lb.Listeners[0].IdleTimeout = dur(time.Duration(60+rng.IntN(60)) * time.Second)
	}
	return lb
}

// randomWeights gives the pool's members random weights, at least one
// above 0.
func randomWeights(pool *pb.BackendPool, rng *rand.Rand) {
	for _, m := range pool.Members {
		w := uint32(rng.IntN(4))
		m.Weight = &w
	}
	w := uint32(1 + rng.IntN(5))
	pool.Members[rng.IntN(len(pool.Members))].Weight = &w
}

// otherLB is the j-th other load balancer on port: an http one with
// changing routes or a tcp one, on a changing VIP, with changing members
// and weights.
func otherLB(j, port int, web, echo []string, rng *rand.Rand) *pb.LoadBalancer {
	vip := fmt.Sprintf("127.0.0.%d", 3+rng.IntN(6))
	name := fmt.Sprintf("other-%d", j)
	if rng.IntN(2) == 0 {
		lb := l4LB(name, vip, port, "tcp", echo[rng.IntN(len(echo))], echo[rng.IntN(len(echo))])
		randomWeights(lb.Pools["app"], rng)
		return lb
	}
	lb := l4LB(name, vip, port, "http", web[rng.IntN(len(web))], web[rng.IntN(len(web))])
	lb.Listeners[0].Pool = ""
	randomWeights(lb.Pools["app"], rng)
	hosts := []string{"a.acme.example", "b.acme.example", "*.acme.example", shopHost}
	paths := []string{"/", "/api", "/static"}
	for k := range 1 + rng.IntN(3) {
		lb.Routes = append(lb.Routes, &pb.Route{Host: hosts[(k+rng.IntN(len(hosts)))%len(hosts)],
			Path: paths[rng.IntN(len(paths))], Pool: "app"})
	}
	return lb
}

// startWebBackend serves, on 127.0.0.1, a WebSocket echo on /ws and
// "hello PATH" on every other path; it returns its address.
func startWebBackend(t testing.TB, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", websocket.Handler(func(ws *websocket.Conn) {
		for {
			var msg string
			if websocket.Message.Receive(ws, &msg) != nil || websocket.Message.Send(ws, msg) != nil {
				return
			}
		}
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		io.WriteString(w, "hello "+r.URL.Path)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// dialWebSocket opens a WebSocket to shopHost through the listener at
// addr.
func dialWebSocket(addr string) (*websocket.Conn, error) {
	cfg, err := websocket.NewConfig("ws://"+shopHost+"/ws", "http://"+shopHost+"/")
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	ws, err := websocket.NewClient(cfg, c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	c.SetDeadline(time.Time{})
	return ws, nil
}

// wsRoundTrip sends msg and checks that the same message comes back.
func wsRoundTrip(ws *websocket.Conn, msg string) error {
	if err := ws.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if err := websocket.Message.Send(ws, msg); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	var got string
	if err := websocket.Message.Receive(ws, &got); err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if got != msg {
		return fmt.Errorf("echo mismatch: sent %d bytes %.40q, got %d bytes %.40q", len(msg), msg, len(got), got)
	}
	return nil
}

// keepAliveClient is an HTTP client whose connections all go to addr and
// which counts its dials in dials.
func keepAliveClient(addr string, dials *atomic.Int64) *http.Client {
	var d net.Dialer
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				dials.Add(1)
				return d.DialContext(ctx, network, addr)
			},
			MaxIdleConnsPerHost: 1,
			DisableCompression:  true,
		},
	}
}

// getExact GETs path on shopHost and checks for 200 and the backend's
// exact answer.
func getExact(client *http.Client, path string) error {
	resp, err := client.Get("http://" + shopHost + path)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.80q", resp.StatusCode, body)
	}
	if want := "hello " + path; string(body) != want {
		return fmt.Errorf("body %.80q, want %q", body, want)
	}
	if resp.Header.Get("X-Backend") == "" || resp.Header.Get("X-Backend") == "spare" {
		return fmt.Errorf("answered by backend %q, want one of the web pool", resp.Header.Get("X-Backend"))
	}
	return nil
}
