package echo

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Each address answers with the name (or its own address) and the request
// line, until the context ends.
func TestServeAnswersNameAndRequestLine(t *testing.T) {
	t.Parallel()
	a, b := freeAddr(t, "127.0.0.1"), freeAddr(t, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, []string{a, b}, "", &out) }()
	get := func(addr, path string) (string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := get(b, "/"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("echo never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []struct{ addr, path, want string }{
		{a, "/hello?x=1", a + ": GET /hello?x=1 HTTP/1.1\n"},
		{b, "/healthz", b + ": GET /healthz HTTP/1.1\n"},
	} {
		got, err := get(c.addr, c.path)
		if err != nil || got != c.want {
			t.Errorf("GET %s%s = %q, %v; want %q", c.addr, c.path, got, err, c.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := get(a, "/"); err == nil {
		t.Error("still answering after the context ended")
	}
}

// A name replaces the address in answers; an address taken is an error
// naming it, and nothing keeps listening.
func TestServeNameAndBusyAddress(t *testing.T) {
	t.Parallel()
	h := handler("web-1", "127.0.0.1:1")
	rec := &recorder{header: http.Header{}}
	req, _ := http.NewRequest("POST", "http://x/p", nil)
	h.ServeHTTP(rec, req)
	if rec.body.String() != "web-1: POST /p HTTP/1.1\n" {
		t.Errorf("answer %q", rec.body.String())
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free := freeAddr(t, "127.0.0.1")
	err = Serve(context.Background(), []string{free, busy.Addr().String()}, "", io.Discard)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(busy.Addr().String())) {
		t.Fatalf("Serve on a busy address: %v", err)
	}
	ln, err := net.Listen("tcp", free)
	if err != nil {
		t.Fatalf("the first address is still held: %v", err)
	}
	ln.Close()
}

type recorder struct {
	header http.Header
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(int)             {}
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
