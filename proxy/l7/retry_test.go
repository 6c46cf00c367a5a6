package l7

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
		router := oneRoute(nil)
		router[0].route = &Route{Name: tenant, Backend: be, Ext: &RouteExt{Retry: pol}}
		return ConnInfo{Listener: tenant, LB: tenant + "/lb", Tenant: tenant, Router: func() Router { return router }}
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
