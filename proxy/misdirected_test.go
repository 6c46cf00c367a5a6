package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// terminating is a test's TLS termination in front of the L7 handler, as
// package certs does it: one certificate for every name, h2 and
// http/1.1 offered.
type terminating struct {
	cfg   *tls.Config
	inner ConnHandler
}

func (h *terminating) ServeConn(ctx context.Context, c net.Conn, current func() *ListenerSnapshot) {
	tc := tls.Server(l7.ClientTransport(c), h.cfg)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return
	}
	h.inner.ServeConn(ctx, tc, current)
}

// TestMisdirectedRequests: on an https listener shared by several sites
// (tls.sniScopes), a request whose Host belongs to another site than its
// connection's server name gets 421, over HTTP/2 and HTTP/1.1; a request
// for the connection's own site is routed, and so is every request of a
// listener without sniScopes.
func TestMisdirectedRequests(t *testing.T) {
	t.Parallel()
	bes := map[string]*routingBackend{}
	for _, n := range []string{"one", "two", "wild", "any"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	cert := selfSigned(t, "acme.example")
	p, _ := newProxy(t, Config{HTTP: &terminating{cfg: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}, inner: NewHTTP(srv, nil)}})
	scoped, open := freePort(t), freePort(t)
	tlsPolicy := func(scopes ...string) *pb.TLSPolicy {
		return &pb.TLSPolicy{Certificates: []string{"c"}, SniScopes: scopes}
	}
	lb := &pb.LoadBalancer{Name: "sites", Tenant: "acme",
		Listeners: []*pb.Listener{
			{Port: uint32(scoped), Protocol: "https", Tls: tlsPolicy("", "two.acme.example", "*.wild.acme.example", "four.wild.acme.example")},
			{Port: uint32(open), Protocol: "https", Tls: tlsPolicy()},
		},
		Routes: []*pb.Route{
			{Host: "one.acme.example", Path: "/", Pool: "one"},
			{Host: "two.acme.example", Path: "/", Pool: "two"},
			{Host: "*.wild.acme.example", Path: "/", Pool: "wild"},
			{Host: "", Path: "/", Pool: "any"},
		},
		Pools:  map[string]*pb.BackendPool{},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	for n, b := range bes {
		lb.Pools[n] = &pb.BackendPool{Members: []*pb.Member{{Address: b.addr}}}
	}
	update(t, p, lb)
	get := func(port int, h2 bool, sni, host string) (int, string) {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: sni, InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+vipAddr("127.0.0.2", port)+"/x", nil)
		req.Host = host
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("sni %s, host %s: %v", sni, host, err)
		}
		defer resp.Body.Close()
		if h2 != (resp.ProtoMajor == 2) {
			t.Fatalf("sni %s, host %s: answered over %s", sni, host, resp.Proto)
		}
		var s seen
		_ = json.NewDecoder(resp.Body).Decode(&s)
		return resp.StatusCode, s.Backend
	}
	for _, h2 := range []bool{true, false} {
		for _, tc := range []struct {
			port            int
			sni, host, want string // want "" for 421
		}{
			{scoped, "one.acme.example", "one.acme.example", "one"},
			{scoped, "one.acme.example", "two.acme.example", ""},
			{scoped, "one.acme.example", "other.example", "any"},
			{scoped, "two.acme.example", "two.acme.example", "two"},
			{scoped, "two.acme.example", "one.acme.example", ""},
			{scoped, "TWO.acme.example.", "two.acme.example", "two"},
			{scoped, "a.wild.acme.example", "b.wild.acme.example", "wild"},
			{scoped, "a.wild.acme.example", "four.wild.acme.example", ""},
			{scoped, "four.wild.acme.example", "a.wild.acme.example", ""},
			{scoped, "four.wild.acme.example", "four.wild.acme.example", "wild"},
			{open, "one.acme.example", "two.acme.example", "two"},
		} {
			status, backend := get(tc.port, h2, tc.sni, tc.host)
			switch {
			case tc.want == "" && status != http.StatusMisdirectedRequest:
				t.Errorf("h2 %v, sni %s, host %s: %d from %q, want 421", h2, tc.sni, tc.host, status, backend)
			case tc.want != "" && (status != 200 || backend != tc.want):
				t.Errorf("h2 %v, sni %s, host %s: %d from %q, want 200 from %s", h2, tc.sni, tc.host, status, backend, tc.want)
			}
		}
	}
}

// TestMisdirectedRequestsHTTP3: the same check on the listener's HTTP/3
// connections, whose server name comes from the QUIC handshake.
func TestMisdirectedRequestsHTTP3(t *testing.T) {
	t.Parallel()
	bes := map[string]*routingBackend{"one": startRoutingBackend(t, "one"), "two": startRoutingBackend(t, "two")}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv)})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "sites", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "https", Http3: true,
			Tls: &pb.TLSPolicy{Certificates: []string{"c"}, SniScopes: []string{"", "two.acme.example"}}}},
		Routes: []*pb.Route{
			{Host: "one.acme.example", Path: "/", Pool: "one"},
			{Host: "two.acme.example", Path: "/", Pool: "two"},
		},
		Pools: map[string]*pb.BackendPool{
			"one": {Members: []*pb.Member{{Address: bes["one"].addr}}},
			"two": {Members: []*pb.Member{{Address: bes["two"].addr}}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	target := vipAddr("127.0.0.2", port)
	for _, tc := range []struct{ sni, host, want string }{
		{"one.acme.example", "one.acme.example", "one"},
		{"one.acme.example", "two.acme.example", ""},
		{"two.acme.example", "two.acme.example", "two"},
		{"two.acme.example", "one.acme.example", ""},
	} {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: tc.sni},
			Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				return quic.DialAddr(ctx, target, tlsCfg, qc)
			},
		}
		req, _ := http.NewRequest("GET", "https://"+tc.host+"/x", nil)
		resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			tr.Close()
			t.Fatalf("sni %s, host %s: %v", tc.sni, tc.host, err)
		}
		var s seen
		_ = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		tr.Close()
		switch {
		case tc.want == "" && resp.StatusCode != http.StatusMisdirectedRequest:
			t.Errorf("sni %s, host %s: %d from %q, want 421", tc.sni, tc.host, resp.StatusCode, s.Backend)
		case tc.want != "" && (resp.StatusCode != 200 || s.Backend != tc.want):
			t.Errorf("sni %s, host %s: %d from %q, want 200 from %s", tc.sni, tc.host, resp.StatusCode, s.Backend, tc.want)
		}
	}
}
