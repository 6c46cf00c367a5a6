package consensus

import (
	"errors"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestPutAndDeleteCertificate(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	ctx := ctxT(t)
	apply(t, n, pool("p", "192.0.2.0/28"), tenant("acme", "p"))
	cert := &pb.Certificate{Name: "shop", Tenant: "acme", Hosts: []string{"shop.acme.example"}, Source: "uploaded", State: "valid"}
	got, err := n.PutCertificate(ctx, cert, "uploaded/acme/shop", []byte("chain and key"))
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMeta().GetGeneration() != 1 || got.GetHosts()[0] != "shop.acme.example" {
		t.Fatalf("stored %v", got)
	}
	if item, err := n.StorageGet(ctx, "uploaded/acme/shop"); err != nil || string(item.GetValue()) != "chain and key" {
		t.Fatalf("secret: %v %v", item, err)
	}
	// A load balancer that lists it keeps it.
	user := lb("acme", "web", "p")
	user.GetLoadBalancer().Listeners = []*pb.Listener{{Port: 443, Protocol: "https", Tls: &pb.TLSPolicy{Certificates: []string{"shop"}}}}
	user.GetLoadBalancer().Routes = []*pb.Route{{Host: "shop.acme.example", Pool: "web"}}
	apply(t, n, user)
	if err := n.DeleteCertificate(ctx, "acme", "shop", "uploaded/acme/shop"); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("delete while in use: %v", err)
	}
	if _, err := n.Delete(ctx, &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "web"}}, false); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteCertificate(ctx, "acme", "shop", "uploaded/acme/shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.StorageGet(ctx, "uploaded/acme/shop"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("secret outlived its certificate: %v", err)
	}
	if err := n.DeleteCertificate(ctx, "acme", "shop", "uploaded/acme/shop"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}
