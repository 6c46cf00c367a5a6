package certs

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestHostlessCertificateIsOnlyItsListenersDefault: a certificate that
// names no host (the Gateway API conformance suite's: common name
// "default", URI "*") is stored, claims no name, and is served only by the
// listeners of its tenant that list it, to clients whose server name none
// of their other certificates covers.
func TestHostlessCertificateIsOnlyItsListenersDefault(t *testing.T) {
	ca := newTestCA(t)
	store := newMemStore()
	svc := NewService(store)
	ctx := ctxT(t)
	store.put(acmeTenant("acme", 0, "acme.example"))
	store.put(acmeTenant("globex", 0, "globex.example"))
	nb, na := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	anonPEM, anonKey := ca.issueWith(t, nb, na, func(c *x509.Certificate) {
		c.Subject.CommonName, c.DNSNames, c.URIs = "default", nil, []*url.URL{{Path: "*"}}
	}, "x")
	for _, u := range []struct {
		tenant, name string
		cert, key    []byte
	}{
		{"acme", "anon", anonPEM, anonKey},
		{"acme", "shop", nil, nil},
		{"globex", "shop", nil, nil},
	} {
		if u.cert == nil {
			u.cert, u.key = ca.issue(t, nb, na, u.name+"."+u.tenant+".example")
		}
		resp, err := svc.Upload(ctx, &pb.UploadCertificateRequest{Tenant: u.tenant, Name: u.name, CertPem: u.cert, KeyPem: u.key})
		if err != nil {
			t.Fatalf("upload %s/%s: %v", u.tenant, u.name, err)
		}
		if u.name == "anon" && len(resp.GetHosts()) != 0 {
			t.Fatalf("the hostless certificate claims %v", resp.GetHosts())
		}
	}

	m, err := New(Config{Store: store, Host: "h", CA: "https://127.0.0.1:1/dir", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Update(store.objectsWith())
	m.reconcile(m.latest.Load())
	term := m.Terminator(greeter{})
	addrs := map[string]string{}
	for _, l := range []struct {
		key, tenant string
		uploads     []string
	}{
		{"acme-anon", "acme", []string{"anon"}},
		{"acme-shop-anon", "acme", []string{"shop", "anon"}},
		{"acme-shop", "acme", []string{"shop"}},
		// globex names a certificate "anon": it has none, and acme's is
		// never its.
		{"globex-anon", "globex", []string{"shop", "anon"}},
	} {
		addrs[l.key] = porttest.Addr(t, "127.0.0.1")
		serveTLS(t, addrs[l.key], term, listener(l.tenant, false, l.uploads))
	}
	// hello returns the subject common name of the certificate served.
	hello := func(addr, name string) (string, error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			return "", err
		}
		defer c.Close()
		leaf := c.ConnectionState().PeerCertificates[0]
		io.ReadAll(c)
		return leaf.Subject.CommonName, nil
	}
	tests := []struct {
		listener, name, want string // want "" means refused
	}{
		{"acme-anon", "", "default"},
		{"acme-anon", "shop.acme.example", "default"},
		{"acme-anon", "shop.globex.example", "default"}, // its own VIP: the name is the client's guess
		{"acme-shop-anon", "shop.acme.example", "shop.acme.example"},
		{"acme-shop-anon", "api.acme.example", "default"},
		{"acme-shop-anon", "", "default"},
		{"acme-shop", "api.acme.example", ""},
		{"globex-anon", "shop.globex.example", "shop.globex.example"},
		{"globex-anon", "default", ""},
		{"globex-anon", "other.globex.example", ""},
		{"globex-anon", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.listener+" "+tc.name, func(t *testing.T) {
			got, err := hello(addrs[tc.listener], tc.name)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("served %s", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q %v, want %s", got, err, tc.want)
			}
		})
	}
	t.Run("a client checking the name refuses it", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		_, err := tls.Dial("tcp", addrs["acme-anon"], &tls.Config{ServerName: "shop.acme.example", RootCAs: pool})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a verifying client accepted the hostless certificate: %v", err)
		}
	})
	t.Run("deleted, it is no default any more", func(t *testing.T) {
		if _, err := svc.Delete(ctx, &pb.DeleteCertificateRequest{Tenant: "acme", Name: "anon"}); err != nil {
			t.Fatal(err)
		}
		m.Update(store.objectsWith())
		m.reconcile(m.latest.Load())
		if got, err := hello(addrs["acme-anon"], ""); err == nil {
			t.Fatalf("still served: %s", got)
		}
		if got, err := hello(addrs["acme-shop-anon"], "api.acme.example"); err == nil {
			t.Fatalf("still served for an unknown name: %s", got)
		}
		if got, err := hello(addrs["acme-shop-anon"], "shop.acme.example"); err != nil || got != "shop.acme.example" {
			t.Fatalf("the named certificate: %q %v", got, err)
		}
	})
}
