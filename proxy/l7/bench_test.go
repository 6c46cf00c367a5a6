package l7

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"
)

const rawResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n"

// rawBackend answers every request head with a fixed response, without
// allocating per request.
func rawBackend(t testing.TB, resp string) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		buf := make([]byte, 16<<10)
		out := []byte(resp)
		n := 0
		for {
			k, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += k
			for {
				i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if i < 0 {
					break
				}
				if _, err := c.Write(out); err != nil {
					return
				}
				n = copy(buf, buf[i+4:n])
			}
		}
	})
}

// rawClient sends one fixed request at a time and reads the fixed-size
// response.
type rawClient struct {
	c    net.Conn
	req  []byte
	buf  []byte
	want int
}

func newRawClient(t testing.TB, addr, req string, respLen int) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{c: c, req: []byte(req), buf: make([]byte, 64<<10), want: respLen}
}

func (rc *rawClient) do(t testing.TB) {
	if _, err := rc.c.Write(rc.req); err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < rc.want {
		k, err := rc.c.Read(rc.buf[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	if n != rc.want {
		t.Fatalf("read %d bytes, want %d: %q", n, rc.want, rc.buf[:n])
	}
}

const benchRequest = "GET /bench HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"

func TestHotPathAllocs(t *testing.T) {
	be := newBackend(t, rawBackend(t, rawResponse))
	addr := proxyUnder(t, New(Config{}), oneRoute(allocFree{be}), nil)
	rc := newRawClient(t, addr, benchRequest, len(rawResponse))
	for range 10 {
		rc.do(t)
	}
	allocs := testing.AllocsPerRun(1000, func() { rc.do(t) })
	if allocs > 0 {
		t.Errorf("%.2f allocations per proxied request, want 0", allocs)
	}
}

// allocFree is a Backend whose members do not record outcomes, so that
// only the proxy's allocations are counted.
type allocFree struct{ b *testBackend }

func (a allocFree) Pick(netip.Addr, []byte) (Member, bool) {
	return quietMember{a.b.members[0]}, true
}
func (a allocFree) Options() *BackendOptions { return &a.b.opts }

func BenchmarkProxyHTTP1(b *testing.B) {
	be := newBackend(b, rawBackend(b, rawResponse))
	addr := proxyUnder(b, New(Config{}), oneRoute(allocFree{be}), nil)
	rc := newRawClient(b, addr, benchRequest, len(rawResponse))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rc.do(b)
	}
}

func BenchmarkDirectHTTP1(b *testing.B) {
	rc := newRawClient(b, rawBackend(b, rawResponse), benchRequest, len(rawResponse))
	b.ReportAllocs()
	for b.Loop() {
		rc.do(b)
	}
}

// quietMember is a Member that records nothing.
type quietMember struct{ m *testMember }

func (q quietMember) Addr() netip.AddrPort           { return q.m.addr }
func (q quietMember) Done(error, int, time.Duration) {}
