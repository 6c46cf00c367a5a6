package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

func TestRouting(t *testing.T) {
	name := func(n string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, n) })
	}
	shop, api, any := newBackend(t, backendServer(t, name("shop"))), newBackend(t, backendServer(t, name("api"))), newBackend(t, backendServer(t, name("any")))
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "local "+r.URL.Path) })
	addr := proxyUnder(t, New(Config{}), testRouter{
		{host: "shop.example", prefix: "/api", route: &Route{Name: "api", Backend: api}},
		{host: "shop.example", prefix: "/.well-known/acme-challenge/", route: &Route{Name: "acme", Handler: local}},
		{host: "shop.example", prefix: "/", route: &Route{Name: "shop", Backend: shop}},
		{host: "secure.example", prefix: "/", route: &Route{Name: "redirect", RedirectHTTPS: true}},
		{host: "port.example", prefix: "/", route: &Route{Name: "redirect", RedirectHTTPS: true, HTTPSPort: 8443}},
		{host: "", prefix: "/any", route: &Route{Name: "any", Backend: any}},
	}, nil)
	tests := []struct {
		name, req, status, body, location string
	}{
		{"exact host", "GET / HTTP/1.1\r\nHost: shop.example\r\n", "200", "shop", ""},
		{"host any case with port", "GET / HTTP/1.1\r\nHost: SHOP.Example.:8080\r\n", "200", "shop", ""},
		{"path prefix", "GET /api/v1 HTTP/1.1\r\nHost: shop.example\r\n", "200", "api", ""},
		{"dot segments cannot escape a route", "GET /api/../x HTTP/1.1\r\nHost: shop.example\r\n", "200", "shop", ""},
		{"encoded dot segments", "GET /x/%2e%2e/api/v HTTP/1.1\r\nHost: shop.example\r\n", "200", "api", ""},
		{"absolute form", "GET http://shop.example/api HTTP/1.1\r\nHost: other\r\n", "200", "api", ""},
		{"local handler", "GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: shop.example\r\n", "200", "local /.well-known/acme-challenge/tok", ""},
		{"any host", "GET /any HTTP/1.1\r\nHost: other.example\r\n", "200", "any", ""},
		{"no route", "GET /none HTTP/1.1\r\nHost: other.example\r\n", "404", "", ""},
		{"redirect GET", "GET /a?b=c HTTP/1.1\r\nHost: secure.example\r\n", "301", "", "https://secure.example/a?b=c"},
		{"redirect POST", "POST /form HTTP/1.1\r\nHost: secure.example\r\nContent-Length: 2\r\n\r\nab", "308", "", "https://secure.example/form"},
		{"redirect port", "GET / HTTP/1.1\r\nHost: port.example:80\r\n", "301", "", "https://port.example:8443/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			if !strings.Contains(req, "\r\n\r\n") {
				req += "\r\n"
			}
			req = strings.Replace(req, "\r\n", "\r\nConnection: close\r\n", 1)
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(rawExchange(t, addr, req))), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if fmt.Sprint(resp.StatusCode) != tc.status {
				t.Fatalf("status %d, want %s", resp.StatusCode, tc.status)
			}
			if tc.body != "" && string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
			if loc := resp.Header.Get("Location"); loc != tc.location {
				t.Errorf("Location %q, want %q", loc, tc.location)
			}
		})
	}
}

// TestResponseFraming covers chunked passthrough, dechunking for HTTP/1.0
// clients, trailers, and responses without a body on a kept connection.
func TestResponseFraming(t *testing.T) {
	h := http.NewServeMux()
	h.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		for i := range 3 {
			fmt.Fprintf(w, "part%d;", i)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Sum", "done")
	})
	h.HandleFunc("/204", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	h.HandleFunc("/304", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) })
	h.HandleFunc("/h2c", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upgrade=%q settings=%q conn=%q", r.Header.Get("Upgrade"), r.Header.Get("Http2-Settings"), r.Header.Get("Connection"))
	})
	addr := proxyUnder(t, New(Config{}), oneRoute(newBackend(t, backendServer(t, h))), nil)

	t.Run("chunked with trailers", func(t *testing.T) {
		c, _ := net.Dial("tcp", addr)
		defer c.Close()
		br := bufio.NewReader(c)
		for range 2 {
			fmt.Fprint(c, "GET /chunked HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != "part0;part1;part2;" || resp.TransferEncoding[0] != "chunked" || resp.Trailer.Get("X-Sum") != "done" {
				t.Fatalf("body %q, encoding %v, trailer %v", body, resp.TransferEncoding, resp.Trailer)
			}
		}
	})
	t.Run("HTTP/1.0 client", func(t *testing.T) {
		got := rawExchange(t, addr, "GET /chunked HTTP/1.0\r\nHost: x\r\n\r\n")
		if !strings.HasSuffix(got, "\r\n\r\npart0;part1;part2;") || strings.Contains(got, "chunked") || !strings.Contains(got, "Connection: close") {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("no body", func(t *testing.T) {
		c, _ := net.Dial("tcp", addr)
		defer c.Close()
		br := bufio.NewReader(c)
		for _, p := range []string{"/204", "/304", "/204", "/chunked"} {
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", p)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			io.Copy(io.Discard, resp.Body)
			if want := p[1:]; want != "chunked" && fmt.Sprint(resp.StatusCode) != want {
				t.Fatalf("%s: status %d", p, resp.StatusCode)
			}
		}
	})
	t.Run("h2c upgrade not forwarded", func(t *testing.T) {
		got := rawExchange(t, addr, "GET /h2c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n")
		if statusOf(got) != "200" || !strings.HasSuffix(got, `upgrade="" settings="" conn=""`) {
			t.Fatalf("got %q", got)
		}
	})
}

func TestHashHeaderAndMemberOutcomes(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	be.opts.HashHeader = "X-User"
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nx-user: alice\r\nConnection: close\r\n\r\n")
	if statusOf(got) != "200" || be.lastKey.Load() != "alice" {
		t.Fatalf("status %s, hash key %q", statusOf(got), be.lastKey.Load())
	}
	errs, statuses := be.members[0].outcomes()
	if len(errs) != 1 || errs[0] != nil || statuses[0] != 200 || be.members[0].inflight.Load() != 0 {
		t.Errorf("outcomes %v %v, in flight %d", errs, statuses, be.members[0].inflight.Load())
	}
}

// wsEcho sends every message back whole.
func wsEcho(ws *websocket.Conn) {
	for {
		var msg string
		if websocket.Message.Receive(ws, &msg) != nil || websocket.Message.Send(ws, msg) != nil {
			return
		}
	}
}

func TestWebSocket(t *testing.T) {
	wsAddr := backendServer(t, websocket.Handler(wsEcho))
	addr := proxyUnder(t, New(Config{}), oneRoute(newBackend(t, wsAddr)), nil)
	ws, err := websocket.Dial("ws://"+addr+"/echo", "", "http://"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for i := range 100 {
		msg := strings.Repeat(fmt.Sprint(i), 1+i*100)
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatal(err)
		}
		if got != msg {
			t.Fatalf("echo %d: %d bytes, want %d", i, len(got), len(msg))
		}
	}
}

// TestTunnelIdle checks that an idle upgraded connection is closed.
func TestTunnelIdle(t *testing.T) {
	wsAddr := backendServer(t, websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	addr := proxyUnder(t, New(Config{TunnelTimeout: 100 * time.Millisecond}), oneRoute(newBackend(t, wsAddr)), nil)
	ws, err := websocket.Dial("ws://"+addr+"/echo", "", "http://"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(2 * time.Second))
	var got string
	start := time.Now()
	if err := websocket.Message.Receive(ws, &got); err == nil || time.Since(start) > time.Second {
		t.Fatalf("idle tunnel: err %v after %v", err, time.Since(start))
	}
}

// TestProxyProtocolToMember checks the PROXY header a member receives and
// that such connections are not shared between clients.
func TestProxyProtocolToMember(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	headers := make(chan string, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				headers <- line
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	be := newBackend(t, ln.Addr().String())
	be.opts.ProxyProtocol = 1
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for range 3 {
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("response %v %v", resp, err)
			}
			io.Copy(io.Discard, resp.Body)
		}
		local := c.LocalAddr().(*net.TCPAddr)
		want := fmt.Sprintf("PROXY TCP4 127.0.0.1 %s %d %s\r\n", strings.Split(addr, ":")[0], local.Port, strings.Split(addr, ":")[1])
		if got := <-headers; got != want {
			t.Errorf("PROXY header %q, want %q", got, want)
		}
		c.Close()
	}
	if len(headers) != 0 {
		t.Errorf("%d extra member connections", len(headers))
	}
}

func TestAppendProxyHeaderV2(t *testing.T) {
	src, dst := netip.MustParseAddrPort("[2001:db8::1]:1000"), netip.MustParseAddrPort("192.0.2.1:443")
	b := appendProxyHeader(nil, 2, src, dst)
	if len(b) != 16+36 || b[12] != 0x21 || b[13] != 0x21 || b[15] != 36 {
		t.Fatalf("header % x", b)
	}
	if b := appendProxyHeader(nil, 2, netip.MustParseAddrPort("192.0.2.9:1"), dst); len(b) != 16+12 || b[13] != 0x11 {
		t.Fatalf("v4 header % x", b)
	}
}

// TestHTTPSClientFields checks the forwarding fields of a TLS client on
// the HTTP/1.1 path.
func TestHTTPSClientFields(t *testing.T) {
	cfg := selfSigned(t)
	cfg.NextProtos = []string{"http/1.1"}
	addr := proxyUnder(t, New(Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}),
		oneRoute(newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))), cfg)
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.1.1.1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("X-Xff"); got != "10.1.1.1,127.0.0.1" {
		t.Errorf("trusted X-Forwarded-For %q", got)
	}
	if got := resp.Header.Get("X-Fwd"); got != "for=127.0.0.1;host=x;proto=https" {
		t.Errorf("Forwarded %q", got)
	}
	if got := resp.Header.Get("X-Xfp"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q", got)
	}
}

// TestDrain checks that cancelling the connection context lets a busy
// connection finish its response with Connection: close, answers the next
// request of an idle one with Connection: close, and closes an idle one
// that sends none at the end of the grace, not before.
func TestDrain(t *testing.T) {
	slow := backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(200 * time.Millisecond)
		}
		fmt.Fprint(w, "done")
	}))
	// Long enough that the idle connection's request, sent after the
	// busy one's 200ms answer, arrives within it on a loaded machine.
	const grace = 2 * time.Second
	s := New(Config{DrainIdleGrace: grace})
	defer s.Close()
	router := oneRoute(newBackend(t, slow))
	info := ConnInfo{Router: func() Router { return router }}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.ServeConn(ctx, c, info)
		}
	}()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, path string, wantClose bool) {
		t.Helper()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "done" || resp.Close != wantClose {
			t.Fatalf("%s: body %q, close %v (want %v)", path, body, resp.Close, wantClose)
		}
	}
	idle, idleR := dial()
	quiet, quietR := dial()
	busy, busyR := dial()
	get(idle, idleR, "/", false)
	get(quiet, quietR, "/", false)
	fmt.Fprint(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	drained := time.Now()
	cancel()
	resp, err := http.ReadResponse(busyR, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "done" || !resp.Close {
		t.Errorf("busy connection: body %q, close %v", body, resp.Close)
	}
	// An idle connection gets one more answer, which closes it.
	get(idle, idleR, "/", true)
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idleR.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection after its last answer: read %d, %v; want EOF", n, err)
	}
	// One without a request closes at the end of the grace.
	_ = quiet.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := quietR.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("quiet connection: read %d, %v; want EOF", n, err)
	}
	if took := time.Since(drained); took < grace-50*time.Millisecond {
		t.Errorf("quiet connection closed %s after the drain, before the %s grace", took, grace)
	}
	// A connection accepted after the drain serves its request and closes.
	late, lateR := dial()
	get(late, lateR, "/", true)
}
