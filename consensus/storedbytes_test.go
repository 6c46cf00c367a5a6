package consensus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// bigLB is lb with routes whose paths make it about size bytes.
func bigLB(ten, name, pl string, size int) *pb.Object {
	o := lb(ten, name, pl)
	l := o.GetLoadBalancer()
	l.Listeners = []*pb.Listener{{Port: 80, Protocol: "http"}}
	for i := 0; size > 0; i++ {
		path := fmt.Sprintf("/%d/%s", i, strings.Repeat("p", 1000))
		l.Routes = append(l.Routes, &pb.Route{Host: "www." + ten + ".example", Path: path, Pool: "web"})
		size -= len(path) + 40
	}
	return o
}

// What a tenant stores (load balancers, certificates and their keys) is
// kept per tenant as objects are written and removed, and a write that
// takes it over quotas.storedBytes is refused on the leader, naming the
// quota and the figures; shrinking and deleting are always allowed.
func TestStoredBytesQuota(t *testing.T) {
	t.Parallel()
	h := startHost(t, Config{NodeID: "n1"})
	acme := tenant("acme", "public")
	acme.GetTenant().Quotas = &pb.Quotas{StoredBytes: 300 << 10}
	apply(t, h.node, pool("public", "192.0.2.0/24"), acme, tenant("beta", "public"))

	apply(t, h.node, bigLB("acme", "a", "public", 100<<10), bigLB("acme", "b", "public", 100<<10))
	used := func(tenant string) int64 {
		h.node.fsm.mu.RLock()
		defer h.node.fsm.mu.RUnlock()
		return h.node.fsm.st.tenantUsage(tenant).StoredBytes
	}
	var want int64
	for _, name := range []string{"a", "b"} {
		o, err := h.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		want += int64(proto.Size(o))
	}
	if got := used("acme"); got != want {
		t.Fatalf("acme stores %d bytes, its load balancers are %d", got, want)
	}

	// A third is over the quota; another tenant is not charged for it.
	_, err := h.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{bigLB("acme", "c", "public", 120<<10)}}, false)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "quotas.storedBytes") || !strings.Contains(err.Error(), "at most 0.3 MiB (307200 bytes)") {
		t.Fatalf("over the quota: %v", err)
	}
	apply(t, h.node, bigLB("beta", "c", "public", 120<<10))

	// An uploaded certificate and its key count too.
	cert := &pb.Certificate{Name: "shop", Tenant: "acme", Source: "uploaded", Hosts: []string{"shop.acme.example"}}
	if _, err := h.node.PutCertificate(ctxT(t), cert, "uploaded/acme/shop", make([]byte, 120<<10)); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "quotas.storedBytes") {
		t.Fatalf("a certificate over the quota: %v", err)
	}
	if _, err := h.node.PutCertificate(ctxT(t), cert, "uploaded/acme/shop", make([]byte, 20<<10)); err != nil {
		t.Fatalf("a certificate within the quota: %v", err)
	}
	withCert := used("acme")
	if withCert < want+20<<10 {
		t.Fatalf("acme stores %d bytes with its certificate, want at least %d", withCert, want+20<<10)
	}

	// Shrinking, then deleting, is allowed and gives the bytes back.
	apply(t, h.node, bigLB("acme", "a", "public", 10<<10))
	if _, err := h.node.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "b"}}, false); err != nil {
		t.Fatal(err)
	}
	apply(t, h.node, bigLB("acme", "c", "public", 120<<10))
	if err := h.node.DeleteCertificate(ctxT(t), "acme", "shop", "uploaded/acme/shop"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "c"} {
		if _, err := h.node.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: name}}, false); err != nil {
			t.Fatal(err)
		}
	}
	if got := used("acme"); got != 0 {
		t.Errorf("acme stores %d bytes with nothing left", got)
	}
}
