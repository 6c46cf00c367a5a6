package health

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// testCA is a certificate authority for the tests' servers and clients.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// issue returns a leaf certificate and key, as PEM, for the names and IPs.
func (ca *testCA) issue(t *testing.T, cn string, client bool, dns []string, ips ...net.IP) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
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

// readyzServer is an HTTPS server answering /readyz with a settable
// status, like a kube-apiserver; it records what each request carried.
type readyzServer struct {
	srv        *httptest.Server
	addr       netip.AddrPort
	status     atomic.Int32
	sni        atomic.Value // string
	host       atomic.Value // string
	clientCN   atomic.Value // string
	handshakes atomic.Int32
}

func newReadyzServer(t *testing.T, ca *testCA, clientCA *testCA) *readyzServer {
	t.Helper()
	rs := &readyzServer{}
	rs.status.Store(http.StatusOK)
	rs.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.host.Store(r.Host)
		if len(r.TLS.PeerCertificates) > 0 {
			rs.clientCN.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(int(rs.status.Load()))
	}))
	certPEM, keyPEM := ca.issue(t, "kube-apiserver", false, []string{"kubernetes.default.svc", "api.acme.internal"}, net.IPv4(127, 0, 0, 1))
	cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		rs.sni.Store(h.ServerName)
		rs.handshakes.Add(1)
		return nil, nil
	}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	rs.srv.TLS = conf
	rs.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rs.srv.StartTLS()
	t.Cleanup(rs.srv.Close)
	rs.addr = netip.MustParseAddrPort(rs.srv.Listener.Addr().String())
	return rs
}

// httpsCheck is an https check of /readyz with a generous timeout: a TLS
// handshake under the race detector on a loaded machine takes a while.
func httpsCheck(ca string) *snapshot.HealthCheck {
	return &snapshot.HealthCheck{HTTP: true, TLS: true, Path: "/readyz", CAPEM: ca,
		Interval: 50 * time.Millisecond, Timeout: 3 * time.Second, Rise: 2, Fall: 2}
}

// firstResult acquires a target for hc and waits for its first check.
func firstResult(t *testing.T, r *Registry, addr netip.AddrPort, hc *snapshot.HealthCheck) *Target {
	t.Helper()
	tg := r.Acquire(addr, hc)
	t.Cleanup(func() { r.Release(tg) })
	eventually(t, "first check", func() bool { tg.mu.Lock(); defer tg.mu.Unlock(); return tg.active.checked })
	return tg
}

func TestHTTPSCheckVerifiesTheMemberAndFollowsReadyz(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	rs := newReadyzServer(t, ca, nil)
	r := NewRegistry(Options{})
	defer r.Close()

	hc := httpsCheck(ca.pem)
	hc.Host = "api.acme.internal"
	tg := firstResult(t, r, rs.addr, hc)
	if !tg.Healthy() {
		t.Fatalf("ready member verified by its CA is down: %+v", tg.Status())
	}
	if sni, _ := rs.sni.Load().(string); sni != "api.acme.internal" {
		t.Errorf("SNI %q, want the Host when serverName is unset", sni)
	}
	if h, _ := rs.host.Load().(string); h != "api.acme.internal" {
		t.Errorf("Host header %q", h)
	}

	// Unready: TLS still answers, /readyz says 500.
	rs.status.Store(http.StatusInternalServerError)
	eventually(t, "unready member down", func() bool { return !tg.Healthy() })
	if s := tg.Status(); !strings.Contains(s.LastError, "500") {
		t.Errorf("last error %q, want the unexpected status 500", s.LastError)
	}
	rs.status.Store(http.StatusOK)
	eventually(t, "ready member up again", func() bool { return tg.Healthy() })
}

func TestHTTPSCheckRefusesWrongCertificates(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	other := newTestCA(t, "another CA")
	r := NewRegistry(Options{})
	defer r.Close()

	// Each case checks a server of its own, which records the SNI of
	// that case's handshakes only. Go never sends an IP address as SNI,
	// so a check of the member's IP sends none.
	for _, tc := range []struct {
		name    string
		hc      func() *snapshot.HealthCheck
		healthy bool
		errHas  string
		sni     string
		noDial  bool
	}{
		{"member IP verified by default", func() *snapshot.HealthCheck { return httpsCheck(ca.pem) }, true, "", "", false},
		{"SNI names a SAN", func() *snapshot.HealthCheck {
			hc := httpsCheck(ca.pem)
			hc.ServerName = "kubernetes.default.svc"
			return hc
		}, true, "", "kubernetes.default.svc", false},
		{"unknown CA", func() *snapshot.HealthCheck { return httpsCheck(other.pem) }, false, "unknown authority", "", false},
		{"name not in the certificate", func() *snapshot.HealthCheck {
			hc := httpsCheck(ca.pem)
			hc.ServerName = "evil.example"
			return hc
		}, false, "evil.example", "evil.example", false},
		{"insecureSkipVerify accepts any", func() *snapshot.HealthCheck {
			hc := httpsCheck("")
			hc.InsecureSkipVerify, hc.ServerName = true, "evil.example"
			return hc
		}, true, "", "evil.example", false},
		{"CA that does not parse", func() *snapshot.HealthCheck { return httpsCheck("not PEM") }, false, "caPem", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := newReadyzServer(t, ca, nil)
			tg := firstResult(t, r, rs.addr, tc.hc())
			if tg.Healthy() != tc.healthy {
				t.Fatalf("healthy = %v, want %v: %+v", tg.Healthy(), tc.healthy, tg.Status())
			}
			if s := tg.Status(); !strings.Contains(s.LastError, tc.errHas) || (tc.errHas == "") != (s.LastError == "") {
				t.Errorf("last error %q, want one naming %q", s.LastError, tc.errHas)
			}
			n := rs.handshakes.Load()
			switch {
			case tc.noDial && n != 0:
				t.Errorf("%d handshakes with a check whose TLS settings do not parse", n)
			case !tc.noDial && n == 0:
				t.Fatal("the server saw no handshake")
			}
			if sni, _ := rs.sni.Load().(string); sni != tc.sni {
				t.Errorf("SNI %q, want %q", sni, tc.sni)
			}
		})
	}
}

func TestHTTPSCheckPresentsClientCertificate(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	clientCA := newTestCA(t, "client CA")
	rs := newReadyzServer(t, ca, clientCA)
	r := NewRegistry(Options{})
	defer r.Close()

	without := firstResult(t, r, rs.addr, httpsCheck(ca.pem))
	if without.Healthy() {
		t.Fatalf("member requiring a client certificate is up without one: %+v", without.Status())
	}
	hc := httpsCheck(ca.pem)
	hc.ClientCertPEM, hc.ClientKeyPEM = clientCA.issue(t, "teapot-lb-health", true, nil)
	with := firstResult(t, r, rs.addr, hc)
	if !with.Healthy() {
		t.Fatalf("member is down with a valid client certificate: %+v", with.Status())
	}
	if cn, _ := rs.clientCN.Load().(string); cn != "teapot-lb-health" {
		t.Errorf("the member saw client certificate %q", cn)
	}
}

func TestHTTPSCheckTimesOutOnASilentPort(t *testing.T) {
	// A port that accepts and never speaks TLS (a process that is up but
	// stuck) is down after the timeout, not held forever.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	r := NewRegistry(Options{})
	defer r.Close()
	hc := httpsCheck("")
	hc.InsecureSkipVerify, hc.Timeout = true, 200*time.Millisecond
	start := time.Now()
	tg := firstResult(t, r, netip.MustParseAddrPort(l.Addr().String()), hc)
	if tg.Healthy() {
		t.Fatalf("a port that never answers the handshake is up")
	}
	if s := tg.Status(); !strings.Contains(s.LastError, "TLS handshake") {
		t.Errorf("last error %q, want a TLS handshake failure", s.LastError)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("first check took %s with a 200ms timeout", d)
	}
}

func TestHTTPSCheckSharesParsedTLSPerSettings(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	r := NewRegistry(Options{})
	defer r.Close()
	hc := httpsCheck(ca.pem)
	hc.Interval = time.Hour // no check needed
	// Loopback addresses: a first check, if one runs, stays on this machine.
	a := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.2:6443"), hc)
	b := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.3:6443"), hc)
	other := *hc
	other.InsecureSkipVerify = true
	c := r.AcquireFor("acme", netip.MustParseAddrPort("127.0.0.4:6443"), &other)
	n := func() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.tlsConfs) }
	if a.active.tls == nil || a.active.tls != b.active.tls || c.active.tls == a.active.tls || n() != 2 {
		t.Fatalf("members of one check share %p/%p, another check %p; %d configurations, want 2", a.active.tls, b.active.tls, c.active.tls, n())
	}
	r.Release(a)
	r.Release(c)
	if n() != 1 {
		t.Errorf("%d configurations after releasing two of three targets, want 1", n())
	}
	r.Release(b)
	if n() != 0 {
		t.Errorf("%d configurations after releasing every target, want 0", n())
	}
}
