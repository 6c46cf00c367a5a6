package l7

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestH2CPriorKnowledge: a cleartext listener serves clients that open
// with the HTTP/2 preface (gRPC without TLS) over HTTP/2, and HTTP/1.1
// clients as before, including one whose request line arrives a byte at
// a time and one whose method starts like the preface.
func TestH2CPriorKnowledge(t *testing.T) {
	protoEcho := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend-Proto", r.Proto)
		echoHandler(w, r)
	})
	h1 := newBackend(t, backendServer(t, protoEcho))
	addr := proxyUnder(t, New(Config{}), testRouter{{prefix: "/", route: &Route{Backend: h1}}}, nil)

	h2c := &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	body := bytes.Repeat([]byte("x"), 100<<10)
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, "http://"+addr+"/a", bytes.NewReader(body))
		resp, err := h2c.Do(req)
		if err != nil {
			t.Fatalf("%s over h2c: %v", method, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			t.Fatalf("%s over h2c: %d %s, want 200 over HTTP/2", method, resp.StatusCode, resp.Proto)
		}
		if got := resp.Header.Get("X-Xfp"); got != "http" {
			t.Errorf("%s over h2c: X-Forwarded-Proto %q, want http", method, got)
		}
		if got := resp.Header.Get("X-Len"); got != fmt.Sprint(len(body)) {
			t.Errorf("%s over h2c: the member got %s body bytes, want %d", method, got, len(body))
		}
	}

	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/a")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 1 || resp.Header.Get("X-Xfp") != "http" {
		t.Fatalf("HTTP/1.1: %d %s X-Forwarded-Proto %q", resp.StatusCode, resp.Proto, resp.Header.Get("X-Xfp"))
	}

	for _, req := range []string{
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"PRIVATE /a HTTP/1.1\r\nHost: x\r\n\r\n", // shares "PRI" with the preface
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(req) {
			if _, err := c.Write([]byte{req[i]}); err != nil {
				t.Fatal(err)
			}
			if i < 6 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 ") {
			t.Errorf("%q sent a byte at a time: %q, %v; want an HTTP/1.1 answer", strings.Fields(req)[0], line, err)
		}
	}
}

// TestH2CPrefaceTrickleTimesOut: a client that sends the HTTP/2 preface a
// byte at a time gets HeaderTimeout for all of it, not for each byte.
func TestH2CPrefaceTrickleTimesOut(t *testing.T) {
	h1 := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	const headerTimeout = 300 * time.Millisecond
	addr := proxyUnder(t, New(Config{HeaderTimeout: headerTimeout}), testRouter{{prefix: "/", route: &Route{Backend: h1}}}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	pre := []byte(http2.ClientPreface)
	first := time.Now()
	// 150ms a byte: 3.6s for the preface, 12 times the header timeout.
	for i := range pre {
		if _, err := c.Write(pre[i : i+1]); err != nil {
			return // closed
		}
		select {
		case <-closed:
			if took := time.Since(first); took < headerTimeout-50*time.Millisecond {
				t.Fatalf("closed %s after the first of %d bytes, before the %s header timeout", took, i+1, headerTimeout)
			}
			return
		case <-time.After(150 * time.Millisecond):
		}
	}
	t.Fatalf("the whole preface, a byte every 150ms, was read with a header timeout of %s", headerTimeout)
}

// TestDrainAsACleartextConnectionEnds: a drain that comes as a cleartext
// connection sends its first bytes or closes, while the engine looks for
// the HTTP/2 preface, never touches the connection after the engine has
// put it back in its pool (the race detector and a nil connection caught
// it: a host handing its clients over crashed).
func TestDrainAsACleartextConnectionEnds(t *testing.T) {
	s := New(Config{DrainIdleGrace: time.Second})
	t.Cleanup(func() { s.Close() })
	be := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })))
	info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return oneRoute(be) }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i := range 300 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.ServeConn(ctx, c, info)
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// The drain races the client's close (even rounds) or its request
		// (odd rounds) and the engine's return.
		if i%2 == 0 {
			go c.Close()
		} else {
			go io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		}
		time.Sleep(time.Duration(i%7) * 50 * time.Microsecond)
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the connection was not served within 30s", i)
		}
		c.Close()
	}
	// Let drain functions that outlived their connection run into a
	// recycled one before the test ends.
	time.Sleep(50 * time.Millisecond)
}
