package health

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
)

// mtlsMember is an HTTPS member that requires a client certificate
// issued by (or being) clientCA (PEM) and counts full and resumed handshakes; tickets off, it
// makes every check sign.
type mtlsMember struct {
	addr          netip.AddrPort
	full, resumed atomic.Int64
	requests      atomic.Int64
}

func newMTLSMember(t *testing.T, ca *testCA, clientCA string, tickets bool) *mtlsMember {
	t.Helper()
	m := &mtlsMember{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requests.Add(1)
	}))
	certPEM, keyPEM := ca.issue(t, "member", false, nil, []byte{127, 0, 0, 1})
	cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode([]byte(clientCA))
	cc, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cc)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		SessionTicketsDisabled: !tickets,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.DidResume {
				m.resumed.Add(1)
			} else {
				m.full.Add(1)
			}
			return nil
		}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m.addr = netip.MustParseAddrPort(srv.Listener.Addr().String())
	return m
}

func rsa4096Client(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	c, err := os.ReadFile("testdata/client-rsa4096.crt")
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile("testdata/client-rsa4096.key")
	if err != nil {
		t.Fatal(err)
	}
	return string(c), string(k)
}

// A check of a member that allows resumption resumes the target's last
// session: it makes one client signature, not one per check.
func TestHTTPSChecksResumeAndSignOnce(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "cluster CA")
	cert, key := rsa4096Client(t)
	m := newMTLSMember(t, ca, cert, true)
	cpu := cpubudget.New(cpubudget.Options{})
	r := NewRegistry(Options{CPU: cpu})
	defer r.Close()
	hc := httpsCheck(ca.pem)
	hc.ClientCertPEM, hc.ClientKeyPEM = cert, key
	tg := r.AcquireFor("b", m.addr, hc)
	defer r.Release(tg)
	eventually(t, "20 checks", func() bool { return m.requests.Load() >= 20 })
	if !tg.Healthy() {
		t.Fatalf("member down: %+v", tg.Status())
	}
	st := cpu.Tenant("b").Stat()
	t.Logf("member saw %d full and %d resumed handshakes; b signed %d times", m.full.Load(), m.resumed.Load(), st.Signed)
	if m.full.Load() > 2 || st.Signed > 2 || st.Signed == 0 {
		t.Errorf("%d full handshakes and %d signatures for %d checks, want one or two", m.full.Load(), st.Signed, m.requests.Load())
	}
}

// A tenant whose checks sign more than its CPU budget allows (RSA-4096
// client keys, members that never resume) has its checks delayed, not
// failed, and its signatures held to the budget; another tenant's checks
// keep their interval.
func TestCostlyCheckSignaturesAreChargedToTheirTenant(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	ca := newTestCA(t, "cluster CA")
	cert, key := rsa4096Client(t)
	opt := cpubudget.Options{Rate: 0.1, Burst: 20 * time.Millisecond}
	cpu := cpubudget.New(opt)
	r := NewRegistry(Options{CPU: cpu})
	defer r.Close()
	hc := httpsCheck(ca.pem)
	hc.ClientCertPEM, hc.ClientKeyPEM = cert, key
	var bs []*Target
	for range 8 {
		m := newMTLSMember(t, ca, cert, false)
		bs = append(bs, r.AcquireFor("b", m.addr, hc))
	}
	defer func() {
		for _, tg := range bs {
			r.Release(tg)
		}
	}()
	aCert, aKey := ca.issue(t, "a", true, nil)
	am := newMTLSMember(t, ca, ca.pem, false) // a's client certificate is signed by ca
	ahc := httpsCheck(ca.pem)
	ahc.ClientCertPEM, ahc.ClientKeyPEM = aCert, aKey
	start := time.Now()
	at := r.AcquireFor("a", am.addr, ahc)
	defer r.Release(at)
	eventually(t, "b's checks delayed", func() bool { return cpu.Tenant("b").Stat().Delayed >= 8 })
	a0, s0, t0 := am.requests.Load(), cpu.Tenant("b").Stat().Spent, time.Now()
	time.Sleep(2 * time.Second) // a window of a's checks (interval 50 ms)
	el, spent, aChecks := time.Since(t0), cpu.Tenant("b").Stat().Spent-s0, am.requests.Load()-a0
	st := cpu.Tenant("b").Stat()
	t.Logf("in %s: a's member saw %d checks; b signed for %s of CPU (%+v) since %s", el, aChecks, spent, st, time.Since(start))
	// One signature may be in progress when the window opens and close.
	if limit := time.Duration(opt.Rate*float64(el)) + opt.Burst + 2*100*time.Millisecond; spent > limit {
		t.Errorf("b's checks signed for %s of CPU in %s, its budget allows %s", spent, el, limit)
	}
	if spent == 0 {
		t.Errorf("b's checks made no signature in %s: delayed for good", el)
	}
	for _, tg := range bs {
		if !tg.Healthy() {
			t.Errorf("b's member %s down while its checks are delayed: %+v", tg.Name(), tg.Status())
		}
	}
	if aChecks < 3 { // ~40 at its interval; far fewer under -race on a loaded machine
		t.Errorf("a's member saw %d checks in %s at a 50 ms interval", aChecks, el)
	}
	if sa := cpu.Tenant("a").Stat(); sa.Delayed != 0 {
		t.Errorf("a's checks delayed: %+v", sa)
	}
}

// TestCheckCPUWaitersBounded: a tenant whose signature CPU is spent has
// at most MaxChecksPerTenant of its checks waiting for it; the others
// wait in its ready queue without a goroutine. With each waiting check polling the
// budget, one tenant's 1,000 signing checks woke together whenever its
// debt was paid, and the host's run queue that other tenants and the
// admin API share grew by that many goroutines. Not parallel: it counts
// the process's goroutines waiting for any tenant's CPU.
func TestCheckCPUWaitersBounded(t *testing.T) {
	const perTenant = 2
	ca := newTestCA(t, "cluster CA")
	cert, key := rsa4096Client(t)
	cpu := cpubudget.New(cpubudget.Options{Rate: 0.01, Burst: time.Millisecond})
	r := NewRegistry(Options{CPU: cpu, MaxChecksPerTenant: perTenant})
	defer r.Close()
	hc := httpsCheck(ca.pem)
	hc.ClientCertPEM, hc.ClientKeyPEM = cert, key
	var bs []*Target
	for range 8 {
		m := newMTLSMember(t, ca, cert, false)
		bs = append(bs, r.AcquireFor("b", m.addr, hc))
	}
	defer func() {
		for _, tg := range bs {
			r.Release(tg)
		}
	}()
	eventually(t, "b's checks delayed", func() bool { return cpu.Tenant("b").Stat().Delayed >= perTenant })
	most := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		most = max(most, strings.Count(string(buf[:runtime.Stack(buf, true)]), "cpubudget.(*Tenant).waitTokens("))
	}
	if most > perTenant {
		t.Errorf("%d of b's checks waited for its CPU at once, want at most %d (MaxChecksPerTenant)", most, perTenant)
	}
	if most == 0 {
		t.Errorf("no check of b waited for its CPU: the budget was not spent")
	}
}
