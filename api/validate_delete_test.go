package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateDelete(t *testing.T) {
	full := func() *catalogtest.Catalog {
		c := baseCatalog()
		shop := withAddr(shopLB(), "192.0.2.1")
		shop.Listeners[0].Tls.Certificates = []string{"shop-cert"}
		shop.Pools["web"].BackendProtocol = "tls"
		shop.Pools["web"].Tls = &pb.BackendTLS{SystemRoots: true, ServerName: "web.acme.example", ClientCertificate: "client-cert"}
		c.Put(
			shop,
			&pb.VIPPool{Name: "spare", Cidrs: []string{"203.0.113.0/24"}, Mode: "arp", Tenants: []string{"other"}},
			&pb.VIPPool{Name: "lonely", Cidrs: []string{"203.0.114.0/24"}, Mode: "arp"},
			&pb.VIPPool{Name: "pinned", Cidrs: []string{"203.0.115.0/24"}, Mode: "arp"},
			withAddr(&pb.LoadBalancer{Name: "pin", Tenant: "other", Vip: &pb.VIPRequest{Address: "203.0.115.9"}}, "203.0.115.9"),
			&pb.Tenant{Name: "idle"},
			&pb.Node{Id: "lb1"},
			&pb.JoinToken{Id: "tok"},
			&pb.Certificate{Name: "shop-cert", Tenant: "acme", Source: "uploaded"},
			&pb.Certificate{Name: "old-cert", Tenant: "acme", Source: "uploaded"},
			&pb.Certificate{Name: "client-cert", Tenant: "acme", Source: "uploaded"},
		)
		return c
	}
	tests := []struct {
		name string
		ref  *pb.ObjectRef
		is   error
		msg  string
	}{
		{"load balancer", &pb.ObjectRef{Kind: KindLoadBalancer, Tenant: "acme", Name: "shop"}, nil, ""},
		{"load balancer missing", &pb.ObjectRef{Kind: KindLoadBalancer, Tenant: "acme", Name: "cart"}, ErrNotFound, "LoadBalancer acme/cart not found"},
		{"tenant idle", &pb.ObjectRef{Kind: KindTenant, Name: "idle"}, nil, ""},
		{"tenant with load balancers", &pb.ObjectRef{Kind: KindTenant, Name: "acme"}, ErrConflict, "Tenant acme: the tenant still has load balancers acme/shop; delete them first"},
		{"tenant listed by pool", &pb.ObjectRef{Kind: KindTenant, Name: "other"}, ErrConflict, "VIP pools spare list the tenant"},
		{"tenant missing", &pb.ObjectRef{Kind: KindTenant, Name: "ghost"}, ErrNotFound, "Tenant ghost not found"},
		{"pool unused", &pb.ObjectRef{Kind: KindVIPPool, Name: "lonely"}, nil, ""},
		{"pool in tenant list", &pb.ObjectRef{Kind: KindVIPPool, Name: "shared"}, ErrConflict, "VIPPool shared: in use by tenants acme (their pools)"},
		{"pool in use by lb", &pb.ObjectRef{Kind: KindVIPPool, Name: "public"}, ErrConflict, "in use by load balancers acme/shop"},
		{"pool in use by address", &pb.ObjectRef{Kind: KindVIPPool, Name: "pinned"}, ErrConflict, "in use by load balancers other/pin"},
		{"pool missing", &pb.ObjectRef{Kind: KindVIPPool, Name: "ghost"}, ErrNotFound, "VIPPool ghost not found"},
		{"node", &pb.ObjectRef{Kind: KindNode, Name: "lb1"}, nil, ""},
		{"node missing", &pb.ObjectRef{Kind: KindNode, Name: "lb9"}, ErrNotFound, "Node lb9 not found"},
		{"join token", &pb.ObjectRef{Kind: KindJoinToken, Name: "tok"}, nil, ""},
		{"join token missing", &pb.ObjectRef{Kind: KindJoinToken, Name: "nope"}, ErrNotFound, "JoinToken nope not found"},
		{"certificate unused", &pb.ObjectRef{Kind: KindCertificate, Tenant: "acme", Name: "old-cert"}, nil, ""},
		{"certificate presented to members", &pb.ObjectRef{Kind: KindCertificate, Tenant: "acme", Name: "client-cert"}, ErrConflict, "acme/shop (pools.web.tls.clientCertificate)"},
		{"certificate served", &pb.ObjectRef{Kind: KindCertificate, Tenant: "acme", Name: "shop-cert"}, ErrConflict, "served by load balancers acme/shop (listeners[0])"},
		{"certificate missing", &pb.ObjectRef{Kind: KindCertificate, Tenant: "acme", Name: "nope"}, ErrNotFound, "Certificate acme/nope not found"},
		{"unknown kind", &pb.ObjectRef{Kind: "Widget", Name: "w"}, ErrInvalid, `kind: unknown kind "Widget"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateDelete(tt.ref, full())
			if tt.is == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("error %v is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestValidateDeleteWithoutOptionalLookups(t *testing.T) {
	// A catalog without node or token look-ups cannot tell; it lets the
	// store report a missing object itself.
	c := struct{ Catalog }{baseCatalog()}
	for _, kind := range []string{KindNode, KindJoinToken, KindCertificate} {
		if err := ValidateDelete(&pb.ObjectRef{Kind: kind, Name: "x"}, c); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
}

func TestValidateDeleteManyUsers(t *testing.T) {
	c := baseCatalog()
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		c.Put(udpLB(n, "", 53))
	}
	err := ValidateDelete(&pb.ObjectRef{Kind: KindVIPPool, Name: "shared"}, c)
	if err == nil || !strings.Contains(err.Error(), "acme/a, acme/b, acme/c, acme/d, acme/e and 2 more") {
		t.Fatalf("got %v", err)
	}
}
