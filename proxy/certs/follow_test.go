package certs

import (
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
)

// TestMayChange: which revisions reach the certificate manager.
func TestMayChange(t *testing.T) {
	t.Parallel()
	lbObj := func(acme bool) *pb.Object {
		return &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: &pb.LoadBalancer{Tenant: "acme", Name: "web",
			Listeners: []*pb.Listener{{Protocol: "https", Port: 443, Tls: &pb.TLSPolicy{Acme: acme}}}}}}
	}
	ref := func(kind string) *pb.ObjectRef { return &pb.ObjectRef{Kind: kind, Name: "x"} }
	tenant := func(domains ...string) *pb.Object {
		return &pb.Object{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "acme", Domains: domains}}}
	}
	tests := []struct {
		name string
		r    proxy.Revision
		want bool
	}{
		{"reset", proxy.Revision{Reset: true}, true},
		{"a node", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindNode)}}}, false},
		{"a storage lock", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindStorageItem)}}}, true},
		{"a certificate", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindCertificate)}}}, true},
		{"a load balancer without acme", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindLoadBalancer), Previous: lbObj(false), Object: lbObj(false)}}}, false},
		{"a load balancer that asks for acme", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindLoadBalancer), Previous: lbObj(false), Object: lbObj(true)}}}, true},
		{"a tenant's domains", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindTenant), Previous: tenant("a.example"), Object: tenant("b.example")}}}, true},
		{"a tenant's unchanged domains", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindTenant), Previous: tenant("a.example"), Object: tenant("a.example")}}}, false},
		{"a node with a lock", proxy.Revision{Changes: []proxy.Change{{Ref: ref(api.KindNode)}, {Ref: ref(api.KindStorageItem)}}}, true},
	}
	for _, tt := range tests {
		if got := MayChange(tt.r); got != tt.want {
			t.Errorf("%s: MayChange = %t, want %t", tt.name, got, tt.want)
		}
	}
}
