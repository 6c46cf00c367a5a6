package proxy

import (
	"encoding/json"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestNotFoundRouteStopsFallThrough: a notFound route answers 404 and
// keeps the requests of its host (and the narrower hosts without a route
// of their own) from the routes of less specific hosts, over HTTP/1.1;
// other hosts and ports still fall through to them.
func TestNotFoundRouteStopsFallThrough(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"wild", "any"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	p80, p8080 := freePort(t), freePort(t)
	lb := &pb.LoadBalancer{Name: "iso", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(p80), Protocol: "http"}, {Port: uint32(p8080), Protocol: "http"}},
		Routes: []*pb.Route{
			{Host: "", Path: "/any", Pool: "any"},
			{Host: "*.acme.example", Path: "/wild", Pool: "wild", Ports: []uint32{uint32(p80)}},
			{Host: "*.acme.example", Path: "/", NotFound: true, Ports: []uint32{uint32(p80)}},
			{Host: "shop.acme.example", Path: "/", NotFound: true},
		},
		Pools:  map[string]*pb.BackendPool{},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	for n, b := range bes {
		lb.Pools[n] = &pb.BackendPool{Members: []*pb.Member{{Address: b.addr}}}
	}
	update(t, p, lb)
	tests := []struct {
		port             int
		host, path, want string // want "" for 404
	}{
		{p80, "x.acme.example", "/wild", "wild"},
		{p80, "x.acme.example", "/any", ""},
		{p80, "a.b.acme.example", "/any", ""},
		{p80, "other.example", "/any", "any"},
		{p8080, "x.acme.example", "/any", "any"},
		{p80, "shop.acme.example", "/wild", ""},
		{p8080, "shop.acme.example", "/any", ""},
	}
	for _, tc := range tests {
		resp, err := doVia(vipAddr("127.0.0.2", tc.port), "GET", "http://"+tc.host+tc.path, nil, "")
		if err != nil {
			t.Fatalf("%s%s on port %d: %v", tc.host, tc.path, tc.port, err)
		}
		var s seen
		_ = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if tc.want == "" {
			if resp.StatusCode != 404 {
				t.Errorf("%s%s on port %d: %d from %q, want 404", tc.host, tc.path, tc.port, resp.StatusCode, s.Backend)
			}
			continue
		}
		if resp.StatusCode != 200 || s.Backend != tc.want {
			t.Errorf("%s%s on port %d: %d from %q, want %s", tc.host, tc.path, tc.port, resp.StatusCode, s.Backend, tc.want)
		}
	}
}
