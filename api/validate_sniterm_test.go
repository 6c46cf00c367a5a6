package api

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestValidateSNITerminate: a tls-passthrough listener whose sniRoutes
// terminate needs uploaded certificates in its tls (no ACME); without
// such a route it takes no tls; the field is reported as a level-5
// feature.
func TestValidateSNITerminate(t *testing.T) {
	t.Parallel()
	term := func(edit func(l *pb.Listener)) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) {
			l := &pb.Listener{Port: 8443, Protocol: "tls-passthrough", Pool: "db", Tls: &pb.TLSPolicy{Certificates: []string{"db"}},
				SniRoutes: []*pb.SNIRoute{{Host: "db.acme.example", Pool: "db", Terminate: true}, {Host: "*.acme.example", Pool: "web"}}}
			edit(l)
			lb.Listeners = append(lb.Listeners, l)
		}
	}
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"valid", term(func(*pb.Listener) {}), expect{}},
		{"no certificate", term(func(l *pb.Listener) { l.Tls = nil }), bad("listeners[3].tls.certificates", "sniRoutes with terminate: true need a certificate")},
		{"acme", term(func(l *pb.Listener) { l.Tls.Acme = true }), bad("listeners[3].tls.acme", "ACME is not offered on tls-passthrough listeners")},
		{"bad min version", term(func(l *pb.Listener) { l.Tls.MinVersion = "tls1.1" }), bad("listeners[3].tls.minVersion", "not one of tls1.2, tls1.3")},
		{"client validation", term(func(l *pb.Listener) { l.Tls.ClientValidation = &pb.ClientValidation{CaBundle: "x"} }), bad("listeners[3].tls.clientValidation", "https listeners only")},
		{"an unknown certificate", term(func(l *pb.Listener) { l.Tls.Certificates = []string{"nope"} }), bad("listeners[3].tls.certificates[0]", "certificate acme/nope does not exist")},
		{"tls without a terminating route", term(func(l *pb.Listener) { l.SniRoutes[0].Terminate = false }), bad("listeners[3].tls", "only https listeners terminate TLS")},
	}
	c := baseCatalog()
	c.Put(&pb.Certificate{Tenant: "acme", Name: "db"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
	lb := shopLB()
	term(func(*pb.Listener) {})(lb)
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	found := false
	for _, u := range uses {
		if u.Feature == FeatureTLSTerminate && strings.HasSuffix(u.Field, "listeners[3].sniRoutes[0].terminate") {
			found = true
		}
	}
	if !found || LevelNeeded(uses) != 5 {
		t.Fatalf("FeaturesUsed %v (level %d); want listeners[3].sniRoutes[0].terminate at level 5", uses, LevelNeeded(uses))
	}
}
