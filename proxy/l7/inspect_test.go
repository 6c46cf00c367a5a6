package l7

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The bodies a server reads for one tenant's inspected routes are bounded
// (MaxTenantInspectBodies): 36 requests of 1 MiB held at once in Inspect
// (as a WAF waits for its tenant's CPU budget) get 32 inspected and 4
// answered 503 before their bodies are read. Another tenant's inspected
// request meanwhile goes through, and every byte is given back when the
// requests end.
func TestInspectedBodiesPerTenant(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	const fit = MaxTenantInspectBodies / size
	const n = fit + 4
	var got atomic.Int64
	member := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k, _ := io.Copy(io.Discard, r.Body); k == size {
			got.Add(1)
		}
		io.WriteString(w, "ok")
	})))
	var arrived atomic.Int64
	all := make(chan struct{})
	release := make(chan struct{})
	inspect := func(hold bool) func(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
		return func(_ *http.Request, body []byte, _, _ netip.AddrPort) (http.Handler, int, string) {
			if len(body) != size {
				t.Errorf("Inspect got %d bytes of the body, want %d", len(body), size)
			}
			if hold {
				if arrived.Add(1) == fit {
					close(all)
				}
				<-release
			}
			return nil, 0, ""
		}
	}
	m := &recordingMetrics{}
	s := New(Config{Metrics: m})
	info := func(tenant string, hold bool) ConnInfo {
		return tenantRoute(tenant, &Route{Backend: member, InspectBody: size, Inspect: inspect(hold)})
	}
	tAddr := proxyUnderInfo(t, s, info("t", true), nil)
	uAddr := proxyUnderInfo(t, s, info("u", false), nil)

	body := bytes.Repeat([]byte("b"), size)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n + 1}}
	post := func(addr string) (int, error) {
		resp, err := client.Post("http://"+addr+"/", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			code, err := post(tAddr)
			what := fmt.Sprint(code)
			if err != nil {
				// A refusal answers before the body is read; the
				// client may fail to send the rest of it first.
				what = "error"
			}
			mu.Lock()
			codes[what]++
			mu.Unlock()
		})
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d of %d requests reached Inspect", arrived.Load(), n)
	}
	refused := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		k := 0
		for _, st := range m.reqs {
			if st.Tenant == "t" && st.Outcome == OutcomeTenantLimit && st.Status == 503 {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(20 * time.Second); refused() < n-fit && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if held := s.inspected.held("t"); held != MaxTenantInspectBodies {
		t.Errorf("the server holds %d bytes of tenant t's bodies, want %d (its bound)", held, MaxTenantInspectBodies)
	}
	if code, err := post(uAddr); err != nil || code != 200 {
		t.Errorf("tenant u while t is at its bound: status %d (%v), want 200", code, err)
	}
	close(release)
	wg.Wait()
	if k := refused(); k != n-fit {
		t.Errorf("%d of tenant t's requests refused for its bound, want %d", k, n-fit)
	}
	if codes["200"] != fit || codes["503"]+codes["error"] != n-fit {
		t.Errorf("tenant t's answers %v, want %d of 200 and %d of 503 (or a failed send)", codes, fit, n-fit)
	}
	if got.Load() != fit+1 {
		t.Errorf("the member got %d whole bodies, want %d", got.Load(), fit+1)
	}
	// A request gives its bytes back as its handler returns, which may
	// be after its client read the answer.
	held := func() int { return s.inspected.held("t") + s.inspected.held("u") }
	for deadline := time.Now().Add(10 * time.Second); held() != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if h := held(); h != 0 {
		t.Errorf("the server holds %d bytes of bodies after the requests ended", h)
	}
}
