package snapshot

import (
	"crypto/tls"
	"slices"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestCompileSNITerminate: a tls-passthrough listener whose sniRoutes
// terminate gets its TLS policy (uploaded certificates, minimum version)
// and routes marked Terminate beside the passed-through ones; without a
// certificate the listener is skipped, so no terminated name is served
// without one.
func TestCompileSNITerminate(t *testing.T) {
	t.Parallel()
	tenant := &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}, Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}
	vipPool := &pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/24"}, Mode: "static"}
	lb := rulesLB()
	l := lb.Listeners[2]
	l.Tls = &pb.TLSPolicy{Certificates: []string{"db"}, MinVersion: "tls1.3"}
	l.SniRoutes = append(l.SniRoutes, &pb.SNIRoute{Host: "term.acme.example", Pool: "app", Terminate: true})
	s := Compile([]*pb.Object{api.Wrap(tenant), api.Wrap(vipPool), api.Wrap(lb)}, 1, Defaults{}, nil)
	if ps := problemsOf(s, "acme/shop"); len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	got := s.Listener(key("192.0.2.1:443", TCP))
	if got == nil || got.TLS == nil || !slices.Equal(got.TLS.Certificates, []string{"db"}) || got.TLS.MinVersion != tls.VersionTLS13 {
		t.Fatalf("listener TLS %+v; want certificate db, TLS 1.3", got)
	}
	if r := got.Routes.Match("term.acme.example", "/"); r == nil || !r.Terminate {
		t.Errorf("term.acme.example: %+v; want a terminating route", r)
	}
	if r := got.Routes.Match("db.acme.example", "/"); r == nil || r.Terminate {
		t.Errorf("db.acme.example: %+v; want a passed-through route", r)
	}
	l.Tls = nil
	s = Compile([]*pb.Object{api.Wrap(tenant), api.Wrap(vipPool), api.Wrap(lb)}, 2, Defaults{}, nil)
	if s.Listener(key("192.0.2.1:443", TCP)) != nil {
		t.Error("a listener terminating names without a certificate is served")
	}
}
