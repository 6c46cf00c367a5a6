package certs

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
)

// handshakeLab serves tenant a's listener (an ECDSA P-256 certificate)
// and tenant b's (RSA 4096, the largest key an upload may have) from one
// manager, on real sockets.
type handshakeLab struct {
	m      *Manager
	ca     *testCA
	a, b   string // listener addresses
	budget *cpubudget.Budgets
}

func newHandshakeLab(t *testing.T, cpu *cpubudget.Budgets) *handshakeLab {
	t.Helper()
	ca := newTestCA(t)
	store := newMemStore()
	svc := NewService(store)
	ctx := ctxT(t)
	store.put(acmeTenant("a", 0, "a.example"))
	store.put(acmeTenant("b", 0, "b.example"))
	aCert, aKey := ca.issue(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "shop.a.example")
	bCert, bKey := fixture(t, "rsa4096")
	for _, u := range []struct {
		tenant    string
		cert, key []byte
	}{{"a", aCert, aKey}, {"b", bCert, bKey}} {
		if _, err := svc.Upload(ctx, &pb.UploadCertificateRequest{Tenant: u.tenant, Name: "shop", CertPem: u.cert, KeyPem: u.key}); err != nil {
			t.Fatalf("upload %s: %v", u.tenant, err)
		}
	}
	m, err := New(Config{Store: store, Host: "h", CA: "https://127.0.0.1:1/dir", Logger: testLogger(t), CPU: cpu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Update(store.objectsWith())
	m.reconcile(m.latest.Load())
	term := m.Terminator(greeter{})
	l := &handshakeLab{m: m, ca: ca, budget: m.cpu}
	for _, x := range []struct {
		tenant string
		addr   *string
	}{{"a", &l.a}, {"b", &l.b}} {
		*x.addr = porttest.Addr(t, "127.0.0.1")
		serveTLS(t, *x.addr, term, listener(x.tenant, false, []string{"shop"}))
	}
	return l
}

// handshake makes one full TLS 1.3 handshake with a's listener and
// returns how long it took.
func (l *handshakeLab) handshakeA() (time.Duration, error) {
	start := time.Now()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", l.a, &tls.Config{ServerName: "shop.a.example", RootCAs: l.ca.pool})
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	c.Close()
	return d, nil
}

// p99 of n handshakes with a's listener, one after another.
func (l *handshakeLab) p99A(t *testing.T, n int) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range n {
		d, err := l.handshakeA()
		if err != nil {
			t.Fatalf("a's handshake failed: %v", err)
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

// recordHello returns the ClientHello a Go client sends for serverName:
// the flood replays it, so that the attacker's clients cost this process
// nothing but a connection each, while the server does its key exchange
// and signs for every copy.
func recordHello(t *testing.T, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		_ = tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
		c.Close()
	}()
	buf := make([]byte, 16<<10)
	n, err := s.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// flood sends ClientHellos to b's listener from conns clients until stop
// is closed, except while paused: each waits for the server's first
// flight (for which the server signs with b's RSA-4096 key) or its
// refusal, and hangs up.
func (l *handshakeLab) flood(t *testing.T, conns int, paused *atomic.Bool, stop chan struct{}) (wait func() int64) {
	hello := recordHello(t, "shop.b.example")
	var wg sync.WaitGroup
	var sent atomic.Int64
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if paused.Load() {
					time.Sleep(time.Millisecond)
					continue
				}
				c, err := net.DialTimeout("tcp", l.b, 10*time.Second)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(hello); err == nil {
					sent.Add(1)
					_, _ = c.Read(buf) // the server's flight or its alert
				}
				c.Close()
			}
		}()
	}
	return func() int64 { wg.Wait(); return sent.Load() }
}

// floodCheck floods b's listener and measures a's handshakes, quiet and
// during the flood, in up to three rounds (this machine is shared: a
// round may be disturbed from outside). It reports whether a round kept
// a's p99 within max(4x quiet, quiet + 250 ms), and b's account. Under a
// load average of 17 on 2 cores a's p99 was 6-35 ms quiet and 78 ms
// during the flood (150-220 ms under -race); with the budget lifted,
// 430-990 ms, b's signatures taking all the CPU the process got.
func floodCheck(t *testing.T, l *handshakeLab) (bool, cpubudget.Stat) {
	var paused atomic.Bool
	paused.Store(true)
	stop := make(chan struct{})
	wait := l.flood(t, 16, &paused, stop)
	defer func() {
		close(stop)
		t.Logf("b's clients sent %d ClientHellos", wait())
	}()
	l.p99A(t, 20) // warm up
	within := false
	for round := 1; round <= 3 && !within; round++ {
		paused.Store(true)
		waitUntil(t, 30*time.Second, "b's flood paused", func() bool { return l.budget.Tenant("b").Stat().InFlight == 0 })
		quiet := l.p99A(t, 100)
		refused := l.budget.Tenant("b").Stat().Refused
		paused.Store(false)
		// The flood spent b's burst once b has refusals.
		// The flood is on once b's hellos go on past its burst.
		signed := l.budget.Tenant("b").Stat().Hellos
		waitUntil(t, 30*time.Second, "b's flood in effect", func() bool {
			st := l.budget.Tenant("b").Stat()
			return st.Refused > refused || st.Hellos > signed+50
		})
		start, spent0 := time.Now(), l.budget.Tenant("b").Stat().Spent
		abused := l.p99A(t, 100)
		el, spent := time.Since(start), l.budget.Tenant("b").Stat().Spent-spent0
		bound := max(4*quiet, quiet+250*time.Millisecond)
		within = abused <= bound
		t.Logf("round %d: a's handshake p99 quiet %s, during b's flood %s (bound %s); b's signatures took %s of CPU in %s",
			round, quiet, abused, bound, spent, el)
		opt := l.budget.Options()
		if limit := time.Duration(opt.Rate*float64(el)) + opt.Burst + 100*time.Millisecond; spent > limit {
			t.Errorf("b spent %s of CPU on signatures in %s, its budget allows %s", spent, el, limit)
		}
	}
	// A round may end before b's burst is spent (on a fast machine b's
	// first 100+ signatures fit in it): the flood goes on until b is
	// refused, which its budget must do within seconds.
	waitUntil(t, 30*time.Second, "b's handshakes refused once its budget is spent", func() bool {
		return l.budget.Tenant("b").Stat().Refused > 0
	})
	return within, l.budget.Tenant("b").Stat()
}

// A flood of ClientHellos to tenant b's listener, whose certificate has
// the costliest key an upload may have (RSA 4096), is charged to b: b's
// signatures in progress stay within its bound, its handshakes wait and
// are then refused, and tenant a's handshakes all complete with a p99 of
// at most max(4x quiet, quiet + 250 ms).
func TestHandshakeFloodIsChargedToItsTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	l := newHandshakeLab(t, nil) // the default budgets
	within, st := floodCheck(t, l)
	t.Logf("b's account: %+v", st)
	if !within {
		t.Error("a's p99 exceeded its bound in every round")
	}
	if c := l.budget.Options().Concurrency; st.Peak > c || st.Refused == 0 {
		t.Errorf("b had %d signatures in progress at once (bound %d) and %d refused", st.Peak, c, st.Refused)
	}
	if st := l.budget.Tenant("a").Stat(); st.Refused != 0 {
		t.Errorf("a's handshakes refused: %+v", st)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l.m.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "teapot_lb_tls_handshakes_refused_total" {
			for _, m := range mf.GetMetric() {
				refused[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if refused["b"] == 0 || refused["a"] != 0 {
		t.Errorf("teapot_lb_tls_handshakes_refused_total by tenant: %v", refused)
	}
}

// A resumed session signs nothing: once a client has a ticket, its
// handshakes are charged their ClientHello's key exchange only.
func TestResumedHandshakesAreNotCharged(t *testing.T) {
	t.Parallel()
	l := newHandshakeLab(t, nil)
	cache := tls.NewLRUClientSessionCache(4)
	dial := func() bool {
		c, err := tls.Dial("tcp", l.a, &tls.Config{ServerName: "shop.a.example", RootCAs: l.ca.pool, ClientSessionCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.ReadAll(c) // the greeting and the ticket
		return c.ConnectionState().DidResume
	}
	if dial() {
		t.Fatal("the first handshake resumed")
	}
	signed := l.budget.Tenant("a").Stat().Signed
	for i := range 10 {
		if !dial() {
			t.Fatalf("handshake %d did not resume", i+2)
		}
	}
	if st := l.budget.Tenant("a").Stat(); st.Signed != signed || signed != 1 || st.Hellos != 11 {
		t.Fatalf("%d signatures and %d hellos after 1 full and 10 resumed handshakes, want 1 and 11", st.Signed, st.Hellos)
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("not within %s: %s", d, what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
