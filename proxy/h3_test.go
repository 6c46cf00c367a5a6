package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// h3Term terminates TLS with one certificate for the tests, as the
// certificate manager's Terminator does in serve: TCP connections of
// https listeners get a TLS handshake (h2, http/1.1), QUIC connections a
// configuration with h3; both then go to the L7 handler.
type h3Term struct {
	inner *HTTP
	cfg   *tls.Config
}

func newH3Term(t testing.TB, srv *l7.Server) *h3Term {
	cfg := &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "gw.acme.example")}, NextProtos: []string{"h2", "http/1.1"}}
	// One ticket key for every clone, as the Terminator's per listener:
	// a session resumes on the next connection.
	var key [32]byte
	copy(key[:], "teapot-lb test session ticket key")
	cfg.SetSessionTicketKeys([][32]byte{key})
	return &h3Term{inner: NewHTTP(srv, nil), cfg: cfg}
}

func (h *h3Term) ServeConn(ctx context.Context, c net.Conn, current func() *ListenerSnapshot) {
	if l := current(); l != nil && l.Protocol == snapshot.ProtoHTTPS {
		tc := tls.Server(c, h.cfg)
		if tc.HandshakeContext(ctx) != nil {
			return
		}
		c = tc
	}
	h.inner.ServeConn(ctx, c, current)
}

func (h *h3Term) QUICConfig(*snapshot.Listener) *tls.Config {
	c := h.cfg.Clone()
	c.NextProtos = []string{"h3"}
	return c
}

func (h *h3Term) ServeQUIC(ctx context.Context, c *quic.Conn, current func() *ListenerSnapshot) {
	h.inner.ServeQUIC(ctx, c, current)
}

// h3LB is routingLB on an https listener with http3.
func h3LB(port int, bes map[string]*routingBackend) *pb.LoadBalancer {
	lb := routingLB(port, bes)
	lb.Listeners = []*pb.Listener{{Port: uint32(port), Protocol: "https", Http3: true, Tls: &pb.TLSPolicy{Certificates: []string{"gw"}}}}
	return lb
}

// h3Client is an HTTP/3 client that sends every request to target and
// counts the QUIC connections it dials.
type h3Client struct {
	*http.Client
	tr    *http3.Transport
	dials atomic.Int64
}

func newH3Client(t testing.TB, target string) *h3Client {
	c := &h3Client{}
	c.tr = &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "gw.acme.example"},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			c.dials.Add(1)
			return quic.DialAddr(ctx, target, tc, qc)
		},
	}
	c.Client = &http.Client{Transport: c.tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(func() { c.tr.Close() })
	return c
}

func (c *h3Client) do(method, url string, h http.Header, body string) (*http.Response, error) {
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return c.Do(req)
}

// startH3 serves h3LB on a new port; it returns the proxy, the VIP
// address and the backends.
func startH3(t *testing.T) (*Proxy, string, map[string]*routingBackend) {
	t.Helper()
	return startH3With(t, Limits{})
}

// startH3With is startH3 with the proxy's limits.
func startH3With(t *testing.T, limits Limits) (*Proxy, string, map[string]*routingBackend) {
	t.Helper()
	return startH3Edited(t, limits, nil)
}

// startH3Edited is startH3With with the load balancer changed by edit
// (nil: as h3LB makes it).
func startH3Edited(t *testing.T, limits Limits, edit func(*pb.LoadBalancer)) (*Proxy, string, map[string]*routingBackend) {
	t.Helper()
	bes := map[string]*routingBackend{}
	for _, n := range []string{"main", "beta", "other", "mirror"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv), Limits: limits})
	port := freePort(t)
	lb := h3LB(port, bes)
	if edit != nil {
		edit(lb)
	}
	update(t, p, lb)
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	return p, vipAddr("127.0.0.2", port), bes
}

// TestRouteFeaturesHTTP3 runs the cases of TestRouteFeaturesHTTP1 over
// HTTP/3 on an https listener with http3: the same routes, matches,
// filters, redirects and timeouts through the same engine and pools.
func TestRouteFeaturesHTTP3(t *testing.T) {
	_, target, _ := startH3(t)
	c := newH3Client(t, target)
	cases := routingCases()
	for i := range cases {
		// The listener is https: a redirect keeps the scheme.
		if l, ok := strings.CutPrefix(cases[i].wantLocation, "http://"); ok {
			cases[i].wantLocation = "https://" + l
		}
	}
	runRoutingCases(t, cases, func(method, path string, h http.Header, body string) (*http.Response, error) {
		resp, err := c.do(method, "https://gw.acme.example:"+portOf(target)+path, h, body)
		if err == nil && resp.ProtoMajor != 3 {
			t.Errorf("%s %s: protocol %s, want HTTP/3", method, path, resp.Proto)
		}
		return resp, err
	}, portOf(target))
	if n := c.dials.Load(); n != 1 {
		t.Errorf("%d QUIC connections for the cases, want 1", n)
	}
}

// TestHTTP3LargeBodiesAndStreams: a 4 MiB request body reaches the member
// and comes back whole, and 64 requests in parallel share one connection.
// Nothing here is timed: on a loaded 2-core host under the race
// detector, beside the other parallel tests, the 4 MiB reach the member
// in 9-15 s and come back in 4-7 more, so the client's bound is two
// minutes, there only to end a request that hangs.
func TestHTTP3LargeBodiesAndStreams(t *testing.T) {
	t.Parallel()
	_, target, _ := startH3(t)
	c := newH3Client(t, target)
	c.Timeout = 2 * time.Minute
	url := "https://gw.acme.example:" + portOf(target)
	big := strings.Repeat("0123456789abcdef", 256<<10)
	resp, err := c.do("POST", url+"/big", nil, big)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), big) {
		t.Fatalf("status %d, %d bytes back, want the %d bytes sent", resp.StatusCode, len(data), len(big))
	}
	errs := make(chan error, 64)
	for i := range 64 {
		go func() {
			resp, err := c.do("GET", fmt.Sprintf("%s/s/%d?sleep=50ms", url, i), nil, "")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("stream %d: status %d", i, resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for range 64 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := c.dials.Load(); n != 1 {
		t.Errorf("%d QUIC connections, want 1", n)
	}
}

// TestAltSvcAdvertised: the HTTP/1.1 and HTTP/2 answers of an https
// listener with http3 say Alt-Svc: h3=":port"; a listener without it
// says nothing.
func TestAltSvcAdvertised(t *testing.T) {
	t.Parallel()
	p, target, bes := startH3(t)
	want := fmt.Sprintf(`h3=":%s"; ma=%d`, portOf(target), AltSvcMaxAge)
	for _, proto := range []string{"http/1.1", "h2"} {
		for _, path := range []string{"/plain", "/headers/x", "/nowhere-404"} {
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}}, ForceAttemptHTTP2: proto == "h2",
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, target)
				}}
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://gw.acme.example" + path)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			tr.CloseIdleConnections()
			if got := resp.Header.Get("Alt-Svc"); got != want && path != "/nowhere-404" {
				t.Errorf("%s %s (%s, %d): Alt-Svc %q, want %q", proto, path, resp.Proto, resp.StatusCode, got, want)
			}
		}
	}
	// Without http3: no Alt-Svc, no UDP port.
	lb := h3LB(mustAtoi(t, portOf(target)), bes)
	lb.Listeners[0].Http3 = false
	update(t, p, lb)
	resp, err := doTLS(target, "/plain")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Alt-Svc"); got != "" {
		t.Errorf("without http3: Alt-Svc %q", got)
	}
	if _, ok := p.h3Addr(snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}); ok {
		t.Error("without http3 the UDP port is still served")
	}
}

func doTLS(target, path string) (*http.Response, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target)
		}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://gw.acme.example" + path)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustAddrPort(t testing.TB, s string) netip.AddrPort {
	t.Helper()
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
