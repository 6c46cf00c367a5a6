package l7

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Rows of the cross-protocol table for retries and backend request
// header changes.
func init() { coreRows = append(coreRows, retryRows...) }

// scriptedMember answers its n-th request (from 0) as script[n] says,
// the last entry for all later ones: a status ("500"), "close" (the
// connection closes before a response), "slow" (answers 200 after 2 s)
// or "ok". It records each request as "method body x-set".
type scriptedMember struct {
	mu     sync.Mutex
	script []string
	seen   []string
}

func (m *scriptedMember) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	n := len(m.seen)
	m.seen = append(m.seen, strings.Join(strings.Fields(r.Method+" "+string(body)+" "+r.Header.Get("X-Set")), " "))
	act := m.script[min(n, len(m.script)-1)]
	m.mu.Unlock()
	switch act {
	case "close":
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
		return
	case "slow":
		time.Sleep(2 * time.Second)
	case "ok":
	default:
		code, _ := strconv.Atoi(act)
		w.WriteHeader(code)
		fmt.Fprintf(w, "attempt %d", n+1)
		return
	}
	fmt.Fprintf(w, "ok after %d", n+1)
}

// attempts reports the requests the member saw, one per attempt.
func (m *scriptedMember) attempts() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.seen, " | ")
}

// retryRoute returns a row's route builder: a route to one scripted
// member with ext (its Backends left out).
func retryRoute(ext RouteExt, script ...string) func(t *testing.T) (*Route, func() string) {
	return func(t *testing.T) (*Route, func() string) {
		m := &scriptedMember{script: script}
		be := newBackend(t, backendServer(t, m))
		e := ext
		return &Route{Name: "retry", Backend: be, Ext: &e}, m.attempts
	}
}

var retry500x3 = &Retry{Codes: []int{500}, Attempts: 3, Backoff: time.Millisecond}

var retryRows = []coreRow{
	{name: "retry/succeeds after two 500s", route: retryRoute(RouteExt{Retry: retry500x3}, "500", "500", "ok"),
		wantBody: "ok after 3", wantSeen: "GET | GET | GET"},
	{name: "retry/attempts spent: the last 500 is the answer", route: retryRoute(RouteExt{Retry: retry500x3}, "500"),
		status: 500, wantBody: "attempt 4", wantSeen: "GET | GET | GET | GET"},
	{name: "retry/a code not listed is not retried", route: retryRoute(RouteExt{Retry: retry500x3}, "503", "ok"),
		status: 503, wantSeen: "GET"},
	{name: "retry/body sent again", route: retryRoute(RouteExt{Retry: retry500x3}, "500", "ok"),
		method: "POST", path: "/p", body: "payload", wantBody: "ok after 2", wantSeen: "POST payload | POST payload"},
	{name: "retry/a body of unknown length is not retried", route: retryRoute(RouteExt{Retry: retry500x3}, "500", "ok"),
		method: "POST", body: "payload", unknownLength: true, status: 500, wantSeen: "POST payload"},
	{name: "retry/a body over MaxRetryBody is not retried", route: retryRoute(RouteExt{Retry: retry500x3}, "500", "ok"),
		method: "POST", body: strings.Repeat("x", MaxRetryBody+1), status: 500, wantSeen: "POST " + strings.Repeat("x", MaxRetryBody+1)},
	{name: "retry/connection error", route: retryRoute(RouteExt{Retry: &Retry{Attempts: 1, Backoff: time.Millisecond}}, "close", "ok"),
		wantBody: "ok after 2", wantSeen: "GET | GET"},
	{name: "retry/connection error without retry: 502", route: retryRoute(RouteExt{BackendTimeout: time.Minute}, "close", "ok"),
		status: 502, wantSeen: "GET"},
	{name: "retry/backend timeout", route: retryRoute(RouteExt{BackendTimeout: 300 * time.Millisecond,
		Retry: &Retry{Attempts: 2, Backoff: time.Millisecond}}, "slow", "ok"), wantBody: "ok after 2", wantSeen: "GET | GET"},
	{name: "retry/backoff past the request timeout: no retry", route: retryRoute(RouteExt{RequestTimeout: 2 * time.Second,
		Retry: &Retry{Codes: []int{500}, Attempts: 3, Backoff: 5 * time.Second}}, "500", "ok"), status: 500, wantSeen: "GET"},
	{name: "retry/to an h2c member", route: func(t *testing.T) (*Route, func() string) {
		m := &scriptedMember{script: []string{"503", "ok"}}
		be := newBackend(t, h2cServer(t, m))
		be.opts.Protocol = H2C
		return &Route{Name: "retry-h2c", Backend: be, Ext: &RouteExt{Retry: &Retry{Codes: []int{503}, Attempts: 1, Backoff: time.Millisecond}}}, m.attempts
	}, method: "PUT", body: "data", wantBody: "ok after 2", wantSeen: "PUT data | PUT data"},
	{name: "backend headers/after the route's", route: func(t *testing.T) (*Route, func() string) {
		m := &scriptedMember{script: []string{"ok"}}
		be := newBackend(t, backendServer(t, m))
		return &Route{Name: "be-headers", Ext: &RouteExt{
			RequestHeaders: &HeaderEdit{Set: []HeaderField{{"X-Set", "route"}}},
			Backends: []WeightedBackend{{Backend: be, Weight: 1,
				RequestHeaders: &HeaderEdit{Set: []HeaderField{{"X-Set", "backend"}}}}},
		}}, m.attempts
	}, header: http.Header{"X-Set": {"client"}}, wantSeen: "GET backend"},
	{name: "backend headers/per backend", route: func(t *testing.T) (*Route, func() string) {
		a, b := &scriptedMember{script: []string{"ok"}}, &scriptedMember{script: []string{"ok"}}
		return &Route{Name: "be-headers", Ext: &RouteExt{Backends: []WeightedBackend{
			{Backend: newBackend(t, backendServer(t, a)), Weight: 0, RequestHeaders: &HeaderEdit{Set: []HeaderField{{"X-Set", "a"}}}},
			{Backend: newBackend(t, backendServer(t, b)), Weight: 1, RequestHeaders: &HeaderEdit{Add: []HeaderField{{"X-Set", "b"}}}},
		}}}, func() string { return "a: " + a.attempts() + "; b: " + b.attempts() }
	}, header: http.Header{"X-Set": {"client"}}, wantSeen: "a: ; b: GET client,b"},
}
