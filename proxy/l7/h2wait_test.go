package l7

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// waitUntil polls cond every 10 ms until it holds; it fails the test
// after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// h2Waiters counts the streams waiting for a slot on member connections.
func h2Waiters(s *Server) int {
	s.h2up.mu.Lock()
	pools := make([]*h2Pool, 0, len(s.h2up.pools))
	for _, p := range s.h2up.pools {
		pools = append(pools, p)
	}
	s.h2up.mu.Unlock()
	n := 0
	for _, p := range pools {
		p.mu.Lock()
		n += p.waiters
		p.mu.Unlock()
	}
	return n
}

// TestH2MemberWaitEndsWithTheStream: every stream slot to an h2c member
// is busy; a request waiting for one, reset by its client, stops waiting
// at once, not when its two-minute response header timeout ends.
func TestH2MemberWaitEndsWithTheStream(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "ok")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	defer close(release)
	be := newBackend(t, ln.Addr().String())
	be.opts.Protocol = H2C
	be.opts.ResponseHeaderTimeout = 2 * time.Minute
	s := New(Config{})
	addr := proxyUnder(t, s, oneRoute(be), selfSigned(t))
	client := h2TestClient()
	for range h2UpMaxConns {
		go func() {
			if resp, err := client.Get("https://" + addr + "/"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	// Generous deadlines: a loaded 2-core CI machine.
	waitUntil(t, 30*time.Second, "every member stream slot busy", func() bool { return started.Load() == h2UpMaxConns })

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addr+"/waits", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitUntil(t, 30*time.Second, "the request to wait for a slot", func() bool { return h2Waiters(s) == 1 })
	cancel()
	<-done
	waitUntil(t, 30*time.Second, "the reset request to stop waiting", func() bool { return h2Waiters(s) == 0 })
	if n := started.Load(); n != h2UpMaxConns {
		t.Errorf("the member saw %d requests, want the %d that held the slots", n, h2UpMaxConns)
	}
}

// TestPoolKeySeparatesTLSIdentities: connections to one member verified
// under different TLS configurations (server name, CAs) are in different
// pools; one configuration, or plain connections, share one.
func TestPoolKeySeparatesTLSIdentities(t *testing.T) {
	a := netip.MustParseAddrPort("192.0.2.10:443")
	shop := &tls.Config{ServerName: "shop.example"}
	admin := &tls.Config{ServerName: "admin.example"}
	for _, proto := range []Protocol{HTTP1TLS, H2TLS} {
		if keyOf(a, proto, &BackendOptions{Protocol: proto, TLS: shop}) == keyOf(a, proto, &BackendOptions{Protocol: proto, TLS: admin}) {
			t.Errorf("%v: backends verifying the member as shop.example and admin.example share a pool", proto)
		}
		if keyOf(a, proto, &BackendOptions{Protocol: proto, TLS: shop}) == keyOf(a, proto, &BackendOptions{Protocol: proto}) {
			t.Errorf("%v: a verifying backend shares a pool with one that does not verify", proto)
		}
		if keyOf(a, proto, &BackendOptions{Protocol: proto, TLS: shop}) != keyOf(a, proto, &BackendOptions{Protocol: proto, TLS: shop}) {
			t.Errorf("%v: two backends with one TLS configuration do not share a pool", proto)
		}
	}
	// Plain protocols ignore TLS settings: one pool.
	if keyOf(a, H2C, &BackendOptions{Protocol: H2C, TLS: shop}) != keyOf(a, H2C, &BackendOptions{Protocol: H2C}) {
		t.Error("h2c connections are split by an unused TLS configuration")
	}
}
