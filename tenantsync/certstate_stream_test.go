package tenantsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// A certificate written for a host of an https load balancer reaches the
// agent as part of that load balancer's status.
func TestStatusCarriesCertificateState(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	lb := &pb.LoadBalancer{
		Name: "ing-ns-shop", Tenant: "acme", Vip: &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Acme: true}}},
		Routes:    []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "web"}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.20.0.1:80"}}}},
	}
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(lb)}}, false); err != nil {
		t.Fatal(err)
	}
	s := h.open(t, "acme")
	cert := &pb.Certificate{Name: "shop", Tenant: "acme", Hosts: []string{"shop.acme.example"}, Source: "acme", State: "failed", LastError: "HTTP-01 challenge: connection refused"}
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(cert)}}, true); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := s.stream.Recv()
		if err != nil {
			t.Fatalf("no certificate state reached the agent: %v", err)
		}
		for _, o := range m.GetStatus().GetObjects() {
			for _, c := range o.GetCertificates() {
				if o.GetName() == "ing-ns-shop" && c.GetHost() == "shop.acme.example" && c.GetState() == "failed" && c.GetLastError() != "" {
					return
				}
			}
		}
	}
}
