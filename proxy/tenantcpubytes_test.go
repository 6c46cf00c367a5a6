package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"golang.org/x/net/http2"
	"golang.org/x/net/websocket"
)

// startSinkMember answers every request with "ok" once it read its body
// to the end.
func startSinkMember(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// runCPUBudgets starts an accountant over budgets of hostMillicores a
// tenant by default, stopped when the test ends.
func runCPUBudgets(t *testing.T, hostMillicores int) *cpubudget.Budgets {
	cpu := cpubudget.New(cpubudget.Options{HostMillicores: hostMillicores})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go cpu.Run(ctx)
	return cpu
}

// TestBigBodiesSlowOnlyTheirTenant: tenant b, at a tenth of a core,
// uploads 4 MiB bodies over 4 keep-alive connections as fast as they are
// taken: few requests, much copying. Its body bytes count in its host
// CPU budget as they move (a unit per 64 KiB), so b falls into debt and
// waits there, between copies of its own bodies, while a's p99 stays
// near its quiet baseline. Counting the requests alone (before), b's 4
// connections never put it in debt: its uploads were 1 unit each.
func TestBigBodiesSlowOnlyTheirTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	member := startSinkMember(t)
	cpu := runCPUBudgets(t, 1000)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil), CPU: cpu})
	port := freePort(t)
	objs := twoTenants(httpLB("a", "plain", "127.0.0.2", port, member), httpLB("b", "upload", "127.0.0.3", port, member))
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
	quiet := latencies(t, client, urlA, 300)

	body := bytes.Repeat([]byte("x"), 4<<20)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var uploads atomic.Int64
	for range 4 {
		wg.Go(func() {
			c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Post(urlB, "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				uploads.Add(1)
			}
		})
	}
	b, a := cpu.Tenant("b"), cpu.Tenant("a")
	eventually(t, "tenant b's uploads to run", func() bool { return uploads.Load() > 8 })
	start, before := time.Now(), uploads.Load()
	abused := latencies(t, client, urlA, 300)
	rate := float64(uploads.Load()-before) * 4 / time.Since(start).Seconds()
	close(stop)
	wg.Wait()

	qp99, ap99 := pct(quiet, 99), pct(abused, 99)
	sb, sa := b.HostStat(), a.HostStat()
	t.Logf("tenant a quiet p50 %v p99 %v; with b's uploads p50 %v p99 %v; b uploaded %.0f MiB a second, %d units, charged %v (%d throttles, held %v, %d waits); a charged %v (%d throttles)",
		pct(quiet, 50), qp99, pct(abused, 50), ap99, rate, sb.Work, sb.Spent, sb.Throttles, sb.Throttled, sb.Waits, sa.Spent, sa.Throttles)
	if sb.Throttles == 0 || sb.Waits == 0 {
		t.Errorf("tenant b's uploads were never held at its budget (%d throttles, %d waits)", sb.Throttles, sb.Waits)
	}
	if min := uploads.Load() * 64 / 2; sb.Work < min {
		t.Errorf("tenant b brought in %d units of work for %d uploads of 4 MiB, want at least %d (a unit per 64 KiB)", sb.Work, uploads.Load(), min)
	}
	if sa.Throttles != 0 {
		t.Errorf("tenant a was throttled %d times", sa.Throttles)
	}
	slack := 50 * time.Millisecond
	if raceEnabled {
		slack = 100 * time.Millisecond
	}
	if limit := max(2*qp99, qp99+slack); ap99 > limit {
		t.Errorf("tenant a's p99 went from %v to %v (limit %v)", qp99, ap99, limit)
	}
	if sb.Spent <= sa.Spent {
		t.Errorf("b charged %v, a %v: want b's uploads billed to b", sb.Spent, sa.Spent)
	}
}

// TestHTTP2ControlFloodIsCharged: a client of tenant b sends PINGs,
// SETTINGS and WINDOW_UPDATEs on one HTTP/2 connection (no request, no
// body byte) within the connection's control-frame rate: each frame is
// work for the host, counted in b's host CPU budget: a unit per PING or
// SETTINGS (the server answers each), a unit per
// cpubudget.WorkControlFrames of the others; before, the connection
// counted 2 units however many frames it sent.
func TestHTTP2ControlFloodIsCharged(t *testing.T) {
	t.Parallel()
	member := startSinkMember(t)
	cpu := runCPUBudgets(t, 1000)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil), CPU: cpu})
	port := freePort(t)
	if err := p.Update(twoTenants(httpLB("b", "pings", "127.0.0.3", port, member)), 1); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", vipAddr("127.0.0.3", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// 1,500 frames: within the burst of the connection's control-frame
	// bucket (2 s of 1,000 a second), so none is refused.
	const pings, others = 1000, 500
	go func() {
		for i := range pings {
			fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)})
			if i < others/2 {
				fr.WriteSettings()
				fr.WriteWindowUpdate(0, 1)
			}
		}
	}()
	rd := http2.NewFramer(io.Discard, c)
	acks := 0
	for acks < pings {
		f, err := rd.ReadFrame()
		if err != nil {
			t.Fatalf("after %d PING ACKs: %v", acks, err)
		}
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() {
			acks++
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY %v after %d PING ACKs", ga.ErrCode, acks)
		}
	}
	b := cpu.Tenant("b")
	// The SETTINGS of the preface, the PINGs and SETTINGS of the flood
	// and its WINDOW_UPDATEs (less a unit not yet complete); the
	// connection counts 2.
	want := (1+pings+others/2)*cpubudget.WorkAnsweredFrame + int64(others/2)/cpubudget.WorkControlFrames + 2
	eventually(t, "tenant b's control frames counted and charged", func() bool {
		st := b.HostStat()
		return st.Work >= want && st.Spent > 0
	})
	st := b.HostStat()
	t.Logf("tenant b: %d units for %d control frames, charged %v", st.Work, 1+pings+others, st.Spent)
}

// TestOpenL4ConnectionSlowsWhenItsTenantIsInDebt: tenants a and b each
// stream bytes through an open tcp connection as fast as they go. Once b's
// budget drops to 20 thousandths of a core, b falls into debt: its open
// connection (not only its new ones) is slowed between copies (epoll) or
// its receives paused (io_uring), and moves a fraction of what it moved
// before, while a's connection, on the same relay, keeps its speed.
// Before, an open connection relayed at full speed whatever its tenant's
// debt.
func TestOpenL4ConnectionSlowsWhenItsTenantIsInDebt(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	onEachDataPath(t, testOpenL4ConnectionSlows)
}

// onEachDataPath runs f on epoll, then on io_uring where this kernel and
// sandbox offer it (ChooseDataPath says why not, and that half is
// skipped with that reason).
func onEachDataPath(t *testing.T, f func(*testing.T, DataPath)) {
	t.Run(string(DataPathEpoll), func(t *testing.T) { f(t, DataPathEpoll) })
	t.Run(string(DataPathIOURing), func(t *testing.T) {
		if _, _, err := ChooseDataPath(DataPathIOURing); err != nil {
			t.Skipf("io_uring is unavailable on this host: %v (the epoll half ran)", err)
		}
		f(t, DataPathIOURing)
	})
}

func testOpenL4ConnectionSlows(t *testing.T, dp DataPath) {
	// A budget of 8 cores: more than the machine has, so that neither
	// tenant is in debt until b's is lowered.
	cpu := runCPUBudgets(t, 8000)
	p, _ := newProxy(t, Config{CPU: cpu, DataPath: dp})
	sink := startBackend(t, "127.0.0.1", func(c net.Conn) { io.Copy(io.Discard, c) })
	port := freePort(t)
	la := l4LB("a", "127.0.0.2", port, "tcp", sink.addr)
	la.Tenant = "a"
	lbB := l4LB("b", "127.0.0.3", port, "tcp", sink.addr)
	lbB.Tenant = "b"
	if err := p.Update(twoTenants(la, lbB), 1); err != nil {
		t.Fatal(err)
	}
	var sent [2]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, vip := range []string{"127.0.0.2", "127.0.0.3"} {
		c, err := net.Dial("tcp", vipAddr(vip, port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				n, err := c.Write(buf)
				sent[i].Add(int64(n))
				if err != nil && !isTimeoutErr(err) {
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	rates := func() (a, b float64) {
		a0, b0, t0 := sent[0].Load(), sent[1].Load(), time.Now()
		time.Sleep(time.Second) // a window to measure rates over, not a wait for an event
		el := time.Since(t0).Seconds()
		return float64(sent[0].Load()-a0) / el / (1 << 20), float64(sent[1].Load()-b0) / el / (1 << 20)
	}
	eventually(t, "both connections to stream", func() bool { return sent[0].Load() > 16<<20 && sent[1].Load() > 16<<20 })
	a1, b1 := rates()
	tb := cpu.Tenant("b")
	tb.SetMillicores(20)
	eventually(t, "tenant b to fall into debt", func() bool { return tb.HostStat().Throttles > 0 })
	a2, b2 := rates()
	sa, sb := cpu.Tenant("a").HostStat(), tb.HostStat()
	t.Logf("%s: MiB/s before b's budget dropped: a %.0f, b %.0f; after: a %.0f, b %.0f; b: %d throttles, %d waits, held %v; a: %d throttles",
		dp, a1, b1, a2, b2, sb.Throttles, sb.Waits, sb.Throttled, sa.Throttles)
	if b2 > b1/4 {
		t.Errorf("tenant b's open connection moved %.0f MiB/s in debt, %.0f before: want a quarter at most", b2, b1)
	}
	if a2 < a1/3 {
		t.Errorf("tenant a's open connection went from %.0f to %.0f MiB/s while b was in debt", a1, a2)
	}
	if sa.Throttles != 0 {
		t.Errorf("tenant a was throttled %d times", sa.Throttles)
	}
	// What explain tenant shows: the budget, its use and its throttles.
	var h pb.HostObservation
	p.Observe(observe.Filter{Tenant: "b"}, &h)
	if len(h.TenantUsage) != 1 || h.TenantUsage[0].GetCpu() == nil {
		t.Fatalf("observed tenant usage %v: want b's with its CPU budget", h.TenantUsage)
	}
	if c := h.TenantUsage[0].GetCpu(); c.GetMillicores() != 20 || c.GetThrottles() < 1 || c.GetThrottledSeconds() <= 0 || c.GetHostCores() != float64(cpubudget.HostCPUs()) {
		t.Errorf("observed CPU budget of b %v: want 20 millicores, its throttles and the host's %d CPUs", c, cpubudget.HostCPUs())
	}
}

// TestSmallL4MessagesAreCharged: tenant b exchanges 1,000 one-byte
// messages through an open tcp connection with an echo member, on each
// data path. Each message costs the host its system calls each way (on
// epoll a read, a write and an empty read, about what 64 KiB spliced
// costs), so each counts a unit in b's host CPU budget: at least 2,000 for
// the 1,000 round trips. Counted by their bytes, as before, the 2,000
// bytes made one unit at most, and a tenant could spend the host's CPU on
// small messages charged almost nothing.
func TestSmallL4MessagesAreCharged(t *testing.T) {
	t.Parallel()
	onEachDataPath(t, testSmallL4MessagesAreCharged)
}

func testSmallL4MessagesAreCharged(t *testing.T, dp DataPath) {
	cpu := runCPUBudgets(t, 8000)
	p, _ := newProxy(t, Config{CPU: cpu, DataPath: dp})
	be := startBackend(t, "127.0.0.1", echoCopying)
	port := freePort(t)
	lbB := l4LB("b", "127.0.0.3", port, "tcp", be.addr)
	lbB.Tenant = "b"
	if err := p.Update(twoTenants(lbB), 1); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", vipAddr("127.0.0.3", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, []byte("x")); err != nil {
		t.Fatal(err)
	}
	tb := cpu.Tenant("b")
	before := tb.HostStat().Work
	const exchanges = 1000
	for i := range exchanges {
		if err := roundTrip(c, []byte{byte('a' + i%26)}); err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
	}
	// On epoll a direction counts what it moved every 4 units
	// (relayQuantum): at most 3 messages a direction wait for the next
	// look.
	want := int64(2*exchanges - 6)
	for deadline := time.Now().Add(20 * time.Second); tb.HostStat().Work-before < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if got := tb.HostStat().Work - before; got < want {
		t.Fatalf("%s: tenant b was charged %d units for %d one-byte round trips: want at least %d", dp, got, exchanges, want)
	}
}

// TestL7WorkUnitsMatchTheBudget: the engine counts its units as the
// budget does (proxy/l7 imports nothing of ours, so it has its own).
func TestL7WorkUnitsMatchTheBudget(t *testing.T) {
	t.Parallel()
	if l7.WorkRequest != cpubudget.WorkRequest || l7.WorkBytesShift != cpubudget.WorkBytesShift || l7.WorkTLSBytes != cpubudget.WorkTLSBytes ||
		l7.WorkControlFrames != cpubudget.WorkControlFrames || l7.WorkAnsweredFrame != cpubudget.WorkAnsweredFrame {
		t.Error("proxy/l7's units of work differ from proxy/cpubudget's")
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestBodyBytesCountedOnEveryPath: a 4 MiB upload that comes back echoed
// counts its bytes both ways in the tenant's host CPU budget (a unit per
// 64 KiB, four over TLS and QUIC) on every path the engine serves it by:
// HTTP/1.1, HTTP/2 and HTTP/3 clients, to a plain route (the fast paths)
// and to a route with filters (net/http), and a WebSocket tunnel's
// frames. Before, each counted its request alone.
func TestBodyBytesCountedOnEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("8 MiB through each path: make test runs it; -short skips it")
	}
	cpu := runCPUBudgets(t, 1<<20) // never in debt: this counts, it does not throttle
	bes := map[string]*routingBackend{}
	for _, n := range []string{"main", "beta", "other", "mirror"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv), CPU: cpu})
	port := freePort(t)
	update(t, p, h3LB(port, bes))
	target := vipAddr("127.0.0.2", port)
	acme := cpu.Tenant("acme")
	body := strings.Repeat("0123456789abcdef", 256<<10) // 4 MiB
	// Both ways, over TLS: 2 x 64 x 4 units, less what is left in the
	// carries.
	const want = 2*64*cpubudget.WorkTLSBytes - 8
	tlsClient := func(h2 bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, target)
			}}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	h3 := newH3Client(t, target)
	clients := []struct {
		name  string
		proto int
		c     *http.Client
	}{{"http1", 1, tlsClient(false)}, {"h2", 2, tlsClient(true)}, {"h3", 3, h3.Client}}
	for _, cl := range clients {
		for _, path := range []string{"/big", "/headers/big"} {
			t.Run(cl.name+path, func(t *testing.T) {
				before := acme.HostStat().Work
				resp, err := cl.c.Post("https://gw.acme.example:"+strconv.Itoa(port)+path, "text/plain", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.ProtoMajor != cl.proto || !strings.Contains(string(data), body) {
					t.Fatalf("%s: %d bytes back, want the %d sent", resp.Status+" "+resp.Proto, len(data), len(body))
				}
				if got := acme.HostStat().Work - before; got < want {
					t.Errorf("%d units of work for 4 MiB each way over %s, want at least %d", got, resp.Proto, want)
				}
			})
		}
	}
	t.Run("websocket", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		echo := &http.Server{Handler: websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) })}
		go echo.Serve(ln)
		t.Cleanup(func() { echo.Close() })
		wsPort := freePort(t)
		lb := &pb.LoadBalancer{Name: "ws", Tenant: "acme", Listeners: []*pb.Listener{{Port: uint32(wsPort), Protocol: "http"}},
			Routes: []*pb.Route{{Path: "/", Pool: "ws"}}, Pools: map[string]*pb.BackendPool{"ws": {Members: []*pb.Member{{Address: ln.Addr().String()}}}},
			Status: &pb.LoadBalancerStatus{Address: "127.0.0.3"}}
		update(t, p, h3LB(port, bes), lb)
		ws, err := websocket.Dial("ws://"+vipAddr("127.0.0.3", wsPort)+"/", "", "http://gateway/")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		ws.SetDeadline(time.Now().Add(30 * time.Second))
		before := acme.HostStat().Work
		msg := []byte(body[:1<<20])
		for range 4 {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			if n, err := io.ReadFull(ws, got); err != nil {
				t.Fatalf("echo: %d bytes, %v", n, err)
			}
		}
		// 4 MiB each way in cleartext, less the carries.
		if got := acme.HostStat().Work - before; got < 2*64-2 {
			t.Errorf("%d units of work for a tunnel's 4 MiB each way, want at least %d", got, 2*64-2)
		}
	})
}
