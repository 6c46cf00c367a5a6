package l7

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testMember is a Member that records its outcomes.
type testMember struct {
	addr     netip.AddrPort
	down     atomic.Bool
	mu       sync.Mutex
	errs     []error
	statuses []int
	inflight atomic.Int64
}

func (m *testMember) Addr() netip.AddrPort { return m.addr }

func (m *testMember) Done(err error, status int, _ time.Duration) {
	m.inflight.Add(-1)
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.statuses = append(m.statuses, status)
	m.mu.Unlock()
}

func (m *testMember) outcomes() ([]error, []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.errs...), append([]int(nil), m.statuses...)
}

// testBackend picks its members round robin, skipping those down.
type testBackend struct {
	members []*testMember
	opts    BackendOptions
	next    atomic.Uint64
	lastKey atomic.Value
}

func (b *testBackend) Pick(_ netip.Addr, key []byte) (Member, bool) {
	b.lastKey.Store(string(key))
	for range b.members {
		m := b.members[b.next.Add(1)%uint64(len(b.members))]
		if !m.down.Load() {
			m.inflight.Add(1)
			return m, true
		}
	}
	return nil, false
}

func (b *testBackend) Options() *BackendOptions { return &b.opts }

func newBackend(t testing.TB, addrs ...string) *testBackend {
	t.Helper()
	b := &testBackend{}
	for _, a := range addrs {
		b.members = append(b.members, &testMember{addr: netip.MustParseAddrPort(a)})
	}
	return b
}

// testRoute is one entry of testRouter.
type testRoute struct {
	host, prefix string
	route        *Route
}

// testRouter matches the host exactly ("" matches any) and the path by
// prefix, first match wins.
type testRouter []testRoute

func (rt testRouter) Route(host, path string) *Route {
	for _, r := range rt {
		if (r.host == "" || r.host == host) && strings.HasPrefix(path, r.prefix) {
			return r.route
		}
	}
	return nil
}

// proxyUnder starts a listener that hands its connections to s and returns
// its address. With tlsCfg set it terminates TLS first.
func proxyUnder(t testing.TB, s *Server, router Router, tlsCfg *tls.Config) string {
	t.Helper()
	return proxyUnderInfo(t, s, ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }}, tlsCfg)
}

// proxyUnderInfo is proxyUnder serving every connection with info.
func proxyUnderInfo(t testing.TB, s *Server, info ConnInfo, tlsCfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
		s.Close()
	})
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	t.Cleanup(func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var nc net.Conn = c
			if tlsCfg != nil {
				nc = tls.Server(ClientTransport(c), tlsCfg)
			}
			mu.Lock()
			conns[nc] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ServeConn(ctx, nc, info)
				mu.Lock()
				delete(conns, nc)
				mu.Unlock()
			}()
		}
	}()
	return ln.Addr().String()
}

// rawServer starts a TCP server on loopback that serves each connection
// with serve (and then closes it), and returns its address.
func rawServer(t testing.TB, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// backendServer starts an HTTP/1.1 server on loopback.
func backendServer(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// selfSigned returns a server TLS config for "localhost" and 127.0.0.1
// with next protocols h2 and http/1.1.
func selfSigned(t testing.TB) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// oneRoute routes everything to be.
func oneRoute(be Backend) testRouter {
	return testRouter{{route: &Route{Name: "all", Backend: be}}}
}

// rawExchange writes req on a new connection to addr and returns all that
// comes back until the proxy closes the connection or 2 s pass.
func rawExchange(t testing.TB, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// statusOf returns the status code of the first response in s.
func statusOf(s string) string {
	if len(s) < 12 {
		return s
	}
	return s[9:12]
}

// sync32 is a counter for callbacks.
type sync32 struct{ n atomic.Int32 }

func (s *sync32) add()       { s.n.Add(1) }
func (s *sync32) get() int32 { return s.n.Load() }
