package proxy

import (
	"encoding/json"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestRoutesServedOnTheirPorts: a route with ports is served by the http
// listeners of those ports only, a route without by all of them; the same
// host and path go to different pools on different ports.
func TestRoutesServedOnTheirPorts(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"v1", "v2", "v3", "any"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	p80, p8080, p8090 := freePort(t), freePort(t), freePort(t)
	lb := &pb.LoadBalancer{Name: "ports", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(p80), Protocol: "http"}, {Port: uint32(p8080), Protocol: "http"}, {Port: uint32(p8090), Protocol: "http"}},
		Routes: []*pb.Route{
			{Host: "foo.acme.example", Path: "/", Pool: "v1", Ports: []uint32{uint32(p80)}},
			{Host: "foo.acme.example", Path: "/", Pool: "v2", Ports: []uint32{uint32(p8080)}},
			{Host: "bar.acme.example", Path: "/", Pool: "v2", Ports: []uint32{uint32(p8080)}},
			{Host: "foo.acme.example", Path: "/", Pool: "v3", Ports: []uint32{uint32(p8090)}},
			{Host: "all.acme.example", Path: "/", Pool: "any"},
		},
		Pools:  map[string]*pb.BackendPool{},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	for n, b := range bes {
		lb.Pools[n] = &pb.BackendPool{Members: []*pb.Member{{Address: b.addr}}}
	}
	update(t, p, lb)
	tests := []struct {
		port       int
		host, want string // want "" for 404
	}{
		{p80, "foo.acme.example", "v1"},
		{p8080, "foo.acme.example", "v2"},
		{p8080, "bar.acme.example", "v2"},
		{p8090, "foo.acme.example", "v3"},
		{p8090, "bar.acme.example", ""},
		{p80, "bar.acme.example", ""},
		{p80, "all.acme.example", "any"},
		{p8090, "all.acme.example", "any"},
	}
	for _, tc := range tests {
		resp, err := doVia(vipAddr("127.0.0.2", tc.port), "GET", "http://"+tc.host+"/", nil, "")
		if err != nil {
			t.Fatalf("%s on port %d: %v", tc.host, tc.port, err)
		}
		var s seen
		_ = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if tc.want == "" {
			if resp.StatusCode != 404 {
				t.Errorf("%s on port %d: %d from %q, want 404", tc.host, tc.port, resp.StatusCode, s.Backend)
			}
			continue
		}
		if resp.StatusCode != 200 || s.Backend != tc.want {
			t.Errorf("%s on port %d: %d from %q, want %s", tc.host, tc.port, resp.StatusCode, s.Backend, tc.want)
		}
	}
}
