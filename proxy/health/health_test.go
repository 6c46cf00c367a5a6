package health

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a loaded 2-core CI machine
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fastCheck checks every 20 ms. Its timeout is generous: on a loaded
// 2-core machine a 20 ms check of a live member times out, and the tests
// using it take members down by refusing or answering, never by silence.
func fastCheck(http bool) *snapshot.HealthCheck {
	return &snapshot.HealthCheck{HTTP: http, Path: "/healthz", Interval: 20 * time.Millisecond, Timeout: 2 * time.Second, Rise: 2, Fall: 2}
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

func TestTCPCheckTakesMemberOutAndBack(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "[::1]"} {
		t.Run(host, func(t *testing.T) {
			l := listen(t, host+":0")
			addr := netip.MustParseAddrPort(l.Addr().String())
			r := NewRegistry(Options{})
			defer r.Close()
			tg := r.Acquire(addr, fastCheck(false))
			defer r.Release(tg)
			eventually(t, "first check", func() bool { tg.mu.Lock(); defer tg.mu.Unlock(); return tg.active.checked })
			if !tg.Healthy() {
				t.Fatalf("listening member is down: %+v", tg.Status())
			}
			l.Close()
			eventually(t, "member down", func() bool { return !tg.Healthy() })
			if s := tg.Status(); !s.Down || s.LastError == "" {
				t.Errorf("status %+v, want down with an error", s)
			}
			l = listen(t, addr.String())
			defer l.Close()
			eventually(t, "member up", func() bool { return tg.Healthy() })
		})
	}
}

func TestHTTPCheck(t *testing.T) {
	var status atomic.Int32
	var host atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host)
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	tests := []struct {
		name    string
		status  int
		expect  int
		healthy bool
	}{
		{"2xx is up", 204, 0, true},
		{"3xx is up", 302, 0, true},
		{"5xx is down", 503, 0, false},
		{"4xx is down", 404, 0, false},
		{"expected status is up", 418, 418, true},
		{"other than expected is down", 200, 418, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status.Store(int32(tt.status))
			r := NewRegistry(Options{})
			defer r.Close()
			hc := fastCheck(true)
			hc.ExpectStatus = tt.expect
			hc.Host = "shop.acme.example"
			tg := r.Acquire(addr, hc)
			eventually(t, "first check", func() bool { tg.mu.Lock(); defer tg.mu.Unlock(); return tg.active.checked })
			if tg.Healthy() != tt.healthy {
				t.Errorf("healthy = %v, want %v (%+v)", tg.Healthy(), tt.healthy, tg.Status())
			}
			if h, _ := host.Load().(string); h != "shop.acme.example" {
				t.Errorf("Host header %q", h)
			}
		})
	}
}

func TestHTTPCheckRiseAndFall(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	r := NewRegistry(Options{})
	defer r.Close()
	hc := fastCheck(true)
	hc.Rise, hc.Fall = 3, 3
	// A check that times out never reaches the handler and would count
	// towards fall without a hit: on a loaded machine 20ms is too short.
	hc.Timeout = 2 * time.Second
	tg := r.Acquire(netip.MustParseAddrPort(srv.Listener.Addr().String()), hc)
	eventually(t, "first check", func() bool { return hits.Load() >= 1 })
	status.Store(500)
	start := hits.Load()
	eventually(t, "member down", func() bool { return !tg.Healthy() })
	if n := hits.Load() - start; n < 3 {
		t.Errorf("went down after %d failed checks, want fall = 3", n)
	}
	status.Store(200)
	start = hits.Load()
	eventually(t, "member up", func() bool { return tg.Healthy() })
	if n := hits.Load() - start; n < 3 {
		t.Errorf("came up after %d good checks, want rise = 3", n)
	}
}

func TestPassiveEjection(t *testing.T) {
	r := NewRegistry(Options{EjectAfter: 3, EjectFor: 50 * time.Millisecond, MaxEjectFor: 200 * time.Millisecond})
	defer r.Close()
	tg := r.Acquire(netip.MustParseAddrPort("127.0.0.1:9"), nil)
	defer r.Release(tg)
	tg.ConnectFailed()
	tg.ConnectFailed()
	tg.ConnectSucceeded()
	tg.ConnectFailed()
	tg.ConnectFailed()
	if !tg.Healthy() {
		t.Fatal("ejected though a success broke the run of failures")
	}
	tg.ConnectFailed()
	if tg.Healthy() || !tg.Status().Ejected {
		t.Fatal("not ejected after three consecutive failures")
	}
	start := time.Now()
	eventually(t, "return from ejection", tg.Healthy)
	first := time.Since(start)
	for range 3 {
		tg.ConnectFailed()
	}
	start = time.Now()
	eventually(t, "return from the second ejection", tg.Healthy)
	if second := time.Since(start); second < 90*time.Millisecond {
		t.Errorf("second ejection lasted %v (first %v); it should double to 100ms", second, first)
	}
	if d := r.backoff(10); d != 200*time.Millisecond {
		t.Errorf("backoff is not capped: %v", d)
	}
}

func TestRegistrySharesAndReleases(t *testing.T) {
	r := NewRegistry(Options{})
	defer r.Close()
	a := netip.MustParseAddrPort("127.0.0.1:9")
	hc := fastCheck(false)
	hc.Interval = time.Hour
	t1 := r.Acquire(a, hc)
	t2 := r.Acquire(a, hc)
	other := r.Acquire(a, nil)
	if t1 != t2 {
		t.Error("same address and check got two targets")
	}
	if other == t1 {
		t.Error("a different check shared the target")
	}
	t1.Begin()
	r.Release(t1)
	if r.Len() != 2 || t2.InFlight() != 1 {
		t.Errorf("after one release: %d targets, in flight %d", r.Len(), t2.InFlight())
	}
	r.Release(t2)
	r.Release(other)
	if r.Len() != 0 {
		t.Errorf("%d targets left after releasing all", r.Len())
	}
	if t3 := r.Acquire(a, hc); t3 == t1 {
		t.Error("a released target came back")
	}
}

func TestParseStatusLine(t *testing.T) {
	tests := []struct {
		line string
		code int
		ok   bool
	}{
		{"HTTP/1.1 200 OK\r\n", 200, true},
		{"HTTP/1.0 503 Service Unavailable\r\n", 503, true},
		{"HTTP/1.1 204\r\n", 204, true},
		{"HTTP/1.1 302", 302, true},
		{"HTTP/2 200\r\n", 0, false},
		{"HTTP/1.1 20 OK\r\n", 0, false},
		{"HTTP/1.1 2000 OK\r\n", 0, false},
		{"HTTP/1.1 099 x\r\n", 0, false},
		{"SSH-2.0-OpenSSH\r\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			code, err := ParseStatusLine([]byte(tt.line))
			if (err == nil) != tt.ok || code != tt.code {
				t.Errorf("ParseStatusLine(%q) = %d, %v; want %d, ok %v", tt.line, code, err, tt.code, tt.ok)
			}
		})
	}
}

func FuzzParseStatusLine(f *testing.F) {
	for _, s := range []string{"HTTP/1.1 200 OK\r\n", "HTTP/1.0 404\n", "HTTP/1.1 99", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		code, err := ParseStatusLine(b)
		if err == nil && (code < 100 || code > 999) {
			t.Fatalf("accepted code %d", code)
		}
	})
}
