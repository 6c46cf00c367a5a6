package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
)

// A tenant's https checks compute on at most as many processors at once
// as its host budget has cores: eight checks of a tenant at one core,
// each computing 150 ms in its handshake, never compute two at once, and
// those of a tenant at two cores never three, however many are queued;
// each tenant's slots are its own. The time a check waits for a slot
// moves its deadline: the last of eight waits over a second, past its
// 1 s timeout, and still passes. Before, a tenant's checks computed
// on every processor at once (a peak of 8 here): within its budget, a
// tenant's thousand TLS checks a second held every processor at times,
// and a neighbour's requests waited behind them tens of milliseconds.
func TestTenantsChecksComputeOnItsSlotsOnly(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "cluster CA")
	certPEM, keyPEM := ca.issue(t, "member", false, nil, []byte{127, 0, 0, 1})
	cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(ca.pem))

	cpu := cpubudget.New(cpubudget.Options{HostMillicores: 1000})
	cpu.Tenant("wide").SetMillicores(2000)
	hc := httpsCheck(ca.pem)
	hc.Timeout = time.Second
	const checks = 8
	for _, tc := range []struct {
		tenant string
		slots  int
	}{{"narrow", 1}, {"wide", 2}} {
		tenant := cpu.Tenant(tc.tenant)
		if got := tenant.ComputeSlots(); got != tc.slots {
			t.Fatalf("%s: %d slots, want %d", tc.tenant, got, tc.slots)
		}
		var in, peak atomic.Int32
		conf := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
			// Runs in the check's handshake, as its verification does.
			VerifyConnection: func(tls.ConnectionState) error {
				n := in.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(150 * time.Millisecond)
				in.Add(-1)
				return nil
			}}
		var wg sync.WaitGroup
		errs := make([]error, checks)
		for i := range checks {
			wg.Go(func() {
				errs[i] = checkOnce(context.Background(), nil, addr, hc, &tlsEntry{conf: conf}, nil, tenant)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: check %d: %v", tc.tenant, i, err)
			}
		}
		st := tenant.ComputeStat()
		t.Logf("%s: %d checks, at most %d computing at once; %d waited for a slot, %s in all", tc.tenant, checks, peak.Load(), st.Waits, st.Waited.Round(time.Millisecond))
		if p := int(peak.Load()); p != tc.slots {
			t.Errorf("%s: at most %d checks computed at once, want %d (its slots)", tc.tenant, p, tc.slots)
		}
		if st.Running != 0 || st.Waiting != 0 {
			t.Errorf("%s: %d slots still held and %d asks waiting after every check ended", tc.tenant, st.Running, st.Waiting)
		}
	}
}
