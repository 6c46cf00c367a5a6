package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestTLSPassthroughSNIRoutes: a tls-passthrough listener with sniRoutes
// sends each connection to the pool of the most specific host covering
// its server name (exact, then the longer wildcard, a wildcard covering
// several labels), and the others to its own pool: here an empty one, so
// they are reset. The load balancer's routes do not route it.
func TestTLSPassthroughSNIRoutes(t *testing.T) {
	exact, wide, narrow, http := tlsNamed(t, "exact"), tlsNamed(t, "wide"), tlsNamed(t, "narrow"), tlsNamed(t, "http")
	p, _ := newProxy(t, Config{})
	port, httpPort := freePort(t), freePort(t)
	lb := &pb.LoadBalancer{Name: "sni", Tenant: "acme",
		Listeners: []*pb.Listener{
			{Port: uint32(port), Protocol: "tls-passthrough", Pool: "none", SniRoutes: []*pb.SNIRoute{
				{Host: "abc.shop.acme.example", Pool: "exact"},
				{Host: "*.acme.example", Pool: "wide"},
				{Host: "*.shop.acme.example", Pool: "narrow"},
			}},
			{Port: uint32(httpPort), Protocol: "http"},
		},
		// An HTTP route for a name of the listener: not for TLS.
		Routes: []*pb.Route{{Host: "www.acme.example", Pool: "http"}},
		Pools: map[string]*pb.BackendPool{
			"none":   {},
			"exact":  {Members: []*pb.Member{{Address: exact.addr}}},
			"wide":   {Members: []*pb.Member{{Address: wide.addr}}},
			"narrow": {Members: []*pb.Member{{Address: narrow.addr}}},
			"http":   {Members: []*pb.Member{{Address: http.addr}}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	tests := []struct{ serverName, want string }{
		{"abc.shop.acme.example", "exact"},
		{"other.shop.acme.example", "narrow"},
		{"a.b.shop.acme.example", "narrow"},
		{"www.acme.example", "wide"},
		{"a.b.acme.example", "wide"},
		{"acme.example", ""},
		{"non.matching.org", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run("sni "+tc.serverName, func(t *testing.T) {
			c, err := tls.Dial("tcp", vipAddr("127.0.0.2", port), &tls.Config{ServerName: tc.serverName, InsecureSkipVerify: true})
			if tc.want == "" {
				if err == nil {
					c.Close()
					t.Fatal("the handshake succeeded; want the connection reset")
				}
				if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "connection reset") {
					t.Fatalf("handshake error %v; want a reset or EOF", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != tc.want {
				t.Fatalf("reached %q (%v), want member %s", got, err, tc.want)
			}
		})
	}
}

// TestEmptyPoolsKeepTheLoadBalancerReady: a load balancer whose pools have
// no members (a Gateway listener without a usable route) is ready, so its
// VIP is held and each connection is reset at once; one whose members are
// all down is not.
func TestEmptyPoolsKeepTheLoadBalancerReady(t *testing.T) {
	p, _ := newProxy(t, Config{})
	port, port2 := freePort(t), freePort(t)
	empty := l4LB("empty", "127.0.0.2", port, "tls-passthrough")
	be := startBackend(t, "127.0.0.1", echo)
	down := l4LB("down", "127.0.0.3", port2, "tcp", be.addr)
	// The echo member does not speak HTTP: its check fails.
	down.Pools["app"].HealthCheck = &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/"}, Interval: dur(20 * time.Millisecond), Rise: 1, Fall: 1}
	down.Pools["spare"] = &pb.BackendPool{}
	down.Listeners = append(down.Listeners, &pb.Listener{Port: uint32(port), Protocol: "tcp", Pool: "spare"})
	update(t, p, empty, down)
	eventually(t, "down listed as unhealthy", func() bool { return p.Unhealthy()["acme/down"] != "" })
	if u := p.Unhealthy(); u["acme/empty"] != "" {
		t.Errorf("Unhealthy lists the load balancer of empty pools: %q", u["acme/empty"])
	}
	if r := p.Readiness(); r["acme/empty"] != "" || r["acme/down"] == "" {
		t.Errorf("Readiness: %q", r)
	}
	if r, _ := p.ReadinessOf([]string{"acme/empty", "acme/down"}); r["acme/empty"] != "" || r["acme/down"] == "" {
		t.Errorf("ReadinessOf: %q", r)
	}
	c, err := tls.Dial("tcp", vipAddr("127.0.0.2", port), &tls.Config{ServerName: "x.acme.example", InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("a connection to an empty pool was served")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection to an empty pool timed out (%v); want it reset", err)
	}
}
