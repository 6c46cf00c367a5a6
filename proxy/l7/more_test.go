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
	"sync"
	"testing"
)

// TestLargeResponses relays big bodies by length and until close, which
// take the splice path between bare TCP sockets.
func TestLargeResponses(t *testing.T) {
	payload := bytes.Repeat([]byte("teapot-lb "), 800_000) // 8 MB
	sum := sha256.Sum256(payload)
	byLength := backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(payload)))
		w.Write(payload)
	}))
	byClose := rawServer(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
		c.Write(payload)
	})
	addr := proxyUnder(t, New(Config{}), testRouter{
		{prefix: "/close", route: &Route{Backend: newBackend(t, byClose)}},
		{prefix: "/", route: &Route{Backend: newBackend(t, byLength)}},
	}, nil)
	client := &http.Client{}
	for _, path := range []string{"/length", "/close", "/length"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || sha256.Sum256(body) != sum {
			t.Fatalf("%s: %d bytes, err %v", path, len(body), err)
		}
		if path == "/close" && !resp.Close {
			t.Errorf("%s: a body delimited by close must close the client connection", path)
		}
	}
}

// TestBridgeToH2C sends HTTP/1.1 requests to an h2c member: chunked
// request body in, trailers out.
func TestBridgeToH2C(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Len")
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("X-Xff", r.Header.Get("X-Forwarded-For"))
		fmt.Fprintf(w, "got %d", len(body))
		w.Header().Set("X-Len", fmt.Sprint(len(body)))
	})
	be := newBackend(t, h2cServer(t, h))
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 3 {
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n\r\n5\r\nhello\r\n%x\r\n%s\r\n0\r\n\r\n", i+1, strings.Repeat("!", i+1))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		want := fmt.Sprint(6 + i)
		if string(body) != "got "+want || resp.Header.Get("X-Proto") != "HTTP/2.0" || resp.Trailer.Get("X-Len") != want || resp.Header.Get("X-Xff") != "127.0.0.1" {
			t.Fatalf("request %d: body %q, proto %q, trailer %v, xff %q", i, body, resp.Header.Get("X-Proto"), resp.Trailer, resp.Header.Get("X-Xff"))
		}
	}
}

// recordingMetrics keeps every report.
type recordingMetrics struct {
	mu    sync.Mutex
	reqs  []RequestStats
	conns int
}

func (m *recordingMetrics) Request(s RequestStats) {
	m.mu.Lock()
	m.reqs = append(m.reqs, s)
	m.mu.Unlock()
}

func (m *recordingMetrics) Conn(_ *ConnInfo, open bool) {
	m.mu.Lock()
	if open {
		m.conns++
	}
	m.mu.Unlock()
}

func TestMetrics(t *testing.T) {
	be := newBackend(t, backendServer(t, http.HandlerFunc(echoHandler)))
	m := &recordingMetrics{}
	addr := proxyUnder(t, New(Config{Metrics: m}), testRouter{{prefix: "/a", route: &Route{Name: "route-a", Backend: be}}}, nil)
	rawExchange(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /none HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reqs) != 2 || m.conns != 1 {
		t.Fatalf("reports %+v, connections %d", m.reqs, m.conns)
	}
	a, none := m.reqs[0], m.reqs[1]
	if a.Route != "route-a" || a.Status != 200 || a.Outcome != OutcomeOK || a.Member != be.members[0].addr || a.RequestBytes != 3 || a.ResponseBytes == 0 || a.LB != "t/lb" {
		t.Errorf("proxied request: %+v", a)
	}
	if none.Status != 404 || none.Outcome != OutcomeNoRoute || none.Route != "" {
		t.Errorf("unrouted request: %+v", none)
	}
}

// TestMemberHangsUpOnBody checks a member that closes the connection
// while a streamed request body is pending: the client gets 502, at once.
func TestMemberHangsUpOnBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	addr := proxyUnder(t, New(Config{}), oneRoute(newBackend(t, ln.Addr().String())), nil)
	body := strings.Repeat("b", 200<<10)
	for _, hdr := range []string{"Content-Length: 204800", "Transfer-Encoding: chunked"} {
		req := "POST / HTTP/1.1\r\nHost: x\r\n" + hdr + "\r\n\r\n"
		if strings.HasPrefix(hdr, "Transfer") {
			req += fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		} else {
			req += body
		}
		if got := rawExchange(t, addr, req); statusOf(got) != "502" {
			t.Fatalf("%s: got %.80q", hdr, got)
		}
	}
}
