package consensus

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func clientPair(t *testing.T, cn string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// A load balancer whose checks present a client certificate reads back
// without the key; what get -o yaml printed applies again as it is (the
// stored key is kept), with edits too, while a new certificate needs its
// own key.
func TestClientKeySurvivesGetApplyRoundTrip(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	admin := adminserver.New(n)
	apply(t, n, pool("public", "192.0.2.0/28"), tenant("acme", "public"))
	cert, key := clientPair(t, "teapot-lb-health")
	cp := lb("acme", "cp", "public")
	cp.GetLoadBalancer().Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{Path: "/readyz", InsecureSkipVerify: true, ClientCertPem: cert, ClientKeyPem: key}}
	if _, err := admin.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{cp}}); err != nil {
		t.Fatal(err)
	}
	ref := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "cp"}
	storedKey := func() string {
		t.Helper()
		o, err := n.Get(ctxT(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		return o.GetLoadBalancer().GetPools()["web"].GetHealthCheck().GetHttps().GetClientKeyPem()
	}
	// getYAML is `get lb acme/cp -o yaml`: the admin API's answer, encoded.
	getYAML := func() string {
		t.Helper()
		o, err := admin.Get(ctxT(t), &pb.GetRequest{Ref: ref})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := manifest.Encode(&buf, []*pb.Object{o}, manifest.FormatYAML); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	applyYAML := func(ctx context.Context, doc string, dry bool) (*pb.ApplyResponse, error) {
		t.Helper()
		objs, err := manifest.Decode(strings.NewReader(doc), "stdin")
		if err != nil {
			t.Fatal(err)
		}
		return admin.Apply(ctx, &pb.ApplyRequest{Objects: objs, DryRun: dry})
	}

	doc := getYAML()
	if strings.Contains(doc, "PRIVATE KEY") || !strings.Contains(doc, "CERTIFICATE") {
		t.Fatalf("get -o yaml shows the key or drops the certificate:\n%s", doc)
	}
	t.Run("unchanged", func(t *testing.T) {
		rev := n.Revision()
		resp, err := applyYAML(ctxT(t), doc, false)
		if err != nil {
			t.Fatalf("re-applying what get printed: %v", err)
		}
		if resp.GetResults()[0] != "unchanged" || n.Revision() != rev {
			t.Errorf("result %v, revision %d -> %d; want unchanged", resp.GetResults(), rev, n.Revision())
		}
	})
	t.Run("edited", func(t *testing.T) {
		edited := strings.Replace(doc, "/readyz", "/livez", 1)
		if edited == doc {
			t.Fatal("the path is not in the document")
		}
		dry, err := applyYAML(ctxT(t), edited, true)
		if err != nil {
			t.Fatalf("dry run of the edited document: %v", err)
		}
		if k := dry.GetObjects()[0].GetLoadBalancer().GetPools()["web"].GetHealthCheck().GetHttps().GetClientKeyPem(); k != "" {
			t.Error("the dry run's answer shows the key")
		}
		resp, err := applyYAML(ctxT(t), edited, false)
		if err != nil {
			t.Fatalf("applying the edited document: %v", err)
		}
		if resp.GetResults()[0] != "configured" {
			t.Errorf("result %v", resp.GetResults())
		}
		if got := storedKey(); got != key {
			t.Errorf("stored key after the edit %q, want the key given first", got)
		}
	})
	t.Run("new certificate needs its key", func(t *testing.T) {
		rev := n.Revision()
		cert2, key2 := clientPair(t, "teapot-lb-health-2")
		o, err := n.Get(ctxT(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		o = api.RedactSecrets(o)
		hc := o.GetLoadBalancer().GetPools()["web"].GetHealthCheck().GetHttps()
		hc.ClientCertPem = cert2
		_, err = admin.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{o}})
		if err == nil || !strings.Contains(err.Error(), "clientKeyPem") || !strings.Contains(err.Error(), "stores no key for this certificate") {
			t.Fatalf("a new certificate without a key: %v", err)
		}
		if n.Revision() != rev || storedKey() != key {
			t.Fatal("a refused apply changed the stored load balancer")
		}
		hc.ClientKeyPem = key2
		if _, err := admin.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{o}}); err != nil {
			t.Fatal(err)
		}
		if storedKey() != key2 {
			t.Error("the new key is not stored")
		}
	})
	t.Run("another load balancer cannot borrow the key", func(t *testing.T) {
		o := lb("acme", "other", "public")
		o.GetLoadBalancer().Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{InsecureSkipVerify: true, ClientCertPem: cert}}
		_, err := admin.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{o}})
		if !errors.Is(api.FromStatus(err), api.ErrInvalid) || !strings.Contains(err.Error(), "clientKeyPem") {
			t.Fatalf("a certificate without its key on a new load balancer: %v", err)
		}
	})
}
