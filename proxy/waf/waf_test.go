package waf

import (
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	client = netip.MustParseAddrPort("192.0.2.1:40000")
	server = netip.MustParseAddrPort("198.51.100.1:80")
)

func TestCRSBlocksAttacksAndPassesOrdinaryTraffic(t *testing.T) {
	start := time.Now()
	e, err := Get(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v", time.Since(start))
	attacks := []struct{ method, target, body string }{
		{"GET", "/search?q=1%27%20OR%20%271%27%3D%271", ""},
		{"GET", "/?x=%3Cscript%3Ealert(1)%3C%2Fscript%3E", ""},
		{"GET", "/files?name=..%2F..%2F..%2Fetc%2Fpasswd", ""},
		{"GET", "/run?cmd=%3Bcat%20%2Fetc%2Fpasswd", ""},
		{"POST", "/login", "user=admin&pass=%27%20OR%201%3D1--"},
	}
	for _, a := range attacks {
		r := httptest.NewRequest(a.method, a.target, strings.NewReader(a.body))
		r.Header.Set("User-Agent", "Mozilla/5.0")
		r.Header.Set("Accept", "text/html")
		if a.body != "" {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		start := time.Now()
		v := e.Inspect(r, []byte(a.body), client, server)
		t.Logf("%s %s: %+v in %v", a.method, a.target, v, time.Since(start))
		if !v.Rejected || v.Status != 403 {
			t.Errorf("%s %s passed", a.method, a.target)
		}
	}
	for _, target := range []string{"/", "/shop/items?id=42&sort=price", "/api/v1/users/7"} {
		r := httptest.NewRequest("GET", target, nil)
		r.Header.Set("User-Agent", "Mozilla/5.0")
		r.Header.Set("Accept", "text/html")
		if v := e.Inspect(r, nil, client, server); v.Rejected || len(v.Rules) > 0 {
			t.Errorf("%s: %+v", target, v)
		}
	}
}

// TestEngineMemory logs what one engine holds (the figure in DESIGN.md).
func TestEngineMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := Get(4)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("paranoia 4 engine: %.1f MiB of heap", float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))
	runtime.KeepAlive(e)
}
