package health

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// An https check without a client key signs nothing, yet its key
// exchange and the member's certificate cost the host CPU: every check
// is charged to its tenant, an https one to its handshake budget as well,
// and a tenant whose budget is spent has its checks delayed, while a
// neighbour's checks are charged to the neighbour and never wait. Before,
// only client signatures were charged: four members checked every 50 ms
// with full handshakes cost their tenant nothing.
func TestEveryCheckIsChargedToItsTenant(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "cluster CA")
	opt := cpubudget.Options{Rate: 0.05, Burst: 5 * time.Millisecond}
	cpu := cpubudget.New(opt)
	r := NewRegistry(Options{CPU: cpu})
	defer r.Close()
	var full atomic.Int64
	var bs []*Target
	for range 4 {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		certPEM, keyPEM := ca.issue(t, "member", false, nil, []byte{127, 0, 0, 1})
		cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			t.Fatal(err)
		}
		// Tickets off: every check is a full handshake.
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: true,
			VerifyConnection: func(tls.ConnectionState) error { full.Add(1); return nil }}
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		hc := httpsCheck(ca.pem)
		hc.Path = "/"
		bs = append(bs, r.AcquireFor("b", netip.MustParseAddrPort(srv.Listener.Addr().String()), hc))
	}
	defer func() {
		for _, tg := range bs {
			r.Release(tg)
		}
	}()
	var aChecks atomic.Int64
	am := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { aChecks.Add(1) }))
	defer am.Close()
	at := r.AcquireFor("a", netip.MustParseAddrPort(am.Listener.Addr().String()),
		&snapshot.HealthCheck{HTTP: true, Path: "/", Interval: 50 * time.Millisecond, Timeout: 3 * time.Second, Rise: 1, Fall: 2})
	defer r.Release(at)

	b := cpu.Tenant("b")
	eventually(t, "b's checks charged and delayed", func() bool { return b.Stat().Spent > 0 && b.Stat().Delayed > 0 })
	full0, s0, t0 := full.Load(), b.Stat().Spent, time.Now()
	time.Sleep(2 * time.Second)
	el, spent, hs := time.Since(t0), b.Stat().Spent-s0, full.Load()-full0
	t.Logf("in %s: b made %d full handshakes for %s of CPU (%+v); a's member saw %d checks; a %+v", el, hs, spent, b.Stat(), aChecks.Load(), cpu.Tenant("a").HostStat())
	// One check may be in progress when the window opens and closes.
	if limit := time.Duration(opt.Rate*float64(el)) + opt.Burst + 2*100*time.Millisecond; spent > limit {
		t.Errorf("b's checks spent %s of CPU in %s, its budget allows %s", spent, el, limit)
	}
	if hs == 0 {
		t.Errorf("b made no handshake in %s: its checks were delayed for good", el)
	} else if spent/time.Duration(hs) < 20*time.Microsecond {
		t.Errorf("b was charged %s a full handshake, want the handshake's CPU (at least 20us)", spent/time.Duration(hs))
	}
	if d := b.HostStat().Direct; d < b.Stat().Spent {
		t.Errorf("b's host budget was charged %s directly, less than its handshakes' %s", d, b.Stat().Spent)
	}
	if sa := cpu.Tenant("a").Stat(); sa.Delayed != 0 || sa.Spent != 0 {
		t.Errorf("a's plain checks were delayed or charged as handshakes: %+v", sa)
	}
	if d := cpu.Tenant("a").HostStat().Direct; d == 0 {
		t.Errorf("a's plain checks were not charged to a's host budget")
	}
	if aChecks.Load() < 3 {
		t.Errorf("a's member saw %d checks at a 50 ms interval", aChecks.Load())
	}
	for _, tg := range bs {
		if !tg.Healthy() {
			t.Errorf("b's member %s down while its checks are delayed: %+v", tg.Name(), tg.Status())
		}
	}
}
