package certs

import (
	"crypto/x509"
	"net/url"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestUploadedFindsATenantsCertificate: Uploaded returns a tenant's
// uploaded certificate with its key, whether it names hosts or none (a
// client certificate), and never another tenant's.
func TestUploadedFindsATenantsCertificate(t *testing.T) {
	ca := newTestCA(t)
	store := newMemStore()
	svc := NewService(store)
	ctx := ctxT(t)
	store.put(acmeTenant("acme", 0, "acme.example"))
	store.put(acmeTenant("globex", 0, "globex.example"))
	nb, na := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	clientPEM, clientKey := ca.issueWith(t, nb, na, func(c *x509.Certificate) {
		c.Subject.CommonName, c.DNSNames, c.URIs = "client", nil, []*url.URL{{Path: "*"}}
	}, "x")
	shopPEM, shopKey := ca.issue(t, nb, na, "shop.acme.example")
	for _, u := range []struct {
		name      string
		cert, key []byte
	}{{"client", clientPEM, clientKey}, {"shop", shopPEM, shopKey}} {
		if _, err := svc.Upload(ctx, &pb.UploadCertificateRequest{Tenant: "acme", Name: u.name, CertPem: u.cert, KeyPem: u.key}); err != nil {
			t.Fatalf("upload %s: %v", u.name, err)
		}
	}
	m, err := New(Config{Store: store, Host: "h", CA: "https://127.0.0.1:1/dir", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Update(store.objectsWith())
	m.reconcile(m.latest.Load())
	for _, c := range []struct {
		tenant, name, cn string
	}{{"acme", "client", "client"}, {"acme", "shop", "shop.acme.example"}, {"globex", "client", ""}, {"acme", "nope", ""}} {
		got := m.Uploaded(c.tenant, c.name)
		switch {
		case c.cn == "" && got != nil:
			t.Errorf("%s/%s: found a certificate", c.tenant, c.name)
		case c.cn != "" && (got == nil || got.PrivateKey == nil):
			t.Errorf("%s/%s: no certificate with its key", c.tenant, c.name)
		case c.cn != "":
			leaf, err := x509.ParseCertificate(got.Certificate[0])
			if err != nil || leaf.Subject.CommonName != c.cn {
				t.Errorf("%s/%s: certificate of %q (%v), want %q", c.tenant, c.name, leaf.Subject.CommonName, err, c.cn)
			}
		}
	}
}
