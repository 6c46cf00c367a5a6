package scenarios

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

const http3ZeroRTTVIP = "127.0.0.141"

// heldConn is a client's UDP socket whose reads wait until release: a
// client dialing on it sends its first flight (ClientHello and 0-RTT
// packets) and cannot finish its handshake until then.
type heldConn struct {
	c                    *net.UDPConn
	gate, done, kicked   chan struct{}
	release, close, kick sync.Once
}

func newHeldConn(t *testing.T, held bool) *heldConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	h := &heldConn{c: c, gate: make(chan struct{}), done: make(chan struct{}), kicked: make(chan struct{})}
	if !held {
		h.open()
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func (h *heldConn) open() { h.release.Do(func() { close(h.gate) }) }
func (h *heldConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case <-h.gate:
	case <-h.done:
		return 0, nil, net.ErrClosed
	case <-h.kicked:
		return 0, nil, os.ErrDeadlineExceeded
	}
	return h.c.ReadFrom(b)
}
func (h *heldConn) WriteTo(b []byte, a net.Addr) (int, error) { return h.c.WriteTo(b, a) }
func (h *heldConn) Close() error {
	h.close.Do(func() { close(h.done) })
	return h.c.Close()
}
func (h *heldConn) LocalAddr() net.Addr                { return h.c.LocalAddr() }
func (h *heldConn) SetDeadline(t time.Time) error      { return h.c.SetDeadline(t) }
func (h *heldConn) SetWriteDeadline(t time.Time) error { return h.c.SetWriteDeadline(t) }

// SetReadDeadline with a time past ends a held read too (quic-go's
// Transport.Close).
func (h *heldConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		h.kick.Do(func() { close(h.kicked) })
	}
	return h.c.SetReadDeadline(t)
}

// ticketCounter counts the session tickets a client is given.
type ticketCounter struct {
	tls.ClientSessionCache
	puts atomic.Int64
}

func (c *ticketCounter) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.puts.Add(1)
	}
	c.ClientSessionCache.Put(key, cs)
}

// TestHTTP3ZeroRTTThroughServe: through the real binary, with an uploaded
// certificate (the certificate manager's session tickets), an https
// listener with http3 and http3ZeroRtt. A client resumes and, its reads
// held so that its handshake cannot complete, sends a GET and a POST in
// 0-RTT: the member gets the GET with Early-Data: 1 before the handshake
// completed, the POST is answered 425 (counted as a 4xx) and never
// reaches the member; once released, the client has both answers.
func TestHTTP3ZeroRTTThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts serve")
	}
	type seen struct {
		method, path, early string
	}
	got := make(chan seen, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Early-Data")}
		fmt.Fprintf(w, "member: %s %s\n", r.Method, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	dir := t.TempDir()
	certFile, keyFile := benchCert(t, dir)
	c := newCluster(t)
	n := c.bootstrap()
	l, err := net.Listen("tcp", http3ZeroRTTVIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	docs := []string{fmt.Sprintf(`
kind: VIPPool
name: h3z
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [h3z]
`, http3ZeroRTTVIP), fmt.Sprintf(`
kind: LoadBalancer
name: h3z
tenant: acme
vip: { pool: h3z, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: https, http3: true, http3ZeroRtt: true, tls: { certificates: [h3z] } }]
routes:
  - { host: %[4]s, path: /, pool: web }
pools: { web: { members: ["%[3]s"] } }
`, http3ZeroRTTVIP, port, ln.Addr().String(), benchTLSHost)}
	for i, doc := range docs {
		p := filepath.Join(dir, fmt.Sprintf("m%d.yaml", i))
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := c.cli(n, "cert", "upload", "h3z", "--tenant", "acme", "--cert", certFile, "--key", keyFile); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := c.cli(n, "apply", "-f", p); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
	}
	addr := net.JoinHostPort(http3ZeroRTTVIP, strconv.Itoa(port))
	if err := waitHandshake(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	udp, _ := net.ResolveUDPAddr("udp", addr)
	cache := &ticketCounter{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	tc := &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost, NextProtos: []string{http3.NextProtoH3}, ClientSessionCache: cache}
	get := func(cc *http3.ClientConn, method, path string) (*http.Response, error) {
		req, _ := http.NewRequest(method, "https://"+benchTLSHost+path, nil)
		resp, err := cc.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	// A first connection, for a session ticket (the listener may take a
	// moment to serve its UDP port).
	waitFor(t, 30*time.Second, "a session ticket", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		qc, err := quic.Dial(ctx, newHeldConn(t, false), udp, tc, &quic.Config{})
		if err != nil {
			return err
		}
		defer qc.CloseWithError(0, "")
		if resp, err := get((&http3.Transport{}).NewClientConn(qc), http.MethodGet, "/prime"); err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("priming request: %v %v", resp, err)
		}
		<-got
		for range 50 {
			if cache.puts.Load() > 0 {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("no session ticket")
	})
	before4xx := requests4xx(t, n)

	h := newHeldConn(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	qc, err := quic.DialEarly(ctx, h, udp, tc, &quic.Config{})
	cancel()
	if err != nil {
		t.Fatalf("0-RTT dial: %v", err)
	}
	defer qc.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(qc)
	getDone := make(chan error, 1)
	go func() {
		resp, err := get(cc, http3.MethodGet0RTT, "/early")
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("GET in 0-RTT: status %d", resp.StatusCode)
		}
		getDone <- err
	}()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	str, err := cc.OpenRequestStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	post, _ := http.NewRequest(http.MethodPost, "https://"+benchTLSHost+"/early-post", http.NoBody)
	if err := str.SendRequestHeader(post); err != nil {
		t.Fatal(err)
	}
	_ = str.Close()

	select {
	case s := <-got:
		if s != (seen{"GET", "/early", "1"}) {
			t.Fatalf("the member saw %+v, want GET /early with Early-Data 1", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the member saw no request from early data")
	}
	waitFor(t, 30*time.Second, "the POST answered with a 4xx", func() error {
		if n := requests4xx(t, n); n <= before4xx {
			return fmt.Errorf("%v 4xx answers", n)
		}
		return nil
	})
	select {
	case <-qc.HandshakeComplete():
		t.Fatal("the handshake completed while the client's reads were held")
	default:
	}
	h.open()
	if err := <-getDone; err != nil {
		t.Fatal(err)
	}
	resp, err := str.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooEarly {
		t.Errorf("POST in 0-RTT: status %d, want 425", resp.StatusCode)
	}
	if !qc.ConnectionState().Used0RTT {
		t.Error("0-RTT not accepted")
	}
	select {
	case s := <-got:
		t.Errorf("the member saw %+v", s)
	default:
	}
}

// requests4xx is host n's count of 4xx answers of the load balancer h3z.
func requests4xx(t *testing.T, n *node) float64 {
	t.Helper()
	ms, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, s := range ms["teapot_lb_http_requests_total"] {
		if s.labels["lb"] == "acme/h3z" && s.labels["code_class"] == "4xx" {
			v += s.value
		}
	}
	return v
}
