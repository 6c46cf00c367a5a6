package tenantsync_test

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestStreamCertificateGuards: an agent uploads and removes only
// certificates named k8s-*, within the size bounds, and a host without a
// certificate store says so; none of it ends the stream or holds back the
// change's load balancers.
func TestStreamCertificateGuards(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	acme := h.open(t, "acme")
	ch := upsert(tcpLB("svc-shop-web", &pb.VIPRequest{Pool: "public"}, "10.20.0.11:30080"))
	ch.Certificates = []*pb.SyncCertificate{
		{Name: "shop", CertPem: []byte("x"), KeyPem: []byte("y")},
		{Name: "k8s-shop-big", CertPem: make([]byte, tenantsync.MaxCertificatePEM+1), KeyPem: []byte("y")},
		{Name: "k8s-shop-tls", CertPem: []byte("x"), KeyPem: []byte("y")},
	}
	ch.CertificateRemovals = []string{"operators"}
	ack := acme.change(ch)
	if r := result(t, ack, "svc-shop-web"); r.GetError() != "" || r.GetAddress() == "" {
		t.Fatalf("the change's load balancer: %v", r)
	}
	want := map[string]string{
		"shop":         "belongs to the operator",
		"k8s-shop-big": "at most 65536",
		"k8s-shop-tls": "does not take certificates",
		"operators":    "only certificates named k8s-",
	}
	if len(ack.GetCertificates()) != len(want) {
		t.Fatalf("certificate results %v, want %d", ack.GetCertificates(), len(want))
	}
	for _, r := range ack.GetCertificates() {
		if w := want[r.GetName()]; w == "" || !strings.Contains(r.GetError(), w) || r.GetRemoved() {
			t.Errorf("certificate %s: %q (removed %v), want an error saying %q", r.GetName(), r.GetError(), r.GetRemoved(), w)
		}
	}
}
