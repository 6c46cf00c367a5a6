package l7

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Rows of the cross-protocol table for the route features that are not
// retries: the fast paths, conditions, header edits both ways, rewrites,
// redirects, mirrors, timeouts, CORS, gates (rate limits), local answers,
// inspection, 404 and the member failures.
func init() { coreRows = append(coreRows, featureRows...) }

// recorder is a member that records each request it gets as one line:
// method, target, Host, body length and every field but User-Agent (the
// client's), with X-Request-Id reduced to whether it is 32 hex digits.
// It answers 200 "hello" with X-Member, unless the query has
// status=N (then N, no body for 204 and 304) or the path starts with
// /slow (2 s late).
type recorder struct {
	mu   sync.Mutex
	seen []string
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (m *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var fields []string
	for k, vv := range r.Header {
		switch k {
		case "User-Agent":
			continue
		case "X-Request-Id":
			vv = []string{fmt.Sprint(len(vv) == 1 && hex32.MatchString(vv[0]))}
		}
		fields = append(fields, k+"="+strings.Join(vv, ";"))
	}
	slices.Sort(fields)
	line := fmt.Sprintf("%s %s host=%s len=%d body=%q %s", r.Method, r.RequestURI, r.Host, len(body), body, strings.Join(fields, " "))
	m.mu.Lock()
	m.seen = append(m.seen, line)
	m.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/slow") {
		time.Sleep(2 * time.Second)
	}
	w.Header().Set("X-Member", "m")
	w.Header().Add("X-Multi", "one")
	w.Header().Add("X-Multi", "two")
	switch st := r.URL.Query().Get("status"); st {
	case "":
	case "204", "304":
		w.WriteHeader(map[string]int{"204": 204, "304": 304}[st])
		return
	default:
		var code int
		fmt.Sscan(st, &code)
		w.WriteHeader(code)
	}
	io.WriteString(w, "hello")
}

func (m *recorder) lines() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.seen, " | ")
}

// awaitLines is lines once the member saw n requests, or after 10 s
// (mirrors arrive after the response).
func (m *recorder) awaitLines(n int) string {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		got := len(m.seen)
		m.mu.Unlock()
		if got >= n {
			break
		}
	}
	return m.lines()
}

// recorded returns a row's route builder: a route to one recorder made
// by mk from its backend.
func recorded(mk func(be *testBackend) *Route) func(t *testing.T) (*Route, func() string) {
	return func(t *testing.T) (*Route, func() string) {
		m := &recorder{}
		return mk(newBackend(t, backendServer(t, m))), m.lines
	}
}

// plain is a route to the backend and nothing else (the fast paths).
func plain(be *testBackend) *Route { return &Route{Name: "plain", Backend: be} }

// ext is a route to the backend with e.
func ext(e RouteExt) func(be *testBackend) *Route {
	return func(be *testBackend) *Route { return &Route{Name: "ext", Backend: be, Ext: &e} }
}

// selectBy is a route chosen by cond (Route.Select): the fast paths'
// conditions.
func selectBy(cond func(r Request) bool) func(be *testBackend) *Route {
	return func(be *testBackend) *Route {
		inner := &Route{Name: "cond", Backend: be}
		return &Route{Name: "cond", Select: func(r Request, _, _ string) *Route {
			if cond(r) {
				return inner
			}
			return nil
		}}
	}
}

// seenLine is the line a recorder writes for a request from Go's
// clients (Accept-Encoding: gzip but on HEAD) on 127.0.0.1 to
// app.example, forwarded with the fields every member gets ("$" stands
// for the scheme, which the harness replaces), with extra fields
// ("Name=value").
func seenLine(method, target, host, body string, extra ...string) string {
	fields := append([]string{"Forwarded=for=127.0.0.1;host=app.example;proto=$", "X-Forwarded-For=127.0.0.1",
		"X-Forwarded-Host=app.example", "X-Forwarded-Proto=$", "X-Request-Id=true"}, extra...)
	if method != "HEAD" {
		fields = append(fields, "Accept-Encoding=gzip")
	}
	slices.Sort(fields)
	return fmt.Sprintf("%s %s host=%s len=%d body=%q %s", method, target, host, len(body), body, strings.Join(fields, " "))
}

var featureRows = []coreRow{
	{name: "fast/GET with a query and fields", route: recorded(plain), path: "/a/b?q=1&r=%20x",
		header:     http.Header{"X-Custom": {"v"}, "X-Multi": {"a", "b"}},
		wantBody:   "hello",
		wantHeader: http.Header{"X-Member": {"m"}, "X-Multi": {"one", "two"}},
		wantSeen:   seenLine("GET", "/a/b?q=1&r=%20x", "app.example", "", "X-Custom=v", "X-Multi=a;b"),
		wantStats:  "route=plain status=200 outcome=0 GET app.example /a/b?q=1&r=%20x req=0 resp=5 retries=0 member=true"},
	{name: "fast/path normalised", route: recorded(plain), path: "/a/%7euser/./x/../y%2f",
		wantSeen: seenLine("GET", "/a/~user/y%2F", "app.example", "")},
	{name: "fast/POST with a length", route: recorded(plain), method: "POST", path: "/p", body: "payload",
		wantSeen:  seenLine("POST", "/p", "app.example", "payload", "Content-Length=7"),
		wantStats: "route=plain status=200 outcome=0 POST app.example /p req=7 resp=5"},
	{name: "fast/POST of unknown length", route: recorded(plain), method: "POST", path: "/p", body: "payload", unknownLength: true,
		wantSeen: seenLine("POST", "/p", "app.example", "payload")},
	{name: "fast/HEAD", route: recorded(plain), method: "HEAD", path: "/h",
		wantHeader: http.Header{"X-Member": {"m"}},
		wantSeen:   seenLine("HEAD", "/h", "app.example", "")},
	{name: "fast/204 from the member", route: recorded(plain), path: "/?status=204", status: 204,
		wantSeen: seenLine("GET", "/?status=204", "app.example", "")},
	{name: "fast/404 from the member is relayed", route: recorded(plain), path: "/?status=404", status: 404, wantBody: "hello",
		wantHeader: http.Header{"X-Member": {"m"}},
		wantSeen:   seenLine("GET", "/?status=404", "app.example", "")},
	{name: "no route: 404", route: func(t *testing.T) (*Route, func() string) { return nil, nil },
		status: 404, wantStats: "route= status=404 outcome=2 GET app.example / req=0 resp="},

	{name: "select/method", route: recorded(selectBy(func(r Request) bool { return r.Method() == "DELETE" })),
		method: "DELETE", path: "/d", wantSeen: seenLine("DELETE", "/d", "app.example", "")},
	{name: "select/method: other methods 404", route: recorded(selectBy(func(r Request) bool { return r.Method() == "DELETE" })),
		status: 404, wantSeen: ""},
	{name: "select/header", route: recorded(selectBy(func(r Request) bool { v, _ := r.Header("X-Version"); return v == "2, 3" })),
		header: http.Header{"X-Version": {"2", "3"}}, wantSeen: seenLine("GET", "/", "app.example", "", "X-Version=2;3")},
	{name: "select/query", route: recorded(selectBy(func(r Request) bool { return r.RawQuery() == "v=2" })),
		path: "/q?v=2", wantSeen: seenLine("GET", "/q?v=2", "app.example", "")},
	{name: "select/query: no match 404", route: recorded(selectBy(func(r Request) bool { return r.RawQuery() == "v=2" })),
		path: "/q?v=3", status: 404, wantSeen: ""},
	{name: "select/a chosen route's handler", route: func(t *testing.T) (*Route, func() string) {
		chosen := &Route{Name: "chosen", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(202)
			_, _ = io.WriteString(w, "local")
		})}
		return &Route{Name: "cond", Select: func(Request, string, string) *Route { return chosen }}, nil
	}, status: 202, wantBody: "local", wantStats: "route=chosen status=202 outcome=4 GET app.example / req=0 resp=5"},
	{name: "select/a chosen route's redirect to HTTPS", route: func(t *testing.T) (*Route, func() string) {
		chosen := &Route{Name: "chosen", RedirectHTTPS: true, HTTPSPort: 8443}
		return &Route{Name: "cond", Select: func(Request, string, string) *Route { return chosen }}, nil
	}, path: "/r?a=1", status: 301, wantHeader: http.Header{"Location": {"https://app.example:8443/r?a=1"}},
		wantStats: "route=chosen status=301 outcome=3 GET app.example /r?a=1 req=0 resp=0"},

	{name: "ext/request fields set, add, remove", route: recorded(ext(RouteExt{RequestHeaders: &HeaderEdit{
		Set: []HeaderField{{"X-Set", "s"}}, Add: []HeaderField{{"X-Add", "b"}}, Remove: []string{"X-Drop"}}})),
		header:   http.Header{"X-Set": {"client"}, "X-Add": {"a"}, "X-Drop": {"d"}},
		wantSeen: seenLine("GET", "/", "app.example", "", "X-Add=a,b", "X-Set=s")},
	{name: "ext/response fields set, add, remove", route: recorded(ext(RouteExt{ResponseHeaders: &HeaderEdit{
		Set: []HeaderField{{"X-Member", "set"}}, Add: []HeaderField{{"X-Multi", "three"}, {"X-New", "n"}}, Remove: []string{"X-Gone"}}})),
		wantHeader: http.Header{"X-Member": {"set"}, "X-Multi": {"one,two,three"}, "X-New": {"n"}},
		wantSeen:   seenLine("GET", "/", "app.example", "")},
	{name: "ext/host rewrite", route: recorded(ext(RouteExt{RewriteHost: "inner.example"})),
		wantSeen: seenLine("GET", "/", "inner.example", "")},
	{name: "ext/path rewrite, whole", route: recorded(ext(RouteExt{RewritePath: &PathChange{Value: "/new"}, Prefix: "/old"})),
		path: "/old/x?k=v", wantSeen: seenLine("GET", "/new?k=v", "app.example", "")},
	{name: "ext/path rewrite, prefix", route: recorded(ext(RouteExt{RewritePath: &PathChange{Prefix: true, Value: "/new"}, Prefix: "/old"})),
		path: "/old/x?k=v", wantSeen: seenLine("GET", "/new/x?k=v", "app.example", "")},
	{name: "ext/redirect keeps scheme and port", route: recorded(ext(RouteExt{Redirect: &Redirect{Hostname: "other.example", Status: 302,
		Path: &PathChange{Prefix: true, Value: "/to"}}, Prefix: "/from"})), path: "/from/x?k=v",
		status: 302, wantHeader: http.Header{"Location": {"$://other.example:PORT/to/x?k=v"}}, wantSeen: "",
		wantStats: "route=ext status=302 outcome=3 GET app.example /from/x?k=v req=0 resp=0 retries=0 member=false"},
	{name: "ext/redirect to https on 443", route: recorded(ext(RouteExt{Redirect: &Redirect{Scheme: "https", Status: 301}})),
		path: "/r", status: 301, wantHeader: http.Header{"Location": {"https://app.example/r"}}, wantSeen: ""},
	{name: "redirect to HTTPS (listener)", route: func(t *testing.T) (*Route, func() string) {
		return &Route{Name: "tohttps", RedirectHTTPS: true, HTTPSPort: 8443}, nil
	}, method: "POST", body: "x", path: "/r?a=1", status: 308, wantHeader: http.Header{"Location": {"https://app.example:8443/r?a=1"}}},
	{name: "redirect to HTTPS (listener): GET on 443", route: func(t *testing.T) (*Route, func() string) {
		return &Route{Name: "tohttps", RedirectHTTPS: true, HTTPSPort: 443}, nil
	}, path: "/a/%7e/../b", status: 301, wantHeader: http.Header{"Location": {"https://app.example/a/b"}},
		wantStats: "route=tohttps status=301 outcome=3 GET app.example /a/%7e/../b req=0 resp=0"},
	{name: "ext/mirror", route: func(t *testing.T) (*Route, func() string) {
		m, mm := &recorder{}, &recorder{}
		be, mbe := newBackend(t, backendServer(t, m)), newBackend(t, backendServer(t, mm))
		return &Route{Name: "mirror", Backend: be, Ext: &RouteExt{Mirrors: []Mirror{{Backend: mbe, Numerator: 1, Denominator: 1}}}},
			func() string { return "main: " + m.lines() + "; mirror: " + mm.awaitLines(1) }
	}, method: "PUT", path: "/m", body: "copy",
		wantSeen: "main: " + seenLine("PUT", "/m", "app.example", "copy", "Content-Length=4") +
			"; mirror: " + seenLine("PUT", "/m", "app.example", "copy", "Content-Length=4")},
	// Whether the member saw the request before the timeout depends on
	// the machine's load: not compared.
	{name: "ext/request timeout: 504", route: func(t *testing.T) (*Route, func() string) {
		r, _ := recorded(ext(RouteExt{RequestTimeout: 500 * time.Millisecond}))(t)
		return r, nil
	}, path: "/slow", status: 504,
		wantStats: "route=ext status=504 outcome=7 GET app.example /slow req=0 resp="},
	{name: "ext/weights all 0: 500", route: func(t *testing.T) (*Route, func() string) {
		m := &recorder{}
		be := newBackend(t, backendServer(t, m))
		return &Route{Name: "w0", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 0}}}}, m.lines
	}, status: 500, wantSeen: ""},

	{name: "cors/preflight", route: recorded(ext(RouteExt{CORS: NewCORS(CORSConfig{AllowOrigins: []string{"https://*.app.example"},
		AllowMethods: []string{"GET", "PUT"}, AllowHeaders: []string{"X-Token"}, MaxAge: 60})})),
		method: "OPTIONS", header: http.Header{"Origin": {"https://web.app.example"}, "Access-Control-Request-Method": {"PUT"},
			"Access-Control-Request-Headers": {"x-token"}},
		status: 204, wantHeader: http.Header{"Access-Control-Allow-Origin": {"https://web.app.example"},
			"Access-Control-Allow-Methods": {"GET, PUT"}, "Access-Control-Allow-Headers": {"X-Token"}, "Access-Control-Max-Age": {"60"}},
		wantSeen: ""},
	{name: "cors/allowed origin", route: recorded(ext(RouteExt{CORS: NewCORS(CORSConfig{AllowOrigins: []string{"https://*.app.example"},
		AllowMethods: []string{"GET"}, ExposeHeaders: []string{"X-Member"}})})),
		header:     http.Header{"Origin": {"https://web.app.example"}},
		wantHeader: http.Header{"Access-Control-Allow-Origin": {"https://web.app.example"}, "Access-Control-Expose-Headers": {"X-Member"}},
		wantSeen:   seenLine("GET", "/", "app.example", "", "Origin=https://web.app.example")},
	{name: "cors/other origin", route: recorded(ext(RouteExt{CORS: NewCORS(CORSConfig{AllowOrigins: []string{"https://*.app.example"},
		AllowMethods: []string{"GET"}})})),
		header: http.Header{"Origin": {"https://evil.example"}}, wantHeader: http.Header{"Access-Control-Allow-Origin": nil},
		wantSeen: seenLine("GET", "/", "app.example", "", "Origin=https://evil.example")},

	{name: "gate/rate limit: 429", route: recorded(func(be *testBackend) *Route {
		return &Route{Name: "gated", Backend: be, Gate: func(_ netip.Addr, r Request) http.Handler {
			if _, ok := r.Header("X-Over"); !ok {
				return nil
			}
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "slow down", http.StatusTooManyRequests)
			})
		}}
	}), header: http.Header{"X-Over": {"1"}}, status: 429, wantBody: "slow down", wantHeader: http.Header{"Retry-After": {"1"}},
		wantSeen: "", wantStats: "route=gated status=429 outcome=4 GET app.example / req=0 resp=10"},
	{name: "gate/under the limit", route: recorded(func(be *testBackend) *Route {
		return &Route{Name: "gated", Backend: be, Gate: func(netip.Addr, Request) http.Handler { return nil }}
	}), wantSeen: seenLine("GET", "/", "app.example", "")},
	{name: "gate/asked once on a route net/http serves", route: func(t *testing.T) (*Route, func() string) {
		m := &recorder{}
		var asked atomic.Int32
		return &Route{Name: "gated", Backend: newBackend(t, backendServer(t, m)),
				Ext:  &RouteExt{ResponseHeaders: &HeaderEdit{Set: []HeaderField{{"X-Edited", "1"}}}},
				Gate: func(netip.Addr, Request) http.Handler { asked.Add(1); return nil }},
			func() string { return fmt.Sprintf("gate asked %d; %s", asked.Load(), m.lines()) }
	}, wantHeader: http.Header{"X-Edited": {"1"}}, wantSeen: "gate asked 1; " + seenLine("GET", "/", "app.example", "")},
	{name: "local handler", route: func(t *testing.T) (*Route, func() string) {
		return &Route{Name: "local", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Local", r.Method+" "+r.URL.Path+" "+r.Host)
			io.WriteString(w, "local")
		})}, nil
	}, path: "/.well-known/x", wantBody: "local", wantHeader: http.Header{"X-Local": {"GET /.well-known/x app.example"}},
		wantStats: "route=local status=200 outcome=4 GET app.example /.well-known/x req=0 resp=5"},
	{name: "local handler: its own status", route: func(t *testing.T) (*Route, func() string) {
		return &Route{Name: "local", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, "took %d", len(body))
		})}, nil
	}, method: "POST", body: "abc", status: 202, wantBody: "took 3",
		wantStats: "route=local status=202 outcome=4 POST app.example / req=3 resp=6"},
	{name: "gate/a refusal of its own status", route: recorded(func(be *testBackend) *Route {
		return &Route{Name: "gated", Backend: be, Gate: func(netip.Addr, Request) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "closed", 503) })
		}}
	}), status: 503, wantBody: "closed", wantSeen: "", wantStats: "route=gated status=503 outcome=4 GET app.example / req=0 resp=7"},
	{name: "gate/after a condition", route: recorded(func(be *testBackend) *Route {
		inner := &Route{Name: "gated", Backend: be, Gate: func(netip.Addr, Request) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "over", 429) })
		}}
		return &Route{Name: "cond", Select: func(Request, string, string) *Route { return inner }}
	}), status: 429, wantBody: "over", wantSeen: "", wantStats: "route=gated status=429 outcome=4 GET app.example / req=0 resp=5"},
	{name: "inspect: refused", route: recorded(func(be *testBackend) *Route {
		return &Route{Name: "waf", Backend: be, InspectBody: 16, Inspect: func(r *http.Request, body []byte, _, _ netip.AddrPort) (http.Handler, int, string) {
			if strings.Contains(string(body), "attack") {
				return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", 403) }), 403, "rule-1"
			}
			return nil, 0, ""
		}}
	}), method: "POST", body: "an attack", status: 403, wantSeen: "", wantStats: "route=waf status=403"},
	{name: "inspect: passed", route: recorded(func(be *testBackend) *Route {
		return &Route{Name: "waf", Backend: be, InspectBody: 16, Inspect: func(*http.Request, []byte, netip.AddrPort, netip.AddrPort) (http.Handler, int, string) {
			return nil, 0, ""
		}}
	}), method: "POST", body: "fine", wantSeen: seenLine("POST", "/", "app.example", "fine", "Content-Length=4")},

	{name: "member down: 503", route: func(t *testing.T) (*Route, func() string) {
		m := &recorder{}
		be := newBackend(t, backendServer(t, m))
		be.members[0].down.Store(true)
		return &Route{Name: "down", Backend: be}, m.lines
	}, status: 503, wantSeen: "", wantStats: "route=down status=503 outcome=5 GET app.example / req=0 resp="},
	{name: "member refuses: 502", route: func(t *testing.T) (*Route, func() string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return &Route{Name: "refused", Backend: newBackend(t, addr)}, nil
	}, status: 502, wantStats: "route=refused status=502 outcome=6 GET app.example / req=0 resp="},
}
