package l7

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tenantRoute is a connection of tenant's listener whose one route, named
// after the tenant, is route.
func tenantRoute(tenant string, route *Route) ConnInfo {
	router := oneRoute(nil)
	route.Name = tenant
	router[0].route = route
	return ConnInfo{Listener: tenant, LB: tenant + "/lb", Tenant: tenant, Router: func() Router { return router }}
}

// A tenant's retries are bounded by its requests in flight: 20 requests
// whose every attempt fails, all failing at once, get at most
// max(MinRetryConcurrency, 20% of 20) retrying requests; the others
// answer with their first failure, counted as RetriesDenied. Another
// tenant's retries meanwhile are not held back.
func TestRetryBudgetPerTenant(t *testing.T) {
	t.Parallel()
	const n = 20
	var arrived atomic.Int64
	all := make(chan struct{})
	failing := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := arrived.Add(1); k <= n {
			if k == n {
				close(all)
			}
			<-all // every first attempt fails at the same moment
		}
		w.WriteHeader(500)
	})))
	var uTries atomic.Int64
	flaky := newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uTries.Add(1) == 1 {
			w.WriteHeader(500)
			return
		}
		io.WriteString(w, "ok")
	})))
	pol := &Retry{Codes: []int{500}, Attempts: 5, Backoff: 50 * time.Millisecond}
	m := &recordingMetrics{}
	s := New(Config{Metrics: m})
	info := func(tenant string, be Backend) ConnInfo {
		return tenantRoute(tenant, &Route{Backend: be, Ext: &RouteExt{Retry: pol}})
	}
	tAddr := proxyUnderInfo(t, s, info("t", failing), nil)
	uAddr := proxyUnderInfo(t, s, info("u", flaky), nil)

	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get("http://" + tAddr + "/")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 500 {
				t.Errorf("status %d, want 500", resp.StatusCode)
			}
		}()
	}
	<-all
	resp, err := client.Get("http://" + uAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("tenant u while t's budget is spent: status %d, want 200 after a retry", resp.StatusCode)
	}
	wg.Wait()

	// Each request is reported after its response went out: wait for all.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		got := 0
		for _, st := range m.reqs {
			if st.Tenant == "t" {
				got++
			}
		}
		m.mu.Unlock()
		if got == n || time.Now().After(deadline) {
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var retrying, retries, denied int
	for _, st := range m.reqs {
		if st.Tenant != "t" {
			continue
		}
		if st.Retries > 0 {
			retrying++
		}
		retries += st.Retries
		denied += st.RetriesDenied
	}
	if limit := max(MinRetryConcurrency, n*RetryBudgetPercent/100); retrying < MinRetryConcurrency || retrying > limit {
		t.Errorf("%d requests retried, want %d to %d", retrying, MinRetryConcurrency, limit)
	}
	if retries != retrying*pol.Attempts || denied != n-retrying {
		t.Errorf("%d retries and %d denied for %d retrying requests, want %d and %d", retries, denied, retrying, retrying*pol.Attempts, n-retrying)
	}
	if got, want := arrived.Load(), int64(n+retries); got != want {
		t.Errorf("the member saw %d attempts, want %d", got, want)
	}
}

// The backoff doubles from Backoff, is capped at retryBackoffCap times
// it, and never waits less than the doubled value.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	p := &Retry{Backoff: 10 * time.Millisecond}
	for n, least := range []time.Duration{10, 20, 40, 80, 100, 100, 100} {
		least *= time.Millisecond
		for range 50 {
			if d := p.backoff(n); d < least || d >= 2*least {
				t.Fatalf("retry %d waits %v, want from %v to below %v", n, d, least, 2*least)
			}
		}
	}
}

// The bodies a tenant's requests keep for retries are bounded on each
// server (MaxTenantRetryBodies): with 72 requests of 64 KiB in flight at
// once on a route with retries, 64 bodies are kept and the other 8
// stream once, their failure the answer, counted as RetriesDenied.
// Another tenant's request of the same size meanwhile keeps its body and
// is retried. Every kept byte is given back when the requests end.
func TestRetryBodiesKeptPerTenant(t *testing.T) {
	t.Parallel()
	const n = MaxTenantRetryBodies/MaxRetryBody + 8
	body := bytes.Repeat([]byte("b"), MaxRetryBody)
	var mu sync.Mutex
	seen := map[string]bool{}
	var arrived atomic.Int64
	all := make(chan struct{})
	release := make(chan struct{})
	var short atomic.Int64
	member := func(hold bool) Backend {
		return newBackend(t, backendServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if got, _ := io.Copy(io.Discard, r.Body); got != MaxRetryBody {
				short.Add(1)
			}
			id := r.Header.Get("X-Id")
			mu.Lock()
			first := !seen[id]
			seen[id] = true
			mu.Unlock()
			if !first {
				io.WriteString(w, "ok")
				return
			}
			if hold {
				if arrived.Add(1) == n {
					close(all)
				}
				<-release // every first attempt fails at the same moment
			}
			w.WriteHeader(500)
		})))
	}
	pol := &Retry{Codes: []int{500}, Attempts: 1, Backoff: time.Millisecond}
	m := &recordingMetrics{}
	s := New(Config{Metrics: m})
	info := func(tenant string, be Backend) ConnInfo {
		return tenantRoute(tenant, &Route{Backend: be, Ext: &RouteExt{Retry: pol}})
	}
	tAddr := proxyUnderInfo(t, s, info("t", member(true)), nil)
	uAddr := proxyUnderInfo(t, s, info("u", member(false)), nil)

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n + 1}}
	post := func(addr, id string) (int, error) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/", bytes.NewReader(body))
		req.Header.Set("X-Id", id)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, err := post(tAddr, fmt.Sprint("t", i))
			switch {
			case err != nil:
				t.Error(err)
			case code == 200:
				ok.Add(1)
			case code == 500:
				failed.Add(1)
			default:
				t.Errorf("status %d, want 200 or 500", code)
			}
		})
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatalf("%d of %d first attempts reached the member", arrived.Load(), n)
	}
	// Every first attempt is held at the member: the bodies are kept.
	if got, want := s.retries.kept.held("t"), MaxTenantRetryBodies; got != want {
		t.Errorf("tenant t's requests keep %d bytes of bodies, want %d (its bound)", got, want)
	}
	// u's body is kept and retried while t is at its bound.
	if code, err := post(uAddr, "u"); err != nil || code != 200 {
		t.Errorf("tenant u: status %d (%v), want 200 after a retry", code, err)
	}
	close(release)
	wg.Wait()
	// A request gives its body back as its handler returns, which may
	// be after its client read the answer.
	for deadline := time.Now().Add(10 * time.Second); s.retries.kept.held("t") != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if k := s.retries.kept.held("t"); k != 0 {
		t.Errorf("tenant t keeps %d bytes of bodies after its requests ended", k)
	}
	if short.Load() != 0 {
		t.Errorf("%d attempts reached a member without the whole body", short.Load())
	}

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		got := len(m.reqs)
		m.mu.Unlock()
		if got == n+1 || time.Now().After(deadline) {
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var retried, denied int
	uRetried := false
	for _, st := range m.reqs {
		switch {
		case st.Tenant == "u":
			uRetried = st.Retries == 1
		case st.Retries > 0:
			retried++
		default:
			denied += st.RetriesDenied
		}
	}
	// Of the 64 requests that kept their bodies, those the retry
	// concurrency budget let through were retried; the other 8 could not
	// be, whatever that budget.
	if int(ok.Load()) != retried || retried < MinRetryConcurrency || retried > MaxTenantRetryBodies/MaxRetryBody {
		t.Errorf("%d requests answered 200 and %d retried, want as many, %d to %d", ok.Load(), retried, MinRetryConcurrency, MaxTenantRetryBodies/MaxRetryBody)
	}
	if int(failed.Load()) != n-retried || denied != n-retried {
		t.Errorf("%d requests answered 500 with %d retries denied, want %d of each", failed.Load(), denied, n-retried)
	}
	if !uRetried {
		t.Errorf("tenant u's request was not retried")
	}
}
