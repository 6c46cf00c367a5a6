package l7

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The proxy's own reads and writes are recv(2) and send(2), which
// /proc/self/io does not count: sockCounts counts them, from before the
// first test.
func init() { sockCounts = new(sockCounter) }

// readSyscalls returns how many read(2) and recv(2) calls this process
// made (syscr in /proc/self/io counts failed ones too, and sockCounts
// failed recv(2)s).
func readSyscalls(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("needs /proc/self/io to count read system calls: %v", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("syscr: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n + sockCounts.reads.Load()
		}
	}
	t.Fatalf("no syscr in /proc/self/io: %s", b)
	return 0
}

// TestProxyReadsPerRequest counts the read system calls of proxied
// requests, one at a time over keep-alive connections. Reading the
// member's response costs one read: none is tried before the member could
// answer (a read right after the write nearly always finds nothing and
// costs a failed read(2) and a second one after the wake-up), and so
// does reading the client's next request: the wait for it is armed
// before the response is written (rawServe). The same client and member
// without the proxy give the reads that are not the proxy's.
func TestProxyReadsPerRequest(t *testing.T) {
	member := rawBackend(t, rawResponse)
	be := newBackend(t, member)
	addr := proxyUnder(t, New(Config{}), oneRoute(allocFree{be}), nil)
	const n = 2000
	perRequest := func(addr string) float64 {
		rc := newRawClient(t, addr, benchRequest, len(rawResponse))
		for range 20 {
			rc.do(t)
		}
		r0 := readSyscalls(t)
		for range n {
			rc.do(t)
		}
		return float64(readSyscalls(t)-r0) / n
	}
	// Interleaved, the smallest of three: other work of the process
	// (the runtime, the test framework) only adds reads.
	direct, proxied := 1e9, 1e9
	for range 3 {
		direct = min(direct, perRequest(member))
		proxied = min(proxied, perRequest(addr))
	}
	proxy := proxied - direct
	t.Logf("read(2) per request: %.2f direct, %.2f through the proxy: %.2f by the proxy", direct, proxied, proxy)
	if proxy > 2.5 {
		t.Errorf("the proxy makes %.2f read(2) calls per request, want 2 (the response once, the request once)", proxy)
	}
}

// TestAwaitPaths checks the cases around the write that arms the wait
// for the member's answer: pipelined requests, an idle timeout, a member
// that closes its connection after answering, a large response.
func TestAwaitPaths(t *testing.T) {
	// A member that answers one request per connection and closes it
	// without saying so (no Connection: close), like one whose idle
	// timeout just expired.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				_, _ = io.WriteString(c, rawResponse)
			}()
		}
	}()
	big := bytes.Repeat([]byte("x"), 3<<20)
	bigMember := backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(big)
	}))
	s := New(Config{IdleTimeout: 2 * time.Second})
	addr := proxyUnder(t, s, testRouter{
		{prefix: "/closing", route: &Route{Backend: newBackend(t, ln.Addr().String())}},
		{prefix: "/big", route: &Route{Backend: newBackend(t, bigMember)}},
		{route: &Route{Backend: newBackend(t, rawBackend(t, rawResponse))}},
	}, nil)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	read := func(what string) *http.Response {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: body: %v", what, err)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		return resp
	}

	// Three pipelined requests in one write are answered in order.
	fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	for i, want := range []int64{13, int64(len(big)), 13} {
		if resp := read(fmt.Sprint("pipelined ", i)); resp.StatusCode != 200 || resp.ContentLength != want {
			t.Fatalf("pipelined response %d: %d with %d bytes, want 200 with %d", i, resp.StatusCode, resp.ContentLength, want)
		}
	}

	// The member closes each connection after its answer: the next
	// request meets a closed connection and is sent again on a new one.
	for i := range 3 {
		fmt.Fprintf(c, "GET /closing HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp := read(fmt.Sprint("closing member ", i)); resp.StatusCode != 200 {
			t.Fatalf("request %d to a member that closes: %d, want 200", i, resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond) // the member's FIN arrives
	}
	if got := accepted.Load(); got != 3 {
		t.Errorf("the closing member accepted %d connections, want 3", got)
	}

	// The connection stays idle: it is closed after the idle timeout.
	t0 := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF", err)
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("idle connection closed after %v, want about 2s", d)
	}
}

// TestPipelinedDuringExchange sends the next request while the member is
// still answering the first: the proxy read the first request and its
// socket was empty, so the second arrives while nobody waits for it. It
// must be answered (a wait armed after that arrival would never see it).
func TestPipelinedDuringExchange(t *testing.T) {
	member := backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond)
		}
		fmt.Fprint(w, "done")
	}))
	addr := proxyUnder(t, New(Config{IdleTimeout: 30 * time.Second}), oneRoute(newBackend(t, member)), nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	for i := range 3 {
		fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(100 * time.Millisecond) // the proxy has read it and waits for the member
		fmt.Fprint(c, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
		for _, path := range []string{"/slow", "/fast"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("round %d, %s: %v", i, path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "done" {
				t.Fatalf("round %d, %s: %d %q", i, path, resp.StatusCode, body)
			}
		}
	}
}
