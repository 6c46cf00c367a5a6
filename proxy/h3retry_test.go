package proxy

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// TestHTTP3BindRetried: an https listener with http3 whose UDP port is
// taken when it starts is reported (status, observation) and advertises
// no Alt-Svc; once the port is freed, the bind retry timer binds it with
// no change to the listener, within its backoff bound, and then Alt-Svc
// is advertised, an HTTP/3 client is served and the problem is gone.
func TestHTTP3BindRetried(t *testing.T) {
	t.Parallel()
	main := startRoutingBackend(t, "main")
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	const maxRetry = 400 * time.Millisecond
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv), BindRetry: 50 * time.Millisecond, MaxBindRetry: maxRetry})
	port := freePort(t)
	target := vipAddr("127.0.0.2", port)
	taken, err := net.ListenPacket("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	lb := h3LB(port, map[string]*routingBackend{"main": main})
	lb.Routes = lb.Routes[:1]
	update(t, p, lb)
	if st := p.Status()["acme/gw"]; len(st) != 1 || st[0].Field != "listeners[0].http3" || !strings.Contains(st[0].Reason, "retried with backoff") {
		t.Fatalf("status %+v, want listeners[0].http3 retried with backoff", st)
	}
	// Several retries fail while the port is taken: still reported, still
	// no Alt-Svc.
	waitFor(t, 10*time.Second, "retries to back off to their bound", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.retry.delay == maxRetry
	})
	if st := p.Status()["acme/gw"]; len(st) != 1 {
		t.Fatalf("status while the port is taken %+v", st)
	}
	resp, err := doTLS(target, "/x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Alt-Svc") != "" {
		t.Fatalf("while the UDP port is taken: status %d, Alt-Svc %q, want 200 and none", resp.StatusCode, resp.Header.Get("Alt-Svc"))
	}
	key := snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}
	if _, ok := p.h3Addr(key); ok {
		t.Fatal("HTTP/3 served on a port another socket holds")
	}

	freed := time.Now()
	taken.Close()
	// The retry bound is maxRetry; the deadline adds room for a loaded
	// machine.
	waitFor(t, maxRetry+5*time.Second, "the UDP port bound on retry", func() bool {
		_, ok := p.h3Addr(key)
		return ok
	})
	took := time.Since(freed)
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("status after the port was bound %+v", st)
	}
	resp, err = doTLS(target, "/x")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Alt-Svc"); !strings.HasPrefix(got, `h3=":`) {
		t.Fatalf("after the UDP port was bound: Alt-Svc %q", got)
	}
	client := newH3Client(t, target)
	resp, err = client.do("GET", "https://gw.acme.example/x", nil, "")
	if err != nil {
		t.Fatalf("HTTP/3 after the retry: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 3 {
		t.Fatalf("HTTP/3 after the retry: %s %d", resp.Proto, resp.StatusCode)
	}
	t.Logf("bound %v after the port was freed (retry bound %v)", took.Round(time.Millisecond), maxRetry)
	p.mu.Lock()
	missing := p.missing
	p.mu.Unlock()
	if missing != 0 {
		t.Errorf("%d listeners still missing", missing)
	}
}
