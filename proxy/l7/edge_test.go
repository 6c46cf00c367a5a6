package l7

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEdgeLimits sends malformed and oversized requests on raw sockets and
// checks the status each one gets, and that error pages leak nothing.
func TestEdgeLimits(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	limited := newBackend(t, be.members[0].addr.String())
	limited.opts.MaxBodyBytes = 10
	s := New(Config{HeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond})
	addr := proxyUnder(t, s, testRouter{
		{prefix: "/limited", route: &Route{Name: "limited", Backend: limited}},
		{prefix: "/", route: &Route{Name: "all", Backend: be}},
	}, nil)
	many := strings.Repeat("X-A: b\r\n", 101)
	tests := []struct {
		name, req, want string
	}{
		{"ok", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "200"},
		{"content-length and transfer-encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"duplicate content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nab", "400"},
		{"conflicting content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400"},
		{"content-length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\na", "400"},
		{"negative content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "400"},
		{"signed content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\na", "400"},
		{"gzip transfer-encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "400"},
		{"chunked twice", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"chunked list", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "400"},
		{"transfer-encoding in HTTP/1.0", "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n", "400"},
		{"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", "400"},
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", "400"},
		{"NUL in value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", "400"},
		{"no host", "GET / HTTP/1.1\r\n\r\n", "400"},
		{"two hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", "400"},
		{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "400"},
		{"bad request line", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"bad target", "GET x HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"userinfo", "GET http://u@x/ HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"bad chunk size", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n", "400"},
		{"chunk size 0x", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\na\r\n0\r\n\r\n", "400"},
		{"chunk size overflow", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\na\r\n", "400"},
		{"chunk bare LF", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\na\r\n0\r\n\r\n", "400"},
		{"chunk without CRLF", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", "400"},
		{"HTTP/2.0 version", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", "505"},
		{"CONNECT", "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", "405"},
		{"slow head", "GET / HTTP/1.1\r\nHost: x\r\n", "408"},
		{"slow body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", "408"},
		{"body too large", "POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n0123456789a", "413"},
		{"chunked body too large", "POST /limited HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n0123456789a\r\n0\r\n\r\n", "413"},
		{"body at limit", "POST /limited HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10\r\n\r\n0123456789", "200"},
		{"head too large", "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", "431"},
		{"too many fields", "GET / HTTP/1.1\r\nHost: x\r\n" + many + "\r\n", "431"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := rawExchange(t, addr, tc.req)
			if statusOf(got) != tc.want {
				t.Fatalf("got %q, want status %s", got, tc.want)
			}
			if tc.want != "200" {
				if !strings.Contains(got, "Connection: close") {
					t.Errorf("error response does not close: %q", got)
				}
				if strings.Contains(got, "127.0.0.1") || strings.Contains(strings.ToLower(got), "error:") {
					t.Errorf("error page leaks details: %q", got)
				}
			}
		})
	}
}

// TestUpstreamErrors checks 502, 503, 504 and 404, and that they keep the
// connection open.
func TestUpstreamErrors(t *testing.T) {
	// A port nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := ln.Addr().String()
	ln.Close()
	slow := backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}))
	garbage := rawBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")
	down := newBackend(t, refused)
	down.members[0].down.Store(true)
	slowBe := newBackend(t, slow)
	slowBe.opts.ResponseHeaderTimeout = 200 * time.Millisecond
	refusedBe := newBackend(t, refused)
	addr := proxyUnder(t, New(Config{}), testRouter{
		{prefix: "/refused", route: &Route{Backend: refusedBe}},
		{prefix: "/down", route: &Route{Backend: down}},
		{prefix: "/slow", route: &Route{Backend: slowBe}},
		{prefix: "/garbage", route: &Route{Backend: newBackend(t, garbage)}},
	}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct{ path, want string }{
		{"/refused", "502"}, {"/down", "503"}, {"/slow", "504"}, {"/garbage", "502"}, {"/none", "404"}, {"/refused", "502"},
	} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", tc.path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if fmt.Sprint(resp.StatusCode) != tc.want {
			t.Errorf("%s: status %d, want %s", tc.path, resp.StatusCode, tc.want)
		}
		if strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "refused") {
			t.Errorf("%s: error page leaks details: %s", tc.path, body)
		}
	}
	errs, statuses := refusedBe.members[0].outcomes()
	if len(errs) == 0 || errs[0] == nil || statuses[0] != 0 {
		t.Errorf("refused member outcomes %v %v, want a connect error", errs, statuses)
	}
	if errs, _ := slowBe.members[0].outcomes(); len(errs) != 1 || errs[0] == nil {
		t.Errorf("slow member outcomes %v, want one timeout", errs)
	}
}

// TestRetryNextMember checks that a refused connect moves on to another
// member.
func TestRetryNextMember(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := ln.Addr().String()
	ln.Close()
	be := newBackend(t, refused, backendServer(t, http.HandlerFunc(echoHandler)))
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	for i := range 4 {
		if got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); statusOf(got) != "200" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
}
