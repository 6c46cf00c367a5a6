package l7

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The bodies a server reads for one tenant's inspected routes are bounded
// (MaxTenantInspectBodies): of 36 requests of 1 MiB held at once in
// Inspect (a member that is slow to take their bodies holds them as
// long), those whose buffers fit are inspected and the others answered 503
// (inspect-limit). The buffer grows with the bytes that came: a client
// that announces 1 MiB and sends 100 bytes holds one chunk. Another
// tenant's inspected request meanwhile goes through, and every byte is
// given back when the requests end.
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
	release := make(chan struct{})
	inspect := func(hold bool) func(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
		return func(_ *http.Request, body []byte, _, _ netip.AddrPort) (http.Handler, int, string) {
			if len(body) != size {
				t.Errorf("Inspect got %d bytes of the body, want %d", len(body), size)
			}
			if hold {
				arrived.Add(1)
				<-release
			}
			return nil, 0, ""
		}
	}
	m := &recordingMetrics{}
	s := New(Config{Metrics: m})
	tAddr := proxyUnderInfo(t, s, tenantRoute("t", &Route{Backend: member, InspectBody: size, Inspect: inspect(true)}), nil)
	uAddr := proxyUnderInfo(t, s, tenantRoute("u", &Route{Backend: member, InspectBody: size, Inspect: inspect(false)}), nil)
	vAddr := proxyUnderInfo(t, s, tenantRoute("v", &Route{Backend: member, InspectBody: size, Inspect: inspect(false)}), nil)

	// A client that announces a body of 1 MiB and sends 100 bytes.
	slow, err := net.Dial("tcp", vAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST / HTTP/1.1\r\nHost: v\r\nContent-Length: %d\r\n\r\n%s", size, bytes.Repeat([]byte("s"), 100))
	for deadline := time.Now().Add(10 * time.Second); s.inspected.held("v") == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // it would grow now if it were to
	if h := s.inspected.held("v"); h != inspectChunk {
		t.Errorf("a client that sent 100 bytes of a body of %d holds %d bytes of its tenant's bound, want %d", size, h, inspectChunk)
	}
	slow.Close()

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
	refused := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		k := 0
		for _, st := range m.reqs {
			if st.Tenant == "t" && st.Outcome == OutcomeInspectLimit && st.Status == 503 {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(30 * time.Second); int(arrived.Load())+refused() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d of %d requests inspected and %d refused", arrived.Load(), n, refused())
		}
	}
	// Buffers grow as bytes come, so requests that all grew at once may
	// have left a few more than the 4 over the bound without room.
	inspected, k := int(arrived.Load()), refused()
	if held := s.inspected.held("t"); held != inspected*size || held > MaxTenantInspectBodies || inspected < fit-8 || k < n-fit {
		t.Errorf("%d requests inspected, holding %d bytes, and %d refused; want at most %d bytes (the bound), %d each, and at least %d inspected and %d refused",
			inspected, held, k, MaxTenantInspectBodies, size, fit-8, n-fit)
	}
	if code, err := post(uAddr); err != nil || code != 200 {
		t.Errorf("tenant u while t is at its bound: status %d (%v), want 200", code, err)
	}
	close(release)
	wg.Wait()
	if codes["200"] != inspected || codes["503"]+codes["error"] != k {
		t.Errorf("tenant t's answers %v, want %d of 200 and %d of 503 (or a failed send)", codes, inspected, k)
	}
	if got.Load() != int64(inspected)+1 {
		t.Errorf("the member got %d whole bodies, want %d", got.Load(), inspected+1)
	}
	// A request gives its bytes back as its handler returns, which may
	// be after its client read the answer.
	held := func() int { return s.inspected.held("t") + s.inspected.held("u") + s.inspected.held("v") }
	for deadline := time.Now().Add(10 * time.Second); held() != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if h := held(); h != 0 {
		t.Errorf("the server holds %d bytes of bodies after the requests ended", h)
	}
}

// An upgrade request on an inspected route that spreads over weighted
// backends is inspected as any other request: the fast path, which relays
// upgrades on such routes, would skip the inspection.
func TestUpgradeOnWeightedRouteIsInspected(t *testing.T) {
	t.Parallel()
	member := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "member")
	})))
	var inspected atomic.Int64
	deny := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(403) })
	route := &Route{InspectBody: 16, Ext: &RouteExt{Backends: []WeightedBackend{{Backend: member, Weight: 1}, {Backend: member, Weight: 1}}},
		Inspect: func(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
			inspected.Add(1)
			return deny, 403, "denied"
		}}
	addr := proxyUnderInfo(t, New(Config{}), tenantRoute("t", route), nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	line := make([]byte, 12)
	if _, err := io.ReadFull(c, line); err != nil {
		t.Fatal(err)
	}
	if string(line) != "HTTP/1.1 403" || inspected.Load() != 1 {
		t.Errorf("an upgrade on an inspected route answered %q after %d inspections, want 403 after 1", line, inspected.Load())
	}
}
