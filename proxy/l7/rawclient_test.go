package l7

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echoMember answers "METHOD PATH BODYLEN"; /big answers n bytes.
func echoMember(t *testing.T) string {
	return backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/big" {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			_, _ = w.Write(bytes.Repeat([]byte("b"), n))
			return
		}
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(body))
	}))
}

// readEcho reads one response and checks its body.
func readEcho(t *testing.T, br *bufio.Reader, what, want string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: body: %v", what, err)
	}
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("%s: %d %.60q, want 200 %q", what, resp.StatusCode, body, want)
	}
}

// TestClientRequestsBufferedFirst covers how a keep-alive client's next
// request is read: bytes already buffered or already in the socket are
// served before any wait, whatever arrives during an exchange ends the
// wait, and requests that read more from the client (streamed and chunked
// bodies) alternate with those that do not. Each case fails with a
// timeout if a request is left unread.
func TestClientRequestsBufferedFirst(t *testing.T) {
	addr := proxyUnder(t, New(Config{IdleTimeout: 30 * time.Second}), oneRoute(newBackend(t, echoMember(t))), nil)
	dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		return c, bufio.NewReader(c)
	}
	big := strings.Repeat("x", 100<<10)
	mixed := []struct{ req, want string }{
		{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET /a 0"},
		{"POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "POST /small 5"},
		{"POST /streamed HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big, "POST /streamed " + strconv.Itoa(len(big))},
		{"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "POST /chunked 3"},
		{"GET /b HTTP/1.1\r\nHost: x\r\n\r\n", "GET /b 0"},
	}

	t.Run("pipelined in one write", func(t *testing.T) {
		c, br := dial(t)
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

	t.Run("one byte at a time", func(t *testing.T) {
		c, br := dial(t)
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
		// A head split in two, the second part sent after the first was
		// surely read, then a full request.
		fmt.Fprint(c, "GET /split HTTP/1.1\r\nHo")
		time.Sleep(50 * time.Millisecond)
		fmt.Fprint(c, "st: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
		readEcho(t, br, "split head", "GET /split 0")
		readEcho(t, br, "after split head", "GET /after 0")
	})

	t.Run("two in flight", func(t *testing.T) {
		// The next request leaves before the previous response is read,
		// so it reaches the proxy at any point of the exchange: while
		// the request is read, the member answers, the response is
		// written, or the wait for the next request begins.
		c, br := dial(t)
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
		// Large responses to pipelined requests fill the socket buffers
		// while the client reads nothing; then it reads slowly.
		c, br := dial(t)
		const n, size = 8, 512 << 10
		var all strings.Builder
		for range n {
			fmt.Fprintf(&all, "GET /big?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", size)
		}
		all.WriteString("GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := io.WriteString(c, all.String()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		slow := bufio.NewReaderSize(&slowReader{r: br}, 4096)
		want := strings.Repeat("b", size)
		for i := range n {
			readEcho(t, slow, fmt.Sprint("big ", i), want)
		}
		readEcho(t, slow, "last", "GET /last 0")
	})
}

// slowReader reads at most 64 KiB per call and pauses between calls.
type slowReader struct {
	r     io.Reader
	calls int
}

func (s *slowReader) Read(p []byte) (int, error) {
	s.calls++
	if s.calls%16 == 0 {
		time.Sleep(2 * time.Millisecond)
	}
	return s.r.Read(p[:min(len(p), 64<<10)])
}
