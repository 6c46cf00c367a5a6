package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// tlsServed is a loopback TLS listener served by an engine.
type tlsServed struct {
	addr  string
	drain context.CancelFunc // drains the connections
	mu    sync.Mutex
	conns map[net.Conn]bool // being served
}

// closeAll closes the connections being served.
func (p *tlsServed) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *tlsServed) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// tlsProxy serves s on a loopback TLS listener whose connections have
// ClientTransport under them, or, with plain set, the TCP connection as
// it is.
func tlsProxy(t testing.TB, s *Server, router Router, plain bool) *tlsServed {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := selfSigned(t)
	ctx, cancel := context.WithCancel(context.Background())
	p := &tlsServed{addr: ln.Addr().String(), drain: cancel, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		p.closeAll()
		wg.Wait()
		s.Close()
	})
	info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			under := c
			if !plain {
				under = ClientTransport(c)
			}
			nc := tls.Server(under, cfg)
			p.mu.Lock()
			p.conns[nc] = true
			p.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ServeConn(ctx, nc, info)
				p.mu.Lock()
				delete(p.conns, nc)
				p.mu.Unlock()
			}()
		}
	}()
	return p
}

// dialTLS opens an HTTP/1.1 TLS connection to addr over the connection
// wrap makes of the TCP one (nil: as it is).
func dialTLS(t testing.TB, addr string, wrap func(net.Conn) net.Conn) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		c = wrap(c)
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(60 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// splitConn writes each buffer in two halves, 5 ms apart, so that TLS
// records reach the proxy in pieces.
type splitConn struct{ net.Conn }

func (s splitConn) Write(p []byte) (int, error) {
	if len(p) < 2 {
		return s.Conn.Write(p)
	}
	h := len(p) / 2
	n, err := s.Conn.Write(p[:h])
	if err != nil {
		return n, err
	}
	time.Sleep(5 * time.Millisecond)
	m, err := s.Conn.Write(p[h:])
	return n + m, err
}

// TestTLSClientRequestsBufferedFirst is TestClientRequestsBufferedFirst
// for HTTP/1.1 over TLS, served from the socket's read callback with
// crypto/tls reading through ClientTransport: pipelined requests in one
// write and in flight during exchanges, records split across reads,
// bodies read outside the callback, and a slow reader of large
// responses. Each case fails with a timeout if a request is left unread.
func TestTLSClientRequestsBufferedFirst(t *testing.T) {
	addr := tlsProxy(t, New(Config{IdleTimeout: 30 * time.Second}), oneRoute(newBackend(t, echoMember(t))), false).addr
	big := strings.Repeat("x", 100<<10)
	mixed := []struct{ req, want string }{
		{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET /a 0"},
		{"POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "POST /small 5"},
		{"POST /streamed HTTP/1.1\r\nHost: x\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big, "POST /streamed " + fmt.Sprint(len(big))},
		{"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "POST /chunked 3"},
		{"GET /b HTTP/1.1\r\nHost: x\r\n\r\n", "GET /b 0"},
	}

	t.Run("pipelined in one write", func(t *testing.T) {
		c := dialTLS(t, addr, nil)
		br := bufio.NewReader(c)
		var all strings.Builder
		for range 3 {
			for _, m := range mixed {
				all.WriteString(m.req)
			}
		}
		go func() { _, _ = io.WriteString(c, all.String()) }()
		for i := range 3 {
			for _, m := range mixed {
				readEcho(t, br, fmt.Sprint("round ", i, " ", m.want), m.want)
			}
		}
	})

	t.Run("records split across reads", func(t *testing.T) {
		c := dialTLS(t, addr, func(c net.Conn) net.Conn { return splitConn{c} })
		br := bufio.NewReader(c)
		for _, m := range mixed {
			if _, err := io.WriteString(c, m.req); err != nil {
				t.Fatal(err)
			}
			readEcho(t, br, m.want, m.want)
		}
	})

	t.Run("one byte per record", func(t *testing.T) {
		c := dialTLS(t, addr, nil)
		br := bufio.NewReader(c)
		for _, m := range mixed[:2] {
			for i := range len(m.req) {
				if _, err := c.Write([]byte{m.req[i]}); err != nil {
					t.Fatal(err)
				}
				if i%8 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			readEcho(t, br, m.want, m.want)
		}
	})

	t.Run("two in flight", func(t *testing.T) {
		c := dialTLS(t, addr, nil)
		br := bufio.NewReader(c)
		const n = 1000
		errc := make(chan error, 1)
		sent := make(chan struct{}, 2)
		go func() {
			for i := range n {
				sent <- struct{}{}
				if _, err := fmt.Fprintf(c, "GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n", i); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for i := range n {
			readEcho(t, br, fmt.Sprint("request ", i), fmt.Sprint("GET /r", i, " 0"))
			<-sent
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("slow reader", func(t *testing.T) {
		c := dialTLS(t, addr, nil)
		br := bufio.NewReader(c)
		const n, size = 8, 512 << 10
		var all strings.Builder
		for range n {
			fmt.Fprintf(&all, "GET /big?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", size)
		}
		all.WriteString("GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
		go func() { _, _ = io.WriteString(c, all.String()) }()
		time.Sleep(300 * time.Millisecond)
		slow := bufio.NewReaderSize(&slowReader{r: br}, 4096)
		want := strings.Repeat("b", size)
		for i := range n {
			readEcho(t, slow, fmt.Sprint("big ", i), want)
		}
		readEcho(t, slow, "last", "GET /last 0")
	})
}

// TestTLSClientWaitEnds checks that a TLS client waited for in the read
// callback is let go as a bare TCP one: at the idle timeout, at the
// header timeout of a partial head (408), when a drain's grace ends, and
// when its connection is closed under it.
func TestTLSClientWaitEnds(t *testing.T) {
	const idle, header, grace = 400 * time.Millisecond, 600 * time.Millisecond, 300 * time.Millisecond
	member := newBackend(t, echoMember(t))
	// closedWithin reads until the proxy closes c and returns what came
	// and how long it took. It fails after 20 s: the idle timeout of the
	// last two cases is a minute.
	closedWithin := func(t *testing.T, c *tls.Conn) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(20 * time.Second))
		b, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("not closed after %v: %v", time.Since(start), err)
		}
		return string(b), time.Since(start)
	}
	oneRequest := func(t *testing.T, c *tls.Conn) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		readEcho(t, bufio.NewReader(c), "request", "GET /a 0")
	}

	t.Run("idle timeout", func(t *testing.T) {
		p := tlsProxy(t, New(Config{IdleTimeout: idle}), oneRoute(member), false)
		c := dialTLS(t, p.addr, nil)
		oneRequest(t, c)
		if got, d := closedWithin(t, c); got != "" {
			t.Errorf("closed after %v with %q, want nothing", d, got)
		}
	})

	t.Run("header timeout", func(t *testing.T) {
		p := tlsProxy(t, New(Config{HeaderTimeout: header}), oneRoute(member), false)
		c := dialTLS(t, p.addr, nil)
		oneRequest(t, c)
		if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHo"); err != nil {
			t.Fatal(err)
		}
		got, d := closedWithin(t, c)
		if !strings.HasPrefix(got, "HTTP/1.1 408 ") {
			t.Errorf("after %v: %.40q, want a 408", d, got)
		}
	})

	// The idle timeout of the last two is a minute: only the drain, or
	// the close, ends the wait in time.
	t.Run("drain", func(t *testing.T) {
		p := tlsProxy(t, New(Config{IdleTimeout: time.Minute, DrainIdleGrace: grace}), oneRoute(member), false)
		c := dialTLS(t, p.addr, nil)
		oneRequest(t, c)
		time.Sleep(50 * time.Millisecond) // waiting for its next request
		p.drain()
		if got, d := closedWithin(t, c); got != "" {
			t.Errorf("closed after %v with %q, want nothing", d, got)
		}
	})

	t.Run("closed under it", func(t *testing.T) {
		p := tlsProxy(t, New(Config{IdleTimeout: time.Minute}), oneRoute(member), false)
		c := dialTLS(t, p.addr, nil)
		oneRequest(t, c)
		time.Sleep(50 * time.Millisecond)
		if n := p.open(); n != 1 {
			t.Fatalf("%d connections served, want 1", n)
		}
		p.closeAll()
		deadline := time.Now().Add(20 * time.Second)
		for p.open() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the connection is still served 20 s after it was closed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
