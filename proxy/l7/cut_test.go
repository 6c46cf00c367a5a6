package l7

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// stuckMember accepts connections, reads a request head and answers
// with answer (nothing when empty), then holds the connection open until
// the test ends. It tells got of each request.
func stuckMember(t *testing.T, answer string, got chan<- struct{}) string {
	t.Helper()
	done := make(chan struct{})
	addr := rawServer(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		var head []byte
		for !strings.Contains(string(head), "\r\n\r\n") {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			head = append(head, buf[:n]...)
		}
		got <- struct{}{}
		if answer != "" {
			_, _ = io.WriteString(c, answer)
		}
		<-done
	})
	t.Cleanup(func() { close(done) }) // runs before rawServer's close
	return addr
}

// TestCutEndsTheMemberExchange: ConnState.Cut, what an owner calls before
// it closes a connection by force, ends the exchange with a member that
// does not answer (or stops in the middle of its body) at once, over bare
// TCP and TLS (both served from the socket's read callback, where a close
// of the client connection waits for the callback), without an answer of
// the proxy's own and without blaming the member; the engine then closes
// the connection. Without Cut the request waits for the response header
// (or body) timeout.
func TestCutEndsTheMemberExchange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer, want string
		tls                bool
	}{
		{name: "no answer"},
		{name: "no answer over TLS", tls: true},
		{name: "body cut short", answer: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", want: "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan struct{}, 1)
			be := newBackend(t, stuckMember(t, tc.answer, got))
			state := new(ConnState)
			s := New(Config{ResponseHeaderTimeout: time.Minute, BodyTimeout: time.Minute})
			info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", State: state, Router: func() Router { return oneRoute(be) }}
			var tlsCfg *tls.Config
			if tc.tls {
				tlsCfg = selfSigned(t)
			}
			addr := proxyUnderInfo(t, s, info, tlsCfg)
			var c net.Conn
			var err error
			if tc.tls {
				c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			} else {
				c, err = net.Dial("tcp", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /stuck HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the request did not reach the member")
			}
			state.Cut()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the exchange goes on after Cut (read %q)", b)
			}
			if tc.want == "" && len(b) > 0 {
				t.Fatalf("an answer after Cut: %q", b)
			}
			if !strings.HasSuffix(string(b), tc.want) {
				t.Fatalf("read %q, want the member's bytes up to %q", b, tc.want)
			}
			m := be.members[0]
			for start := time.Now(); m.inflight.Load() != 0; time.Sleep(time.Millisecond) {
				if time.Since(start) > 10*time.Second {
					t.Fatal("the member's exchange was not settled")
				}
			}
			if errs, _ := m.outcomes(); len(errs) != 1 || errs[0] != nil {
				t.Fatalf("member outcomes %v, want one without error: the cut is not the member's fault", errs)
			}
		})
	}
}
