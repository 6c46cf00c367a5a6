package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"golang.org/x/net/websocket"
	"golang.org/x/sys/unix"
)

// TestHandoverClosesHTTPAfterItsNextResponse checks the handover of a host
// whose VIPs are about to move: a kept-alive HTTP connection gets its next
// answer (whole, through a route filter) with Connection: close and then a
// clean close (EOF, no reset), a new HTTP connection is served once and
// closed the same way, also when its request needs a new member
// connection, while a TCP
// stream and a WebSocket keep working and are counted as pending until
// CloseConnections ends them cleanly; a connection to another VIP is
// neither counted nor closed; undone, new HTTP connections stay open
// again.
func TestHandoverClosesHTTPAfterItsNextResponse(t *testing.T) {
	web := startWebBackend(t, "web")
	echoAddr := startBackend(t, "127.0.0.1", echo).addr
	srv := l7.New(l7.Config{DrainIdleGrace: 5 * time.Second})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), DrainTimeout: time.Minute})
	httpPort, tcpPort := freePort(t), freePort(t)
	// The route to filteredHost has a filter (served through the
	// round-trip path); plainHost's pool is first used during the
	// handover (a new member connection). Another VIP of this host is not
	// handed over.
	const plainHost, filteredHost = "plain.acme.example", "filtered.acme.example"
	lb := mainL7LB("127.0.0.2", httpPort, tcpPort, []string{web}, []string{echoAddr})
	lb.Routes = append(lb.Routes, &pb.Route{Host: plainHost, Pool: "plain"}, &pb.Route{Host: filteredHost, Pool: "web",
		Filters: []*pb.RouteFilter{{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Level", Value: "2"}}}}}})
	lb.Pools["plain"] = &pb.BackendPool{Members: []*pb.Member{{Address: startWebBackend(t, "plain")}}}
	update(t, p, lb, l4LB("other", "127.0.0.3", tcpPort, "tcp", echoAddr))
	httpTarget, tcpTarget := vipAddr("127.0.0.2", httpPort), vipAddr("127.0.0.2", tcpPort)
	otherStream, err := net.DialTimeout("tcp", vipAddr("127.0.0.3", tcpPort), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer otherStream.Close()
	if err := roundTrip(otherStream, []byte("other")); err != nil {
		t.Fatal(err)
	}

	type kept struct {
		c  net.Conn
		br *bufio.Reader
	}
	dial := func() kept {
		t.Helper()
		c, err := net.DialTimeout("tcp", httpTarget, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return kept{c, bufio.NewReader(c)}
	}
	getFrom := func(k kept, host string) (closeAfter bool) {
		t.Helper()
		_ = k.c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(k.c, "GET /x HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(k.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "hello /x" {
			t.Fatalf("%s: answer %s %q, %v", host, resp.Status, body, err)
		}
		if filtered := resp.Header.Get("X-Level") == "2"; filtered != (host == filteredHost) {
			t.Fatalf("%s: X-Level %q", host, resp.Header.Get("X-Level"))
		}
		return resp.Close
	}
	get := func(k kept) bool { t.Helper(); return getFrom(k, filteredHost) }
	cleanEOF := func(k kept, what string) {
		t.Helper()
		_ = k.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := k.br.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%s: read %d, %v; want a clean close (EOF)", what, n, err)
		}
	}

	ka := dial()
	if get(ka) {
		t.Fatal("Connection: close before the handover")
	}
	stream, err := net.DialTimeout("tcp", tcpTarget, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if err := roundTrip(stream, []byte("before")); err != nil {
		t.Fatal(err)
	}
	ws, err := dialWebSocket(httpTarget)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := wsRoundTrip(ws, "before"); err != nil {
		t.Fatal(err)
	}
	if n := p.HandoverPending(); n != 0 {
		t.Fatalf("%d pending before the handover", n)
	}

	p.HandOver([]netip.Addr{netip.MustParseAddr("127.0.0.2")})
	if n := p.HandoverPending(); n != 3 {
		t.Fatalf("%d connections pending at the handover, want 3 (keep-alive, stream, WebSocket)", n)
	}
	// The drain reaches a kept-alive connection from a goroutine of its
	// own: a request that races it may still be kept alive; the one
	// after it is not.
	if !get(ka) && !get(ka) {
		t.Fatal("neither of the kept-alive connection's next two answers says Connection: close")
	}
	cleanEOF(ka, "kept-alive connection after its last answer")
	fresh := dial()
	if !getFrom(fresh, shopHost) {
		t.Fatal("a connection accepted during the handover is kept alive")
	}
	cleanEOF(fresh, "connection accepted during the handover")
	plain := dial()
	if !getFrom(plain, plainHost) {
		t.Fatal("a request to a member not dialled before the handover is kept alive")
	}
	for i := range 3 {
		if err := roundTrip(stream, fmt.Appendf(nil, "during %d", i)); err != nil {
			t.Fatalf("the TCP stream broke during the handover: %v", err)
		}
		if err := wsRoundTrip(ws, fmt.Sprintf("during %d", i)); err != nil {
			t.Fatalf("the WebSocket broke during the handover: %v", err)
		}
	}
	eventually(t, "the kept-alive connection to leave the pending count", func() bool { return p.HandoverPending() == 2 })

	cleanEOF(plain, "connection to a new member accepted during the handover")
	// HTTP connections that answered with Connection: close and are not
	// untracked yet count as busy until they are. The stream and the
	// WebSocket close at the pause just after their last answer (once it
	// is HandoverQuiet old).
	eventually(t, "CloseConnections to find nothing busy", func() bool { return p.CloseConnections(false) == 0 })
	if err := roundTrip(otherStream, []byte("other, after")); err != nil {
		t.Fatalf("a connection to a VIP not handed over: %v", err)
	}
	_ = stream.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := stream.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("TCP stream after CloseConnections: read %d, %v; want EOF", n, err)
	}
	var msg string
	_ = ws.SetDeadline(time.Now().Add(5 * time.Second))
	if err := websocket.Message.Receive(ws, &msg); !errors.Is(err, io.EOF) {
		t.Fatalf("WebSocket after CloseConnections: %q, %v; want EOF", msg, err)
	}
	eventually(t, "nothing pending", func() bool { return p.HandoverPending() == 0 })

	p.EndHandover()
	again := dial()
	if get(again) || get(again) {
		t.Fatal("Connection: close after the handover was undone")
	}
}

// slowWebBackend answers /slow only once release is closed, telling
// arrived of each /slow request it got; other paths at once, and /ws is a
// WebSocket echo.
func slowWebBackend(t *testing.T, release <-chan struct{}, arrived chan<- struct{}) string {
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
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "hello "+r.URL.Path)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestCloseConnectionsLetsRequestsInProgressFinish checks the end of a
// handover with real sockets: CloseConnections closes (cleanly) an HTTP
// connection idle between requests at once and a quiet WebSocket, while a
// request in progress on a connection accepted during the handover gets
// its whole answer (Connection: close) and then a clean close, and a
// connection that has not sent its request yet is answered too; it counts
// them as busy until they end. With force it cuts a request that does
// not finish, at once: it does not wait for the member.
func TestCloseConnectionsLetsRequestsInProgressFinish(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 4)
	slow := slowWebBackend(t, release, arrived)
	// The drained connections' idle grace outlasts the test: only
	// CloseConnections ends the idle one.
	srv := l7.New(l7.Config{DrainIdleGrace: time.Minute})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), DrainTimeout: time.Minute})
	httpPort, tcpPort := freePort(t), freePort(t)
	lb := mainL7LB("127.0.0.4", httpPort, tcpPort, []string{slow}, []string{startBackend(t, "127.0.0.1", echo).addr})
	update(t, p, lb)
	target := vipAddr("127.0.0.4", httpPort)

	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	dial := func() conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		return conn{c, bufio.NewReader(c)}
	}
	send := func(k conn, path string) {
		t.Helper()
		if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, shopHost); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(k conn, path string) (closeAfter bool) {
		t.Helper()
		resp, err := http.ReadResponse(k.br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "hello "+path {
			t.Fatalf("%s: answer %s %q, %v", path, resp.Status, body, err)
		}
		return resp.Close
	}
	cleanEOF := func(k conn, what string, within time.Duration) {
		t.Helper()
		_ = k.c.SetReadDeadline(time.Now().Add(within))
		if n, err := k.br.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%s: read %d, %v; want a clean close (EOF)", what, n, err)
		}
	}

	idle := dial()
	send(idle, "/x")
	if answer(idle, "/x") {
		t.Fatal("Connection: close before the handover")
	}
	ws, err := dialWebSocket(target)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := wsRoundTrip(ws, "before"); err != nil {
		t.Fatal(err)
	}

	p.HandOver([]netip.Addr{netip.MustParseAddr("127.0.0.4")})
	busy := dial()
	send(busy, "/slow")
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request did not reach the member")
	}
	fresh := dial()
	// The fresh connection is accepted before CloseConnections; the idle
	// connection closes at once, the WebSocket just after its last answer
	// or, when that went more than HandoverAfterAnswer ago, once it has
	// been idle for HandoverIdle (neither is pending then).
	eventually(t, "both connections accepted during the handover busy, the others closed", func() bool {
		return p.CloseConnections(false) == 2 && p.HandoverPending() == 0
	})

	cleanEOF(idle, "connection idle between requests", 5*time.Second)
	var msg string
	_ = ws.SetDeadline(time.Now().Add(5 * time.Second))
	if err := websocket.Message.Receive(ws, &msg); !errors.Is(err, io.EOF) {
		t.Fatalf("WebSocket after CloseConnections: %q, %v; want EOF", msg, err)
	}
	send(fresh, "/x")
	if !answer(fresh, "/x") {
		t.Fatal("a connection accepted during the handover is kept alive")
	}
	cleanEOF(fresh, "connection that sent its request after CloseConnections", 5*time.Second)
	eventually(t, "one busy connection left", func() bool { return p.CloseConnections(false) == 1 })
	close(release)
	if !answer(busy, "/slow") {
		t.Fatal("the answer to the request in progress is kept alive")
	}
	cleanEOF(busy, "connection whose request was in progress", 5*time.Second)
	eventually(t, "no busy connection", func() bool { return p.CloseConnections(false) == 0 })
	if n := p.CloseConnections(true); n != 0 {
		t.Fatalf("CloseConnections with force: %d busy", n)
	}
	p.EndHandover()

	// Forced: a request that does not finish is cut.
	release2, arrived2 := make(chan struct{}), make(chan struct{}, 1)
	defer close(release2)
	lb = clone(lb)
	lb.Pools["web"].Members[0].Address = slowWebBackend(t, release2, arrived2)
	update(t, p, lb)
	p.HandOver([]netip.Addr{netip.MustParseAddr("127.0.0.4")})
	stuck := dial()
	send(stuck, "/slow")
	select {
	case <-arrived2:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request did not reach the member")
	}
	if n := p.CloseConnections(false); n != 1 {
		t.Fatalf("CloseConnections: %d busy, want 1", n)
	}
	// The member never answers (until the test ends): the forced close
	// cuts the exchange, rather than wait for the answer or the
	// response header timeout (a minute).
	forced := make(chan int, 1)
	go func() { forced <- p.CloseConnections(true) }()
	select {
	case n := <-forced:
		if n != 0 {
			t.Fatalf("CloseConnections with force: %d busy", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CloseConnections with force waits for a member that does not answer")
	}
	_ = stuck.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(stuck.br, nil); err == nil {
		t.Fatalf("an answer (%s) after the forced close", resp.Status)
	}
	p.EndHandover()
}

// TestCloseConnectionsWaitsForTheAnswerInFlight: at the end of a handover a
// TCP connection whose client sent a message that is not answered yet is
// busy, not closed (the close would lose the message and the client would
// see its connection end under it); once the answer has reached the client
// and the connection has been quiet for HandoverQuiet, it closes cleanly.
func TestCloseConnectionsWaitsForTheAnswerInFlight(t *testing.T) {
	t.Parallel()
	// The member answers each message once given a token.
	arrived, answer := make(chan struct{}, 2), make(chan struct{}, 2)
	slowEcho := func(c net.Conn) {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			arrived <- struct{}{}
			<-answer
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	member := startBackend(t, "127.0.0.1", slowEcho).addr
	t.Cleanup(func() { close(answer) })
	p, _ := newProxy(t, Config{DrainTimeout: time.Minute})
	port := freePort(t)
	update(t, p, l4LB("slow", "127.0.0.2", port, "tcp", member))
	c, err := net.DialTimeout("tcp", vipAddr("127.0.0.2", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	answer <- struct{}{}
	if err := roundTrip(c, []byte("answered")); err != nil {
		t.Fatal(err)
	}
	<-arrived
	// The next message goes out once the kernel's clock tells the last
	// answer from it (its ticks are up to 10ms).
	eventually(t, "the answer to age", func() bool { return lastReceived(t, c) >= 2*HandoverQuiet })
	p.HandOver([]netip.Addr{netip.MustParseAddr("127.0.0.2")})
	if _, err := c.Write([]byte("in flight")); err != nil {
		t.Fatal(err)
	}
	<-arrived
	// The member holds the answer for several quiet times: every call
	// finds the connection busy and leaves it open.
	for start := time.Now(); time.Since(start) < 5*HandoverQuiet; {
		if busy := p.CloseConnections(false); busy != 1 {
			t.Fatalf("CloseConnections with an answer in flight: %d busy, want 1", busy)
		}
	}
	answer <- struct{}{}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 64)
	n, err := c.Read(got)
	if err != nil || string(got[:n]) != "in flight" {
		t.Fatalf("the answer in flight: %q, %v; want it whole", got[:n], err)
	}
	eventually(t, "the quiet connection closed", func() bool { return p.CloseConnections(false) == 0 })
	if n, err := c.Read(got); err != io.EOF {
		t.Fatalf("after the close: read %d, %v; want a clean close (EOF)", n, err)
	}
}

// lastReceived is how long ago, by the kernel, c last received bytes.
func lastReceived(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	if cerr := rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO) }); cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	return time.Duration(info.Last_data_recv) * time.Millisecond
}

// closeLog keeps the connections that CloseConnections' log lines say it
// closed, by the sum of their counts.
type closeLog struct {
	mu          sync.Mutex
	closed      int64 // "connections"
	afterAnswer int64 // "after_answer"
}

func (l *closeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *closeLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *closeLog) WithGroup(string) slog.Handler            { return l }

func (l *closeLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "closed connections before the VIPs move" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "connections":
			l.closed += a.Value.Int64()
		case "after_answer":
			l.afterAnswer += a.Value.Int64()
		}
		return true
	})
	return nil
}

func (l *closeLog) counts() (closed, afterAnswer int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed, l.afterAnswer
}

// TestCloseConnectionsCountsEachCloseOnce: a connection that
// CloseConnections closed stays registered until its serving ends, a
// moment later for most, up to a second for one waiting at the gate of a
// tenant in debt of its CPU budget (a forced close does not end that
// wait). The VIP manager calls without force, then at once with force
// when none is busy any more or its grace is over, and a later call may
// come while such a connection is still registered: it is neither closed
// nor counted again, nor busy. 4 idle HTTP/1.1 connections, 4 idle TCP
// streams and one HTTP connection at the gate are 9 closes in the log,
// however often CloseConnections is called after, with or without force.
func TestCloseConnectionsCountsEachCloseOnce(t *testing.T) {
	t.Parallel()
	web := startWebBackend(t, "web")
	echoAddr := startBackend(t, "127.0.0.1", echo).addr
	cpu := cpubudget.New(cpubudget.Options{HostMillicores: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cpu.Run(ctx)
	// The drained connections' idle grace outlasts the test: only
	// CloseConnections ends the idle ones.
	srv := l7.New(l7.Config{DrainIdleGrace: time.Minute})
	t.Cleanup(func() { srv.Close() })
	logs := &closeLog{}
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), CPU: cpu, DrainTimeout: time.Minute, Logger: slog.New(logs)})
	httpPort, tcpPort := freePort(t), freePort(t)
	objs := labObjects(mainL7LB("127.0.0.5", httpPort, tcpPort, []string{web}, []string{echoAddr}))
	objs[0].GetTenant().Quotas = &pb.Quotas{CpuMillicores: 100}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	dial := func(port int) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.DialTimeout("tcp", vipAddr("127.0.0.5", port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		return c, bufio.NewReader(c)
	}
	var conns []net.Conn
	var brs []*bufio.Reader
	for i := range 4 {
		c, br := dial(httpPort)
		path := fmt.Sprintf("/%d", i)
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, shopHost); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "hello "+path || resp.Close {
			t.Fatalf("%s: %q, %v, Connection: close %v", path, body, err, resp.Close)
		}
		conns, brs = append(conns, c), append(brs, br)
	}
	for i := range 4 {
		c, br := dial(tcpPort)
		if err := roundTrip(c, fmt.Appendf(nil, "stream %d", i)); err != nil {
			t.Fatal(err)
		}
		conns, brs = append(conns, c), append(brs, br)
	}
	// The streams are idle: CloseConnections ends them without waiting
	// for an answer (the kernel's clock ticks are up to 10ms).
	for _, c := range conns[4:] {
		eventually(t, "the stream to be idle", func() bool { return lastReceived(t, c) >= HandoverIdle+2*HandoverQuiet })
	}
	// A second's worth of the tenant's budget: its gate closes at the
	// accountant's next tick and opens about a second later.
	a := cpu.Tenant("acme")
	a.ChargeDirect(100 * time.Millisecond)
	eventually(t, "the tenant in debt", func() bool { return a.HostStat().InDebt })
	waits := a.HostStat().Waits
	gated, gatedBR := dial(httpPort)
	eventually(t, "the connection at the tenant's gate", func() bool { return a.HostStat().Waits > waits })
	conns, brs = append(conns, gated), append(brs, gatedBR)

	p.HandOver([]netip.Addr{netip.MustParseAddr("127.0.0.5")})
	if busy := p.CloseConnections(false); busy != 1 {
		t.Fatalf("CloseConnections: %d busy, want 1 (the connection at the gate: its first request is due)", busy)
	}
	p.CloseConnections(true)
	if busy := p.CloseConnections(false); busy != 0 {
		t.Errorf("CloseConnections after the forced close: %d busy, want 0", busy)
	}
	p.CloseConnections(true)
	if a.HostStat().InDebt {
		// Still at the gate: the calls after the forced close found it.
		if closed, afterAnswer := logs.counts(); closed != int64(len(conns)) || afterAnswer != 0 {
			t.Fatalf("the log says %d connections closed, %d after an answer; want %d, 0", closed, afterAnswer, len(conns))
		}
	} else {
		t.Log("the tenant's gate opened before the last call")
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := brs[i].Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection %d: read %d, %v; want a clean close (EOF)", i, n, err)
		}
	}
	p.CloseConnections(true)
	if closed, afterAnswer := logs.counts(); closed != int64(len(conns)) || afterAnswer != 0 {
		t.Fatalf("the log says %d connections closed, %d after an answer; want %d, 0", closed, afterAnswer, len(conns))
	}
}
