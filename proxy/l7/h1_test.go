package l7

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// echoHandler answers with the request as it saw it: method, path, the
// fields the tests look at, and a digest of the body.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sum := sha256.Sum256(body)
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-Uri", r.RequestURI)
	w.Header().Set("X-Host", r.Host)
	w.Header().Set("X-Xff", strings.Join(r.Header.Values("X-Forwarded-For"), ","))
	w.Header().Set("X-Xfp", r.Header.Get("X-Forwarded-Proto"))
	w.Header().Set("X-Xfh", r.Header.Get("X-Forwarded-Host"))
	w.Header().Set("X-Fwd", strings.Join(r.Header.Values("Forwarded"), ","))
	w.Header().Set("X-Rid", r.Header.Get("X-Request-Id"))
	w.Header().Set("X-Te", r.Header.Get("Te"))
	w.Header().Set("X-Hop", r.Header.Get("X-Hop")+r.Header.Get("Keep-Alive")+r.Header.Get("Proxy-Authorization"))
	w.Header().Set("X-Len", fmt.Sprint(len(body)))
	w.Header().Set("X-Sum", fmt.Sprintf("%x", sum[:8]))
	w.Header().Set("Connection", "X-Secret")
	w.Header().Set("X-Secret", "hidden")
	fmt.Fprintf(w, "ok %s", r.URL.Path)
}

func TestHTTP1Proxy(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, ExpectContinueTimeout: time.Second}}
	defer client.CloseIdleConnections()

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	bigSum := sha256.Sum256(big)
	tests := []struct {
		name   string
		method string
		path   string
		body   io.Reader
		cl     int64
		hdr    map[string]string
		want   map[string]string
		status int
		resp   string
	}{
		{name: "get", method: "GET", path: "/a/b?x=1", status: 200, resp: "ok /a/b",
			want: map[string]string{"X-Uri": "/a/b?x=1", "X-Xff": "127.0.0.1", "X-Xfp": "http", "X-Te": "", "X-Secret": "",
				"X-Fwd": `for=127.0.0.1;host="` + addr + `";proto=http`, "X-Xfh": addr}},
		{name: "dot segments", method: "GET", path: "/a/./b/../c", status: 200, resp: "ok /a/c", want: map[string]string{"X-Uri": "/a/c"}},
		{name: "spoofed forwarding fields", method: "GET", path: "/", status: 200,
			hdr:  map[string]string{"X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9", "X-Forwarded-Proto": "https"},
			want: map[string]string{"X-Xff": "127.0.0.1", "X-Xfp": "http"}},
		{name: "hop-by-hop", method: "GET", path: "/", status: 200,
			hdr:  map[string]string{"Connection": "X-Hop, keep-alive", "X-Hop": "1", "Keep-Alive": "timeout=5", "Proxy-Authorization": "Basic x", "Te": "trailers, deflate"},
			want: map[string]string{"X-Hop": "", "X-Te": "trailers"}},
		{name: "post small", method: "POST", path: "/p", body: strings.NewReader("hello"), cl: 5, status: 200, want: map[string]string{"X-Len": "5"}},
		{name: "post large", method: "POST", path: "/p", body: bytes.NewReader(big), cl: int64(len(big)), status: 200,
			want: map[string]string{"X-Len": fmt.Sprint(len(big)), "X-Sum": fmt.Sprintf("%x", bigSum[:8])}},
		{name: "post chunked", method: "POST", path: "/p", body: io.MultiReader(strings.NewReader("abc"), bytes.NewReader(big)), cl: -1, status: 200,
			want: map[string]string{"X-Len": fmt.Sprint(len(big) + 3)}},
		{name: "expect 100-continue", method: "PUT", path: "/p", body: bytes.NewReader(big), cl: int64(len(big)), status: 200,
			hdr: map[string]string{"Expect": "100-continue"}, want: map[string]string{"X-Len": fmt.Sprint(len(big))}},
		{name: "head", method: "HEAD", path: "/h", status: 200, want: map[string]string{"X-Method": "HEAD"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://"+addr+tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.cl
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			if tc.resp != "" && string(body) != tc.resp {
				t.Errorf("body %q, want %q", body, tc.resp)
			}
			for k, v := range tc.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if rid := resp.Header.Get("X-Rid"); tc.hdr["X-Request-Id"] == "" && tc.method != "HEAD" && len(rid) != 32 {
				t.Errorf("generated request id %q", rid)
			}
		})
	}
}

// TestHTTP1KeepAlive checks that one client connection carries many
// requests and the member sees one connection too.
func TestHTTP1KeepAlive(t *testing.T) {
	var conns sync32
	srv := &http.Server{Handler: http.HandlerFunc(echoHandler), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.add()
		}
	}}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Close()
	be := newBackend(t, ln.Addr().String())
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 50 {
		fmt.Fprintf(c, "GET /k%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != fmt.Sprintf("ok /k%d", i) {
			t.Fatalf("response %d: %q", i, b)
		}
	}
	// Pipelined requests are answered in order.
	fmt.Fprintf(c, "GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"ok /p1", "ok /p2"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != want {
			t.Fatalf("pipelined: %q, want %q", b, want)
		}
	}
	if n := conns.get(); n != 1 {
		t.Errorf("member saw %d connections, want 1", n)
	}
}
