package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// testCA is a CA that signs member certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// issue signs a serving certificate for dns names and uris (a client
// certificate with usage x509.ExtKeyUsageClientAuth).
func (ca *testCA) issue(t *testing.T, dns []string, uris []string, usage ...x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: dns,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	if len(usage) > 0 {
		tmpl.ExtKeyUsage = usage
	}
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// outcomes records the outcome of the last request of each pool.
type outcomes struct {
	mu sync.Mutex
	by map[string]l7.Outcome
}

func (o *outcomes) Request(s l7.RequestStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.by[s.Pool] = s.Outcome
}
func (o *outcomes) Conn(*l7.ConnInfo, bool) {}

func (o *outcomes) of(path string) l7.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.by[path]
}

// TestBackendTLSVerifiesMembers: members that speak TLS (HTTP/1.1 and
// HTTP/2) are sent the pool's server name and pass only with a
// certificate of the pool's CA that holds the server name, or one of the
// pool's subject alternative names; any other certificate gets the
// client 502 with outcome member-tls, without ejecting the member from
// the pools that trust it.
func TestBackendTLSVerifiesMembers(t *testing.T) {
	ca, other := newTestCA(t, "member CA"), newTestCA(t, "unrelated CA")
	cert := ca.issue(t, []string{"abc.example.com", "other.example.com"}, []string{"spiffe://abc.example.com/test-identity"})
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s sni=%s", r.Proto, r.TLS.ServerName)
	})
	h1 := httptest.NewUnstartedServer(report)
	h1.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	h1.Config.ErrorLog = log.New(io.Discard, "", 0)
	h1.StartTLS()
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(report)
	h2.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	h2.Config.ErrorLog = log.New(io.Discard, "", 0)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)

	rec := &outcomes{by: map[string]l7.Outcome{}}
	srv := l7.New(l7.Config{Metrics: rec})
	t.Cleanup(func() { srv.Close() })
	cpu := cpubudget.New(cpubudget.Options{})
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), CPU: cpu})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "btls", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Pools:     map[string]*pb.BackendPool{},
		Status:    &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	san := func(dns, uri string) []*pb.SubjectAltName { return []*pb.SubjectAltName{{Hostname: dns, Uri: uri}} }
	cases := []struct {
		name, proto, member, ca, server string
		sans                            []*pb.SubjectAltName
		want                            string // "" expects 502
	}{
		{"good", "tls", h1.Listener.Addr().String(), ca.pem, "abc.example.com", nil, "HTTP/1.1 sni=abc.example.com"},
		{"good-h2", "h2", h2.Listener.Addr().String(), ca.pem, "abc.example.com", nil, "HTTP/2.0 sni=abc.example.com"},
		{"wrong-ca", "tls", h1.Listener.Addr().String(), other.pem, "abc.example.com", nil, ""},
		{"wrong-ca-h2", "h2", h2.Listener.Addr().String(), other.pem, "abc.example.com", nil, ""},
		{"wrong-name", "tls", h1.Listener.Addr().String(), ca.pem, "mismatch.example.com", nil, ""},
		{"san-dns", "tls", h1.Listener.Addr().String(), ca.pem, "mismatch.example.com", san("other.example.com", ""), "HTTP/1.1 sni=mismatch.example.com"},
		{"san-dns-wrong", "tls", h1.Listener.Addr().String(), ca.pem, "abc.example.com", san("wrong.example.com", ""), ""},
		{"san-uri", "h2", h2.Listener.Addr().String(), ca.pem, "abc.example.com", san("", "spiffe://abc.example.com/test-identity"), "HTTP/2.0 sni=abc.example.com"},
		{"san-uri-wrong", "tls", h1.Listener.Addr().String(), ca.pem, "abc.example.com", san("", "spiffe://abc.example.com/other"), ""},
	}
	for _, c := range cases {
		lb.Routes = append(lb.Routes, &pb.Route{Host: shopHost, Path: "/" + c.name + "/", Pool: c.name})
		lb.Pools[c.name] = &pb.BackendPool{BackendProtocol: c.proto, Members: []*pb.Member{{Address: c.member}},
			Tls: &pb.BackendTLS{CaPem: c.ca, ServerName: c.server, SubjectAltNames: c.sans}}
	}
	update(t, p, lb)
	if st := p.Status()["acme/btls"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	get := func(t *testing.T, name string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+vipAddr("127.0.0.2", port)+"/"+name+"/x", nil)
		req.Host = shopHost
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := get(t, c.name)
			switch {
			case c.want != "" && (code != 200 || body != c.want):
				t.Fatalf("%d %q, want 200 %q", code, body, c.want)
			case c.want == "" && code != 502:
				t.Fatalf("%d %q, want 502 (the member's certificate must fail verification)", code, body)
			case c.want == "":
				// The request's stats are reported once its answer is sent.
				eventually(t, "the request counted with outcome member-tls", func() bool { return rec.of(c.name) == l7.OutcomeMemberTLS })
			}
		})
	}
	// Many failures under the pools that distrust the member do not eject
	// it from the pool that trusts it.
	for range 30 {
		get(t, "wrong-name")
	}
	if code, body := get(t, "good"); code != 200 {
		t.Fatalf("after the failures of other pools, the trusted member answers %d %q", code, body)
	}
	pools, _ := p.current.Load().byLB.Get("acme/btls")
	for _, lp := range pools {
		if lp.Spec.Name != "good" {
			continue
		}
		for _, m := range lp.Members() {
			if st := Target(m).Status(); st.Ejected {
				t.Fatalf("the member %s was ejected by the certificate failures of pools that distrust it: %+v", m.Addr, st)
			}
		}
	}
	// The handshakes to members are charged to the tenant.
	var hellos uint64
	for _, s := range cpu.Stats() {
		if s.Tenant == "acme" {
			hellos = s.Hellos
		}
	}
	if hellos == 0 {
		t.Error("no member handshake was charged to the tenant's handshake budget")
	}
}

// TestMemberHandshakesChargedToTenant: a tenant whose handshake CPU
// budget is spent gets 503 (member-limit) for a request that needs a new
// TLS connection to a member, and the refusal is counted against it.
func TestMemberHandshakesChargedToTenant(t *testing.T) {
	ca := newTestCA(t, "member CA")
	cert := ca.issue(t, []string{"abc.example.com"}, nil)
	member := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	member.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	member.Config.ErrorLog = log.New(io.Discard, "", 0)
	member.StartTLS()
	t.Cleanup(member.Close)

	rec := &outcomes{by: map[string]l7.Outcome{}}
	srv := l7.New(l7.Config{Metrics: rec})
	t.Cleanup(func() { srv.Close() })
	// One handshake puts the tenant an hour in debt.
	cpu := cpubudget.New(cpubudget.Options{Rate: 0.001, Burst: time.Millisecond, Overhead: time.Hour, MaxWait: 10 * time.Millisecond})
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), CPU: cpu})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "btls", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Routes:    []*pb.Route{{Host: shopHost, Path: "/a/", Pool: "a"}, {Host: shopHost, Path: "/b/", Pool: "b"}},
		Pools: map[string]*pb.BackendPool{
			// Two pools that verify the member alike but are configured
			// apart: their connections are not shared.
			"a": {BackendProtocol: "tls", Members: []*pb.Member{{Address: member.Listener.Addr().String()}}, Tls: &pb.BackendTLS{CaPem: ca.pem, ServerName: "abc.example.com"}},
			"b": {BackendProtocol: "tls", Members: []*pb.Member{{Address: member.Listener.Addr().String()}}, Tls: &pb.BackendTLS{CaPem: ca.pem + "\n", ServerName: "abc.example.com"}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	get := func(path string) int {
		req, _ := http.NewRequest("GET", "http://"+vipAddr("127.0.0.2", port)+path, nil)
		req.Host = shopHost
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/a/x"); code != 200 {
		t.Fatalf("the first handshake, within the budget: %d, want 200", code)
	}
	if code := get("/b/x"); code != 503 {
		t.Fatalf("a handshake over the tenant's budget: %d, want 503", code)
	}
	eventually(t, "the refused request counted as member-limit", func() bool { return rec.of("b") == l7.OutcomeMemberLimit })
	var st cpubudget.Stat
	for _, s := range cpu.Stats() {
		if s.Tenant == "acme" {
			st = s
		}
	}
	if st.Hellos != 1 || st.Refused == 0 {
		t.Fatalf("the tenant's account: %+v, want 1 handshake admitted and the next refused", st)
	}
}

// TestBackendTLSClientCertificate: a pool with tls.clientCertificate
// presents the tenant's uploaded certificate to a member that requires
// one, its signature charged to the tenant; a pool without one is
// refused by that member, and one naming a certificate the host has not
// loaded fails with member-tls.
func TestBackendTLSClientCertificate(t *testing.T) {
	ca := newTestCA(t, "member CA")
	serving := ca.issue(t, []string{"abc.example.com"}, nil)
	client := ca.issue(t, nil, nil, x509.ExtKeyUsageClientAuth)
	clients := x509.NewCertPool()
	clients.AddCert(ca.cert)
	member := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "client=%s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	member.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	member.Config.ErrorLog = log.New(io.Discard, "", 0)
	member.StartTLS()
	t.Cleanup(member.Close)

	rec := &outcomes{by: map[string]l7.Outcome{}}
	srv := l7.New(l7.Config{Metrics: rec})
	t.Cleanup(func() { srv.Close() })
	cpu := cpubudget.New(cpubudget.Options{})
	lookups := map[string]int{}
	var mu sync.Mutex
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil), CPU: cpu, ClientCertificate: func(tenant, name string) *tls.Certificate {
		mu.Lock()
		defer mu.Unlock()
		lookups[tenant+"/"+name]++
		if tenant == "acme" && name == "members-client" {
			return &client
		}
		return nil
	}})
	port := freePort(t)
	pool := func(cert string) *pb.BackendPool {
		return &pb.BackendPool{BackendProtocol: "tls", Members: []*pb.Member{{Address: member.Listener.Addr().String()}},
			Tls: &pb.BackendTLS{CaPem: ca.pem, ServerName: "abc.example.com", ClientCertificate: cert}}
	}
	lb := &pb.LoadBalancer{Name: "btls", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Routes: []*pb.Route{{Host: shopHost, Path: "/with/", Pool: "with"}, {Host: shopHost, Path: "/without/", Pool: "without"},
			{Host: shopHost, Path: "/missing/", Pool: "missing"}},
		Pools:  map[string]*pb.BackendPool{"with": pool("members-client"), "without": pool(""), "missing": pool("not-loaded")},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+vipAddr("127.0.0.2", port)+path, nil)
		req.Host = shopHost
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := get("/with/x"); code != 200 || body != "client=member" {
		t.Fatalf("with the client certificate: %d %q, want 200 client=member", code, body)
	}
	if code, body := get("/without/x"); code == 200 {
		t.Fatalf("without a client certificate the member answered %d %q", code, body)
	}
	if code, _ := get("/missing/x"); code != 502 {
		t.Fatalf("a client certificate the host has not loaded: %d, want 502", code)
	}
	eventually(t, "the request counted with outcome member-tls", func() bool { return rec.of("missing") == l7.OutcomeMemberTLS })
	var signed uint64
	for _, s := range cpu.Stats() {
		if s.Tenant == "acme" {
			signed = s.Signed
		}
	}
	if signed == 0 {
		t.Error("the client certificate's signature was not charged to the tenant")
	}
}
