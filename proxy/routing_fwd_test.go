package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// forwardedRoutesLB routes on the fields the proxy vouches for. The
// listener trusts 127.0.0.3 (a proxy in front of it); 127.0.0.1 is an
// internal client, 127.0.0.4 an outside one.
func forwardedRoutesLB(port int, b map[string]*routingBackend, https bool) *pb.LoadBalancer {
	pools := map[string]*pb.BackendPool{}
	for name, be := range b {
		pools[name] = &pb.BackendPool{Members: []*pb.Member{{Address: be.addr}}}
	}
	// The internal client, directly or through the trusted proxy (exact
	// values: regular expressions are charged to a budget the test must
	// not run out of).
	internal := func(path string) []*pb.RouteMatch {
		return []*pb.RouteMatch{
			{Path: path, Headers: []*pb.ValueMatch{{Name: "X-Forwarded-For", Value: "127.0.0.1"}}},
			{Path: path, Headers: []*pb.ValueMatch{{Name: "X-Forwarded-For", Value: "127.0.0.1, 127.0.0.3"}}},
		}
	}
	ls := &pb.Listener{Port: uint32(port), Protocol: "http", TrustedProxies: []string{"127.0.0.3/32"}}
	if https {
		ls.Protocol, ls.Http3, ls.Tls = "https", true, &pb.TLSPolicy{Certificates: []string{"gw"}}
	}
	return &pb.LoadBalancer{
		Name: "gw", Tenant: "acme",
		Listeners: []*pb.Listener{ls},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.2"},
		Pools:     pools,
		Routes: []*pb.Route{
			{Host: "gw.acme.example", Path: "/", Pool: "main"},
			{Host: "gw.acme.example", Matches: internal("/"), Pool: "internal"},
			// The same on the net/http path (a route that edits the request).
			{Host: "gw.acme.example", Matches: internal("/ext/"), Pool: "internal", Filters: []*pb.RouteFilter{{RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Ext", Value: "1"}}}}}},
			{Host: "gw.acme.example", Path: "/ext/", Pool: "main", Filters: []*pb.RouteFilter{{RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Ext", Value: "1"}}}}}},
			// Fields only a trusted client's come through.
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Path: "/real/", Headers: []*pb.ValueMatch{{Name: "X-Real-IP", Value: "127.0.0.1"}}}}, Pool: "internal"},
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Path: "/trace/", Headers: []*pb.ValueMatch{{Name: "X-Request-Id", Value: "trace-1"}}}}, Pool: "internal"},
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Path: "/fproto/", Headers: []*pb.ValueMatch{{Name: "X-Forwarded-Proto", Value: "gopher"}}}}, Pool: "internal"},
			// The id the proxy generates, half of them (the one regular
			// expression: the test raises the tenant's budget for it).
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Path: "/id/", Headers: []*pb.ValueMatch{{Name: "X-Request-Id", Value: "[0-7].*", Type: "regex"}}}}, Pool: "other"},
			{Host: "gw.acme.example", Matches: []*pb.RouteMatch{{Path: "/extid/", Headers: []*pb.ValueMatch{{Name: "X-Request-Id", Value: "[0-7].*", Type: "regex"}}}},
				Pool: "other", Filters: []*pb.RouteFilter{{RequestHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Ext", Value: "1"}}}}}},
		},
	}
}

// TestRoutesSeeForwardedFields: a route that matches on X-Forwarded-For,
// X-Real-IP, X-Request-Id or X-Forwarded-Proto sees the values the member
// receives, over HTTP/1.1 and HTTP/2 (cleartext and over TLS) and
// HTTP/3, on the fast paths and the net/http one: an outside client that
// sends an internal address is not taken for one, the internal client
// is, directly or through the trusted proxy, and a generated request id
// is the one the route saw.
func TestRoutesSeeForwardedFields(t *testing.T) {
	for _, https := range []bool{false, true} {
		bes := map[string]*routingBackend{}
		for _, n := range []string{"main", "internal", "other"} {
			bes[n] = startRoutingBackend(t, n)
		}
		srv := l7.New(l7.Config{})
		t.Cleanup(func() { srv.Close() })
		var p *Proxy
		if https {
			p, _ = newProxy(t, Config{HTTP: newH3Term(t, srv)})
		} else {
			p, _ = newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
		}
		port := freePort(t)
		objs := labObjects(forwardedRoutesLB(port, bes, https))
		objs[0].GetTenant().Quotas = &pb.Quotas{RegexCpuMillicores: 2000}
		if err := p.Update(objs, 1); err != nil {
			t.Fatal(err)
		}
		if st := p.Status()["acme/gw"]; len(st) != 0 {
			t.Fatalf("problems: %v", st)
		}
		target := vipAddr("127.0.0.2", port)
		protos := []string{"h1", "h2c"}
		scheme := "http"
		if https {
			protos, scheme = []string{"h1", "h2", "h3"}, "https"
		}
		for _, proto := range protos {
			t.Run(scheme+"/"+proto, func(t *testing.T) {
				clients := map[string]*http.Client{}
				for _, from := range []string{"127.0.0.1", "127.0.0.3", "127.0.0.4"} {
					clients[from] = forwardedClient(t, proto, from, target)
				}
				testForwardedRoutes(t, clients, scheme+"://gw.acme.example:"+portOf(target), proto)
			})
		}
	}
}

// forwardedClient is a client of proto (h1, h2c, h2, h3) from the
// address from that sends every request to target.
func forwardedClient(t *testing.T, proto, from, target string) *http.Client {
	tc := &tls.Config{InsecureSkipVerify: true, ServerName: "gw.acme.example"}
	if proto == "h3" {
		tr := &http3.Transport{TLSClientConfig: tc,
			Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)})
				if err != nil {
					return nil, err
				}
				ra, err := net.ResolveUDPAddr("udp", target)
				if err != nil {
					pc.Close()
					return nil, err
				}
				return quic.Dial(ctx, pc, ra, tc, qc)
			}}
		t.Cleanup(func() { tr.Close() })
		return &http.Client{Transport: tr, Timeout: 20 * time.Second}
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{TLSClientConfig: tc, Protocols: new(http.Protocols), DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, target)
	}}
	switch proto {
	case "h1":
		tr.Protocols.SetHTTP1(true)
	case "h2c":
		tr.Protocols.SetUnencryptedHTTP2(true)
	case "h2":
		tr.Protocols.SetHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// testForwardedRoutes runs the cases of TestRoutesSeeForwardedFields with
// the clients of each address, against origin.
func testForwardedRoutes(t *testing.T, clients map[string]*http.Client, origin, proto string) {
	major := map[string]int{"h1": 1, "h2c": 2, "h2": 2, "h3": 3}[proto]
	do := func(t *testing.T, c *http.Client, path string, h http.Header) seen {
		t.Helper()
		req, err := http.NewRequest("GET", origin+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.ProtoMajor != major {
			t.Fatalf("%s %s: status %d: %s", resp.Proto, path, resp.StatusCode, data)
		}
		var s seen
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("body %q: %v", data, err)
		}
		return s
	}
	cases := []struct {
		name, from, path string
		header           http.Header
		want             string
		wantXFF          string
	}{
		{"internal client", "127.0.0.1", "/a", nil, "internal", "127.0.0.1"},
		{"outside client spoofing", "127.0.0.4", "/a", http.Header{"X-Forwarded-For": {"127.0.0.1"}}, "main", "127.0.0.4"},
		{"outside client spoofing, lower case and underscores", "127.0.0.4", "/a", http.Header{"x_forwarded_for": {"127.0.0.1"}}, "main", "127.0.0.4"},
		{"internal client through the trusted proxy", "127.0.0.3", "/a", http.Header{"X-Forwarded-For": {"127.0.0.1"}}, "internal", "127.0.0.1, 127.0.0.3"},
		{"outside client through the trusted proxy", "127.0.0.3", "/a", http.Header{"X-Forwarded-For": {"127.0.0.9"}}, "main", "127.0.0.9, 127.0.0.3"},
		{"internal client, net/http path", "127.0.0.1", "/ext/a", nil, "internal", "127.0.0.1"},
		{"outside client spoofing, net/http path", "127.0.0.4", "/ext/a", http.Header{"X-Forwarded-For": {"127.0.0.1"}}, "main", "127.0.0.4"},
		{"internal client through the trusted proxy, net/http path", "127.0.0.3", "/ext/a", http.Header{"X-Forwarded-For": {"127.0.0.1"}}, "internal", "127.0.0.1, 127.0.0.3"},
		{"X-Real-IP of an outside client", "127.0.0.4", "/real/", http.Header{"X-Real-Ip": {"127.0.0.1"}}, "main", "127.0.0.4"},
		{"X-Real-IP of the trusted proxy", "127.0.0.3", "/real/", http.Header{"X-Real-Ip": {"127.0.0.1"}}, "internal", "127.0.0.3"},
		{"X-Request-Id of an outside client", "127.0.0.4", "/trace/", http.Header{"X-Request-Id": {"trace-1"}}, "main", "127.0.0.4"},
		{"X-Request-Id of the trusted proxy", "127.0.0.3", "/trace/", http.Header{"X-Request-Id": {"trace-1"}}, "internal", "127.0.0.3"},
		{"X-Forwarded-Proto of an outside client", "127.0.0.4", "/fproto/", http.Header{"X-Forwarded-Proto": {"gopher"}}, "main", "127.0.0.4"},
		{"X-Forwarded-Proto of the trusted proxy", "127.0.0.3", "/fproto/", http.Header{"X-Forwarded-Proto": {"gopher"}}, "internal", "127.0.0.3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := do(t, clients[tc.from], tc.path, tc.header)
			if s.Backend != tc.want {
				t.Errorf("served by %s, want %s (member saw X-Forwarded-For %q)", s.Backend, tc.want, s.Header.Values("X-Forwarded-For"))
			}
			if got := strings.Join(s.Header.Values("X-Forwarded-For"), ", "); got != tc.wantXFF {
				t.Errorf("member saw X-Forwarded-For %q, want %q", got, tc.wantXFF)
			}
		})
	}
	// The generated request id the route matched is the one the member
	// receives.
	t.Run("generated request id", func(t *testing.T) {
		re := regexp.MustCompile(`^[0-7]`)
		n := map[string]int{}
		for i := range 40 {
			for _, path := range []string{"/id/", "/extid/"} {
				s := do(t, clients["127.0.0.4"], fmt.Sprintf("%s%d", path, i), nil)
				id := s.Header.Get("X-Request-Id")
				want := "main"
				if re.MatchString(id) {
					want = "other"
				}
				if s.Backend != want {
					t.Fatalf("%s: id %q served by %s, want %s", path, id, s.Backend, want)
				}
				n[s.Backend]++
			}
		}
		if n["other"] == 0 || n["main"] == 0 {
			t.Errorf("served by %v, want both", n)
		}
	})
}
