package accesslog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []Line {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Line
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

type counting struct{ n int }

func (c *counting) Request(l7.RequestStats) { c.n++ }
func (c *counting) Conn(*l7.ConnInfo, bool) {}

func TestRateLimitAndSampling(t *testing.T) {
	var out syncBuffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := &counting{}
	r := 0.0
	l := New(Config{Next: next, Out: &out, PerLB: 10, PerHost: 25, Now: func() time.Time { return now },
		Rand: func() float64 {
			r += 0.1
			if r >= 1 {
				r = 0
			}
			return r
		}})
	req := func(lb string, sample float64) {
		l.Request(l7.RequestStats{LB: lb, Tenant: "acme", Status: 200, AccessLog: sample})
	}
	// A flood of 1000 requests within one second: the burst (20) is
	// written, the rest is dropped; the metrics see every request.
	for range 1000 {
		req("acme/flood", 1)
	}
	if got := len(out.lines(t)); got != 20 {
		t.Fatalf("a flood wrote %d lines, want the burst of 20", got)
	}
	if next.n != 1000 {
		t.Fatalf("the metrics saw %d requests, want 1000", next.n)
	}
	// A second later: 10 more tokens; the first line counts the drops.
	now = now.Add(time.Second)
	req("acme/flood", 1)
	lines := out.lines(t)
	if last := lines[len(lines)-1]; last.Dropped != 980 {
		t.Errorf("first line after the flood: dropped=%d, want 980", last.Dropped)
	}
	// The host limit (burst 50) bounds many load balancers together.
	start := len(out.lines(t))
	for i := range 200 {
		req("acme/lb"+string(rune('a'+i%26)), 1)
	}
	if got := len(out.lines(t)) - start; got > 50 || got < 20 {
		t.Errorf("%d lines in one second across load balancers, host burst is 50 and 29 tokens were left", got)
	}
	// Sampling: 0.3 keeps about 3 in 10; 0 (no access log) none.
	now = now.Add(time.Hour)
	before := len(out.lines(t))
	for range 10 {
		req("acme/sampled", 0.3)
		req("acme/off", 0)
	}
	if got := len(out.lines(t)) - before; got != 2 && got != 3 && got != 4 {
		t.Errorf("sample 0.3 wrote %d of 10 requests", got)
	}
	for _, ln := range out.lines(t) {
		if ln.LB == "acme/off" {
			t.Fatal("a load balancer without an access log was logged")
		}
	}
}

// TestAccessLogThroughEngine proxies real requests through the L7 engine
// with the access log on for the listener and reads the lines.
func TestAccessLogThroughEngine(t *testing.T) {
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(bl)
	t.Cleanup(func() { backend.Close() })
	member := netip.MustParseAddrPort(bl.Addr().String())

	var out syncBuffer
	srv := l7.New(l7.Config{Metrics: New(Config{Out: &out})})
	t.Cleanup(func() { srv.Close() })
	route := &l7.Route{Name: "acme/shop/routes[0]", Backend: &oneMember{m: &fixed{member}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				srv.ServeConn(ctx, c, l7.ConnInfo{Listener: "192.0.2.1:80/tcp", LB: "acme/shop", Tenant: "acme", AccessLog: 1,
					Router: func() l7.Router { return router{route} }})
			}()
		}
	}()
	cl := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/a?x=1", "/b"} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+path, nil)
		req.Host = "shop.acme.example"
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var lines []Line
	deadline := time.Now().Add(10 * time.Second)
	for len(lines) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		lines = out.lines(t)
	}
	if len(lines) != 2 {
		t.Fatalf("%d access-log lines, want 2", len(lines))
	}
	l := lines[0]
	checks := []struct{ name, got, want string }{
		{"lb", l.LB, "acme/shop"}, {"tenant", l.Tenant, "acme"}, {"host", l.Host, "shop.acme.example"},
		{"method", l.Method, "GET"}, {"path", l.Path, "/a?x=1"}, {"upstream", l.Upstream, member.String()},
		{"outcome", l.Outcome, "ok"}, {"protocol", l.Protocol, "HTTP/1.1"}, {"route", l.Route, "acme/shop/routes[0]"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if l.Status != 200 || l.BytesOut != 6 || l.Duration <= 0 || l.UpstreamD <= 0 || !strings.HasPrefix(l.Client, "127.0.0.1:") {
		t.Errorf("line %+v: want status 200, 6 bytes out, durations and the client", l)
	}
	if len(l.RequestID) < 16 || l.RequestID == lines[1].RequestID {
		t.Errorf("request ids %q and %q: want the id sent to the member, distinct per request", l.RequestID, lines[1].RequestID)
	}
	if _, err := time.Parse(time.RFC3339Nano, l.Time); err != nil {
		t.Errorf("time %q: %v", l.Time, err)
	}
}

type router struct{ r *l7.Route }

func (r router) Route(string, string) *l7.Route { return r.r }

type fixed struct{ addr netip.AddrPort }

func (f *fixed) Addr() netip.AddrPort           { return f.addr }
func (f *fixed) Done(error, int, time.Duration) {}

type oneMember struct {
	m    *fixed
	opts l7.BackendOptions
}

func (o *oneMember) Pick(netip.Addr, []byte) (l7.Member, bool) { return o.m, true }
func (o *oneMember) Options() *l7.BackendOptions               { return &o.opts }

// TestAccessLogNamesInspectedRules: the note of a route's Inspect (the
// WAF's rule ids) is the line's waf_rules, for a request it answered and
// one it let through; a request without a note has none.
func TestAccessLogNamesInspectedRules(t *testing.T) {
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(bl)
	t.Cleanup(func() { backend.Close() })
	var out syncBuffer
	srv := l7.New(l7.Config{Metrics: New(Config{Out: &out})})
	t.Cleanup(func() { srv.Close() })
	route := &l7.Route{Name: "acme/shop/routes[0]", Backend: &oneMember{m: &fixed{netip.MustParseAddrPort(bl.Addr().String())}},
		Inspect: func(r *http.Request, _ []byte, _, _ netip.AddrPort) (http.Handler, int, string) {
			switch r.URL.Path {
			case "/blocked":
				return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(403) }), 403, "942100,949110"
			case "/detected":
				return nil, 0, "941100"
			}
			return nil, 0, ""
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				srv.ServeConn(ctx, c, l7.ConnInfo{Listener: "192.0.2.1:80/tcp", LB: "acme/shop", Tenant: "acme", AccessLog: 1,
					Router: func() l7.Router { return router{route} }})
			}()
		}
	}()
	cl := &http.Client{Timeout: 5 * time.Second}
	want := map[string]struct {
		status int
		rules  string
	}{"/blocked": {403, "942100,949110"}, "/detected": {200, "941100"}, "/plain": {200, ""}}
	for _, path := range []string{"/blocked", "/detected", "/plain"} {
		resp, err := cl.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var lines []Line
	deadline := time.Now().Add(10 * time.Second)
	for len(lines) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		lines = out.lines(t)
	}
	if len(lines) != 3 {
		t.Fatalf("%d access-log lines, want 3", len(lines))
	}
	for _, l := range lines {
		if w := want[l.Path]; l.Status != w.status || l.WAFRules != w.rules {
			t.Errorf("%s: status %d, waf_rules %q; want %d, %q", l.Path, l.Status, l.WAFRules, w.status, w.rules)
		}
	}
}

// TestAccessLogProtocols: a line names the client's HTTP version.
func TestAccessLogProtocols(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	l := New(Config{Out: &out})
	for _, s := range []l7.RequestStats{{}, {HTTP2: true}, {HTTP3: true}} {
		s.LB, s.Listener, s.Tenant, s.AccessLog, s.Status = "acme/shop", "127.0.0.1:443/tcp", "acme", 1, 200
		l.Request(s)
	}
	var got []string
	for _, line := range out.lines(t) {
		got = append(got, line.Protocol)
	}
	if strings.Join(got, ",") != "HTTP/1.1,HTTP/2,HTTP/3" {
		t.Fatalf("protocols %v", got)
	}
}
