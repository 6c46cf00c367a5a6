package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// testCA issues certificates for the upload tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test Root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &testCA{cert: c, key: key, pool: pool}
}

// issue returns a leaf for names valid from nb to na, as cert and key PEM.
func (ca *testCA) issue(t testing.TB, nb, na time.Time, names ...string) (certPEM, keyPEM []byte) {
	return ca.issueWith(t, nb, na, func(*x509.Certificate) {}, names...)
}

// issueWith is issue with the template changed by edit.
func (ca *testCA) issueWith(t testing.TB, nb, na time.Time, edit func(*x509.Certificate), names ...string) (certPEM, keyPEM []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: nb, NotAfter: na, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func TestCheckUpload(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	good := func(names ...string) ([]byte, []byte) {
		return ca.issue(t, now.Add(-time.Hour), now.Add(24*time.Hour), names...)
	}
	acme := &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}}
	tld := &pb.Tenant{Name: "tld", Domains: []string{"example"}}
	shopCert, shopKey := good("shop.acme.example")
	_, otherKey := good("shop.acme.example")
	wild, wildKey := good("*.acme.example", "acme.example")
	foreign, foreignKey := good("shop.globex.example")
	mixed, mixedKey := good("shop.acme.example", "shop.globex.example")
	expired, expiredKey := ca.issue(t, now.Add(-48*time.Hour), now.Add(-time.Hour), "shop.acme.example")
	future, futureKey := ca.issue(t, now.Add(time.Hour), now.Add(48*time.Hour), "shop.acme.example")
	chain := append(append([]byte{}, shopCert...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	valid := func(edit func(*x509.Certificate), names ...string) ([]byte, []byte) {
		return ca.issueWith(t, now.Add(-time.Hour), now.Add(24*time.Hour), edit, names...)
	}
	// The Gateway API conformance suite's certificate: a URI "*" beside
	// its DNS names.
	withURI, withURIKey := valid(func(c *x509.Certificate) { c.URIs = []*url.URL{{Path: "*"}} }, "*.acme.example")
	tldWild, tldWildKey := good("*.example")
	tldOther, tldOtherKey := good("*.org")
	oneLabel, oneLabelKey := good("example")
	// The suite's Secret "certificate": common name "default", the URI
	// "*" and no DNS name; and certificates naming their host only in the
	// common name.
	noHost, noHostKey := valid(func(c *x509.Certificate) {
		c.Subject.CommonName, c.DNSNames, c.URIs = "default", nil, []*url.URL{{Path: "*"}}
	}, "x")
	cnOnly, cnOnlyKey := valid(func(c *x509.Certificate) { c.DNSNames = nil }, "shop.acme.example")
	cnForeign, cnForeignKey := valid(func(c *x509.Certificate) { c.DNSNames = nil }, "shop.globex.example")
	withIP, withIPKey := valid(func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.ParseIP("192.0.2.10")} }, "shop.acme.example")
	withMail, withMailKey := valid(func(c *x509.Certificate) { c.EmailAddresses = []string{"ops@acme.example"} }, "shop.acme.example")
	tests := []struct {
		name       string
		certName   string
		cert, key  []byte
		want       string // "" for success, else a fragment of the error
		wantHosts  string
		chainCerts int
	}{
		{"leaf", "shop", shopCert, shopKey, "", "[shop.acme.example]", 1},
		{"chain", "shop", chain, shopKey, "", "[shop.acme.example]", 2},
		{"wildcard", "wild", wild, wildKey, "", "[*.acme.example acme.example]", 1},
		{"key of another certificate", "shop", shopCert, otherKey, "key: the private key does not match", "", 0},
		{"not PEM", "shop", []byte("hello"), shopKey, "cert: holds no PEM certificate", "", 0},
		{"key in the cert file", "shop", shopKey, shopKey, `cert: holds a "EC PRIVATE KEY" PEM block`, "", 0},
		{"expired", "shop", expired, expiredKey, "cert: expired on", "", 0},
		{"not yet valid", "shop", future, futureKey, "cert: is not valid before", "", 0},
		{"another tenant's host", "shop", foreign, foreignKey, "shop.globex.example, which is not inside the tenant's domains (acme.example)", "", 0},
		{"one foreign host among others", "shop", mixed, mixedKey, "shop.globex.example", "", 0},
		{"bad name", "Shop.Cert", shopCert, shopKey, `name: "Shop.Cert" must be`, "", 0},
		{"a URI beside the DNS names", "uri", withURI, withURIKey, "", "[*.acme.example]", 1},
		{"a wildcard of a one-label domain", "tld", tldWild, tldWildKey, "", "[*.example]", 1},
		{"a one-label domain outside the tenant's", "tld", tldOther, tldOtherKey, "*.org, which is not inside the tenant's domains", "", 0},
		{"a one-label name", "tld", oneLabel, oneLabelKey, `names "example", which is not a DNS name`, "", 0},
		{"no host: default and a URI", "anon", noHost, noHostKey, "", "[]", 1},
		{"a host in the common name only", "cn", cnOnly, cnOnlyKey, "", "[shop.acme.example]", 1},
		{"another tenant's host in the common name", "cn", cnForeign, cnForeignKey, "shop.globex.example, which is not inside the tenant's domains", "", 0},
		{"an IP address", "ip", withIP, withIPKey, "cert: names IP addresses or e-mail addresses", "", 0},
		{"an e-mail address", "mail", withMail, withMailKey, "cert: names IP addresses or e-mail addresses", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tenant := acme
			if tc.certName == "tld" { // the cases of a tenant whose domain is one label
				tenant = tld
			}
			c, secret, err := CheckUpload(tenant, tc.certName, tc.cert, tc.key, now)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, api.ErrInvalid) {
					t.Fatalf("got %v, want an invalid error with %q", err, tc.want)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(c.GetHosts()) != tc.wantHosts || c.GetSource() != SourceUploaded || c.GetIssuer() != "Test Root" || c.GetState() != StateValid {
				t.Fatalf("certificate %v", c)
			}
			certPEM, keyPEM := splitPEM(secret)
			if strings.Count(string(certPEM), "BEGIN CERTIFICATE") != tc.chainCerts {
				t.Fatalf("secret keeps %d certificates, want %d", strings.Count(string(certPEM), "BEGIN CERTIFICATE"), tc.chainCerts)
			}
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Fatalf("stored secret does not load: %v", err)
			}
		})
	}
}

// uploadedSetup runs a manager with two tenants' uploaded certificates
// behind listeners of both tenants.
func TestUploadedCertificatesStayWithTheirTenant(t *testing.T) {
	ca := newTestCA(t)
	store := newMemStore()
	svc := NewService(store)
	ctx := ctxT(t)
	store.put(acmeTenant("acme", 2, "acme.example"))
	store.put(acmeTenant("globex", 0, "globex.example"))
	upload := func(tenant, name string, hosts ...string) error {
		certPEM, keyPEM := ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), hosts...)
		_, err := svc.Upload(ctx, &pb.UploadCertificateRequest{Tenant: tenant, Name: name, CertPem: certPEM, KeyPem: keyPEM})
		return err
	}
	for _, u := range []struct{ tenant, name, host string }{
		{"acme", "shop", "shop.acme.example"},
		{"acme", "wild", "*.acme.example"},
		{"globex", "shop", "shop.globex.example"},
	} {
		if err := upload(u.tenant, u.name, u.host); err != nil {
			t.Fatalf("upload %s/%s: %v", u.tenant, u.name, err)
		}
	}
	t.Run("upload refusals", func(t *testing.T) {
		cases := []struct {
			tenant, name, host string
			code               codes.Code
		}{
			{"globex", "steal", "shop.acme.example", codes.InvalidArgument},   // B cannot upload A's host
			{"acme", "third", "third.acme.example", codes.FailedPrecondition}, // quota 2
			{"nobody", "x", "x.acme.example", codes.NotFound},
		}
		for _, c := range cases {
			err := upload(c.tenant, c.name, c.host)
			if status.Code(err) != c.code {
				t.Errorf("%s/%s for %s: %v, want %s", c.tenant, c.name, c.host, err, c.code)
			}
		}
		if err := upload("acme", "shop", "shop.acme.example"); err != nil {
			t.Errorf("replacing within the quota: %v", err)
		}
	})
	t.Run("the API never returns a key", func(t *testing.T) {
		resp, err := svc.List(ctx, &pb.ListCertificatesRequest{Tenant: "acme"})
		if err != nil || len(resp.GetCertificates()) != 2 {
			t.Fatalf("list: %v %v", resp, err)
		}
		for _, c := range resp.GetCertificates() {
			if strings.Contains(c.String(), "PRIVATE") {
				t.Fatalf("key material in %v", c)
			}
		}
	})

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
		key     string
		tenant  string
		uploads []string
	}{
		{"acme", "acme", []string{"shop", "wild"}},
		{"acme-shop-only", "acme", []string{"shop"}},
		// globex lists a certificate named "shop": its own, never acme's.
		{"globex", "globex", []string{"shop"}},
	} {
		addrs[l.key] = porttest.Addr(t, "127.0.0.1")
		serveTLS(t, addrs[l.key], term, listener(l.tenant, false, l.uploads))
	}
	hello := func(addr, name string) (string, error) {
		// Without a name the client cannot verify it; the test checks
		// which certificate came.
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, RootCAs: ca.pool, InsecureSkipVerify: name == ""})
		if err != nil {
			return "", err
		}
		defer c.Close()
		leaf := c.ConnectionState().PeerCertificates[0]
		io.ReadAll(c)
		return strings.Join(leaf.DNSNames, ","), nil
	}
	tests := []struct {
		listener, name, want string // want "" means refused
	}{
		{"acme", "shop.acme.example", "shop.acme.example"}, // exact beats the wildcard
		{"acme", "api.acme.example", "*.acme.example"},
		{"acme", "a.b.acme.example", ""}, // a wildcard covers one label
		{"acme", "shop.globex.example", ""},
		{"acme-shop-only", "api.acme.example", ""},
		{"acme-shop-only", "", "shop.acme.example"}, // no SNI: its only certificate
		{"globex", "shop.globex.example", "shop.globex.example"},
		{"globex", "shop.acme.example", ""},
		{"globex", "", "shop.globex.example"},
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
	t.Run("an IP address as server name is no server name", func(t *testing.T) {
		// Go clients never send one; ask the listener's configuration.
		for _, tc := range []struct{ listener, name, want string }{
			{"acme-shop-only", "127.0.0.1", "shop.acme.example"},
			{"globex", "2001:db8::1", "shop.globex.example"},
		} {
			cfg := m.ServerConfig(listener(tc.listener[:strings.IndexAny(tc.listener+"-", "-")], false, map[string][]string{"acme-shop-only": {"shop"}, "globex": {"shop"}}[tc.listener]))
			c, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: tc.name})
			if err != nil || c.Leaf == nil || strings.Join(c.Leaf.DNSNames, ",") != tc.want {
				t.Fatalf("%s with SNI %s: %v %v, want %s", tc.listener, tc.name, c, err, tc.want)
			}
		}
	})
	t.Run("deleted certificates stop being served", func(t *testing.T) {
		if _, err := svc.Delete(ctx, &pb.DeleteCertificateRequest{Tenant: "globex", Name: "shop"}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.StorageGet(ctx, UploadKey("globex", "shop")); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("the key outlived its certificate: %v", err)
		}
		m.Update(store.objectsWith())
		m.reconcile(m.latest.Load())
		if got, err := hello(addrs["globex"], "shop.globex.example"); err == nil {
			t.Fatalf("still served: %s", got)
		}
	})
}

func TestComputeDesired(t *testing.T) {
	lb := func(tenant, name, addr string, acme bool, hosts ...string) *pb.Object {
		o := acmeLB(tenant, name, hosts...)
		o.GetLoadBalancer().Status.Address = addr
		o.GetLoadBalancer().Listeners[0].Tls.Acme = acme
		return o
	}
	uploaded := api.Wrap(&pb.Certificate{Tenant: "acme", Name: "up", Source: SourceUploaded})
	tests := []struct {
		name    string
		objs    []*pb.Object
		managed string
		refused string
	}{
		{"hosts of acme listeners", []*pb.Object{acmeTenant("acme", 0, "acme.example"), lb("acme", "web", "192.0.2.1", true, "b.acme.example", "a.acme.example", "")},
			"map[a.acme.example:acme b.acme.example:acme]", "[]"},
		{"no acme, no address, no tenant", []*pb.Object{acmeTenant("acme", 0, "acme.example"), lb("acme", "web", "192.0.2.1", false, "a.acme.example"),
			lb("acme", "new", "", true, "b.acme.example"), lb("ghost", "web", "192.0.2.2", true, "c.acme.example")}, "map[]", "[]"},
		{"hosts outside the domains are never requested, wildcards outside the served zones refused", []*pb.Object{acmeTenant("acme", 0, "acme.example"), acmeTenant("globex", 0, "globex.example"),
			lb("globex", "steal", "192.0.2.1", true, "shop.acme.example", "*.globex.example", "globex.example")}, "map[globex.example:globex]", "[*.globex.example]"},
		{"quota counts uploads first", []*pb.Object{acmeTenant("acme", 2, "acme.example"), uploaded, lb("acme", "web", "192.0.2.1", true, "c.acme.example", "a.acme.example", "b.acme.example")},
			"map[a.acme.example:acme]", "[b.acme.example c.acme.example]"},
		{"one tenant per host", []*pb.Object{acmeTenant("acme", 0, "acme.example"), lb("acme", "one", "192.0.2.1", true, "a.acme.example"), lb("acme", "two", "192.0.2.2", true, "a.acme.example")},
			"map[a.acme.example:acme]", "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := computeDesired(tc.objs, nil)
			var refused []string
			for h := range d.refused {
				refused = append(refused, h)
			}
			if fmt.Sprint(d.managed) != tc.managed || fmt.Sprint(sortStrings(refused)) != tc.refused {
				t.Fatalf("managed %v refused %v; want %s %s", d.managed, refused, tc.managed, tc.refused)
			}
		})
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// TestSessionsResumeAcrossHosts: hosts given the same ticket secret resume
// each other's sessions; a host with another secret does not.
func TestSessionsResumeAcrossHosts(t *testing.T) {
	ca := newTestCA(t)
	store := newMemStore()
	store.put(acmeTenant("acme", 0, "acme.example"))
	certPEM, keyPEM := ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "shop.acme.example")
	if _, err := NewService(store).Upload(ctxT(t), &pb.UploadCertificateRequest{Tenant: "acme", Name: "shop", CertPem: certPEM, KeyPem: keyPEM}); err != nil {
		t.Fatal(err)
	}
	host := func(secret string) string {
		m, err := New(Config{Store: store, Host: secret, CA: "https://127.0.0.1:1/dir", TicketSecret: []byte(secret), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		m.Update(store.objectsWith())
		m.reconcile(m.latest.Load())
		addr := porttest.Addr(t, "127.0.0.1")
		serveTLS(t, addr, m.Terminator(greeter{}), listener("acme", false, []string{"shop"}, "shop.acme.example"))
		return addr
	}
	a, b, other := host("cluster secret"), host("cluster secret"), host("another cluster")
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cache := tls.NewLRUClientSessionCache(1)
		dial := func(addr string) bool {
			c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "shop.acme.example", RootCAs: ca.pool, ClientSessionCache: cache, MaxVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.ReadAll(c) // TLS 1.3 tickets come after the handshake
			return c.ConnectionState().DidResume
		}
		if dial(a) {
			t.Fatal("first handshake resumed")
		}
		if !dial(b) {
			t.Errorf("TLS %x: a session from host a did not resume on host b", v)
		}
		if dial(other) {
			t.Errorf("TLS %x: a session resumed on a host with another secret", v)
		}
	}
}
