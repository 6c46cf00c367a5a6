package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/certs/pebbletest"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// greeter stands in for the L7 engine: it answers with the TLS state it
// got.
type greeter struct{}

func (greeter) ServeConn(_ context.Context, c net.Conn, _ func() *proxy.ListenerSnapshot) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		io.WriteString(c, "plain")
		return
	}
	fmt.Fprintf(tc, "hello over %s", tc.ConnectionState().NegotiatedProtocol)
}

// listener compiles an https listener of tenant with routes to hosts.
func listener(tenant string, acme bool, uploads []string, hosts ...string) *snapshot.Listener {
	var routes []snapshot.Route
	for _, h := range hosts {
		routes = append(routes, snapshot.Route{Host: h, Path: "/", Pool: &snapshot.Pool{}})
	}
	return &snapshot.Listener{
		Key: snapshot.Key{Addr: netip.MustParseAddrPort("127.0.0.1:443"), Network: snapshot.TCP},
		LB:  tenant + "/web", Tenant: tenant, Protocol: snapshot.ProtoHTTPS,
		Routes: snapshot.NewRouteTable(routes),
		TLS:    &snapshot.TLS{ACME: acme, Certificates: uploads, MinVersion: tls.VersionTLS12},
	}
}

// serveTLS runs a TLS listener on addr that terminates with t for the
// listener l.
func serveTLS(t *testing.T, addr string, term *Terminator, l *snapshot.Listener) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ls := &proxy.ListenerSnapshot{Listener: l}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				term.ServeConn(context.Background(), c, func() *proxy.ListenerSnapshot { return ls })
			}()
		}
	}()
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func acmeTenant(name string, quota uint32, domains ...string) *pb.Object {
	return api.Wrap(&pb.Tenant{Name: name, Domains: domains, Quotas: &pb.Quotas{Certificates: quota}})
}

func acmeLB(tenant, name string, hosts ...string) *pb.Object {
	lb := &pb.LoadBalancer{Name: name, Tenant: tenant,
		Listeners: []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "127.0.0.1:9"}}}},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.1"},
	}
	for _, h := range hosts {
		lb.Routes = append(lb.Routes, &pb.Route{Host: h, Pool: "web"})
	}
	return api.Wrap(lb)
}

// TestACMEWithPebble obtains certificates from a real ACME server and
// serves them: HTTP-01 and TLS-ALPN-01 answered from the store, quotas,
// SNI, refusal of unknown names, ALPN, resumption.
func TestACMEWithPebble(t *testing.T) {
	ports := pebbletest.FreePorts(t, 2)
	httpAddr, tlsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports[0], TLSPort: ports[1]})
	store := newMemStore()
	m, err := New(Config{Store: store, Host: "h1", CA: peb.Directory, Roots: peb.Roots, Email: "ops@acme.example", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Close() })
	go m.Run(ctx)

	hs := &http.Server{Handler: m.HTTPChallengeHandler()}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	term := m.Terminator(greeter{})
	lis := listener("acme", true, nil, "shop.acme.example", "api.acme.example", "third.acme.example")
	serveTLS(t, tlsAddr, term, lis)

	// Quota 2: the third host (in name order) is refused.
	base := []*pb.Object{acmeTenant("acme", 2, "acme.example"), acmeLB("acme", "web", "shop.acme.example", "api.acme.example", "third.acme.example")}
	deadline := time.Now().Add(90 * time.Second)
	for {
		m.Update(store.objectsWith(base...))
		shop, api := store.cert("acme", "shop.acme.example"), store.cert("acme", "api.acme.example")
		if shop.GetState() == StateValid && api.GetState() == StateValid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("certificates not issued: shop=%v api=%v", shop, api)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := store.cert("acme", "third.acme.example"); c.GetState() != StateRefused || c.GetLastError() == "" {
		t.Errorf("third host over quota: %v", c)
	}
	if c := store.cert("acme", "shop.acme.example"); c.GetIssuer() == "" || c.GetNotAfter() == nil || c.GetSource() != SourceACME {
		t.Errorf("status of shop: %v", c)
	}

	roots := peb.IssuerRoots(t)
	dial := func(name string, cfg *tls.Config) (string, tls.ConnectionState, error) {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		cfg.ServerName, cfg.RootCAs = name, roots
		if cfg.NextProtos == nil {
			cfg.NextProtos = []string{"h2", "http/1.1"}
		}
		c, err := tls.Dial("tcp", tlsAddr, cfg)
		if err != nil {
			return "", tls.ConnectionState{}, err
		}
		defer c.Close()
		body, err := io.ReadAll(c)
		return string(body), c.ConnectionState(), err
	}
	t.Run("each name gets its own verified certificate", func(t *testing.T) {
		for _, name := range []string{"shop.acme.example", "api.acme.example"} {
			body, st, err := dial(name, nil)
			if err != nil || body != "hello over h2" {
				t.Fatalf("%s: %q %v", name, body, err)
			}
			if leaf := st.PeerCertificates[0]; leaf.PublicKeyAlgorithm != x509.ECDSA || leaf.VerifyHostname(name) != nil {
				t.Fatalf("%s: served %v for %v", name, leaf.PublicKeyAlgorithm, leaf.DNSNames)
			}
		}
	})
	t.Run("unknown names and missing SNI are refused", func(t *testing.T) {
		for _, name := range []string{"third.acme.example", "other.example", ""} {
			cfg := &tls.Config{InsecureSkipVerify: true}
			if _, _, err := dial(name, cfg); err == nil {
				t.Errorf("%q: handshake succeeded", name)
			}
		}
	})
	t.Run("policy", func(t *testing.T) {
		if _, _, err := dial("shop.acme.example", &tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
			t.Error("TLS 1.1 accepted")
		}
		cbc := &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}
		if _, _, err := dial("shop.acme.example", cbc); err == nil {
			t.Error("a CBC suite was accepted")
		}
		body, _, err := dial("shop.acme.example", &tls.Config{NextProtos: []string{"http/1.1"}})
		if err != nil || body != "hello over http/1.1" {
			t.Errorf("ALPN http/1.1: %q %v", body, err)
		}
	})
	t.Run("sessions resume", func(t *testing.T) {
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			cache := tls.NewLRUClientSessionCache(4)
			cfg := func() *tls.Config { return &tls.Config{ClientSessionCache: cache, MaxVersion: v} }
			if _, st, err := dial("shop.acme.example", cfg()); err != nil || st.DidResume {
				t.Fatalf("first: %v resumed=%v", err, st.DidResume)
			}
			if _, st, err := dial("shop.acme.example", cfg()); err != nil || !st.DidResume {
				t.Fatalf("version %x: second handshake did not resume (%v)", v, err)
			}
		}
	})
	t.Run("hosts no longer routed are dropped", func(t *testing.T) {
		base = []*pb.Object{acmeTenant("acme", 2, "acme.example"), acmeLB("acme", "web", "shop.acme.example")}
		deadline := time.Now().Add(30 * time.Second)
		for store.cert("acme", "api.acme.example") != nil || store.cert("acme", "third.acme.example") != nil {
			if time.Now().After(deadline) {
				t.Fatal("status of removed hosts still there")
			}
			m.Update(store.objectsWith(base...))
			time.Sleep(100 * time.Millisecond)
		}
		if _, _, err := dial("api.acme.example", nil); err == nil {
			t.Error("a host no longer managed is still served")
		}
	})
}

// TestChallengesAnsweredForOtherHosts: a challenge presented by one host
// is answered by another through the store.
func TestChallengesAnsweredForOtherHosts(t *testing.T) {
	store := newMemStore()
	mk := func(host string) *Manager {
		m, err := New(Config{Store: store, Host: host, CA: "https://127.0.0.1:1/dir", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		m.Update([]*pb.Object{acmeTenant("acme", 0, "acme.example"), acmeLB("acme", "web", "shop.acme.example")})
		return m
	}
	a, b := mk("a"), mk("b")
	chal := acmeChallenge("http-01", "shop.acme.example", "tok123", "tok123.thumb")
	if err := (solver{a.iss}).Present(ctxT(t), chal); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host, path string
		code       int
	}{
		{"shop.acme.example", "/.well-known/acme-challenge/tok123", 200},
		{"shop.acme.example:80", "/.well-known/acme-challenge/tok123", 200},
		{"shop.acme.example", "/.well-known/acme-challenge/other", 404},
		{"api.acme.example", "/.well-known/acme-challenge/tok123", 404}, // not managed
		{"shop.acme.example", "/.well-known/acme-challenge/", 404},
		{"shop.acme.example", "/index.html", 404},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(http.MethodGet, "http://"+tc.host+tc.path, nil)
		rec := &recorder{header: http.Header{}}
		h := b.Challenge(tc.path)
		if h == nil { // the load balancer's request, not a challenge
			if tc.code == 200 {
				t.Errorf("Challenge(%q) = nil, want the challenge handler", tc.path)
			}
			continue
		}
		h.ServeHTTP(rec, req)
		if rec.code == 0 {
			rec.code = 200
		}
		if rec.code != tc.code || tc.code == 200 && rec.body != "tok123.thumb" {
			t.Errorf("%s%s: %d %q", tc.host, tc.path, rec.code, rec.body)
		}
	}
	if err := (solver{a.iss}).CleanUp(ctxT(t), chal); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.findChallenge(context.Background(), "shop.acme.example"); ok {
		t.Error("challenge still answered after clean-up")
	}
}

type recorder struct {
	header http.Header
	code   int
	body   string
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { r.body += string(b); return len(b), nil }

func acmeChallenge(typ, host, token, keyAuth string) acme.Challenge {
	return acme.Challenge{Type: typ, Token: token, KeyAuthorization: keyAuth, Identifier: acme.Identifier{Type: "dns", Value: host}}
}

// TestHTTP01 obtains a certificate when only the HTTP path answers: the
// TLS-ALPN-01 attempt fails and HTTP-01, answered from the store by the
// challenge handler, succeeds.
func TestHTTP01(t *testing.T) {
	ports := pebbletest.FreePorts(t, 2) // ports[1] stays closed
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports[0], TLSPort: ports[1]})
	store := newMemStore()
	m, err := New(Config{Store: store, Host: "h1", CA: peb.Directory, Roots: peb.Roots, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Close() })
	go m.Run(ctx)
	hs := &http.Server{Handler: m.HTTPChallengeHandler()}
	hl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	base := []*pb.Object{acmeTenant("acme", 0, "acme.example"), acmeLB("acme", "web", "www.acme.example")}
	deadline := time.Now().Add(90 * time.Second)
	for store.cert("acme", "www.acme.example").GetState() != StateValid {
		if time.Now().After(deadline) {
			t.Fatalf("not issued: %v", store.cert("acme", "www.acme.example"))
		}
		m.Update(store.objectsWith(base...))
		time.Sleep(200 * time.Millisecond)
	}
	if _, ok := m.managedCert("www.acme.example"); !ok {
		t.Fatal("issued but not in the cache")
	}
}
