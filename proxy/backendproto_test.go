package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestBackendProtocols sends requests to pools whose backendProtocol is
// each of http1, h2c, tls and h2: every member must be spoken to in its
// protocol.
func TestBackendProtocols(t *testing.T) {
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s tls=%v", r.Proto, r.TLS != nil)
	})
	plain := httptest.NewServer(report)
	t.Cleanup(plain.Close)
	h2cLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var prot http.Protocols
	prot.SetUnencryptedHTTP2(true)
	h2cSrv := &http.Server{Handler: report, Protocols: &prot}
	go h2cSrv.Serve(h2cLn)
	t.Cleanup(func() { h2cSrv.Close() })
	tls1 := httptest.NewTLSServer(report)
	t.Cleanup(tls1.Close)
	h2 := httptest.NewUnstartedServer(report)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)

	cases := []struct{ proto, member, want string }{
		{"http1", plain.Listener.Addr().String(), "HTTP/1.1 tls=false"},
		{"h2c", h2cLn.Addr().String(), "HTTP/2.0 tls=false"},
		{"tls", tls1.Listener.Addr().String(), "HTTP/1.1 tls=true"},
		{"h2", h2.Listener.Addr().String(), "HTTP/2.0 tls=true"},
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "protos", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Pools:     map[string]*pb.BackendPool{},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	for _, c := range cases {
		lb.Routes = append(lb.Routes, &pb.Route{Host: shopHost, Path: "/" + c.proto + "/", Pool: c.proto})
		lb.Pools[c.proto] = &pb.BackendPool{BackendProtocol: c.proto, Members: []*pb.Member{{Address: c.member}}}
	}
	update(t, p, lb)
	if st := p.Status()["acme/protos"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	for _, c := range cases {
		t.Run(c.proto, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+vipAddr("127.0.0.2", port)+"/"+c.proto+"/x", nil)
			req.Host = shopHost
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != c.want {
				t.Fatalf("%d %q, want 200 %q", resp.StatusCode, b, c.want)
			}
		})
	}
}
