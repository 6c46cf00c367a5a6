package scenarios

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
)

const routingVIP = "127.0.0.66"

// routingMember is a member of the routing scenario: it answers with its
// pool's name and what it saw, and remembers the requests.
type routingMember struct {
	pool string
	addr string
	mu   sync.Mutex
	seen []routingSeen
}

type routingSeen struct {
	Pool, Method, Host, Path, Query, Shelf, Proto string
}

func (m *routingMember) requests() []routingSeen {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]routingSeen(nil), m.seen...)
}

func startRoutingMember(t *testing.T, pool string) *routingMember {
	t.Helper()
	m := &routingMember{pool: pool}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := routingSeen{Pool: pool, Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery,
			Shelf: r.Header.Get("X-Shelf"), Proto: r.Proto}
		m.mu.Lock()
		if len(m.seen) < 10000 {
			m.seen = append(m.seen, s)
		}
		m.mu.Unlock()
		w.Header().Set("X-Debug", "member")
		_ = json.NewEncoder(w).Encode(s)
	})
	srv := &http.Server{Handler: h2c.NewHandler(h, &http2.Server{})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	m.addr = l.Addr().String()
	return m
}

// TestHTTPRoutingExample applies examples/http-routing.yaml to a real
// single-host cluster, with its VIP, port and members moved onto loopback,
// and sends requests through `serve` that exercise each of its routes: the
// redirect, the testers' matches, the 90/10 split with its header
// changes and mirror, the rewrite of versioned API writes, and the gRPC
// service match to an h2c pool.
func TestHTTPRoutingExample(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a cluster")
	}
	data, err := os.ReadFile("../examples/http-routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	members := map[string]*routingMember{}
	for _, p := range []string{"stable", "canary", "beta", "shadow", "grpc"} {
		members[p] = startRoutingMember(t, p)
	}
	port := freePortOn(t, routingVIP)
	manifest := string(data)
	for old, repl := range map[string]string{
		"cidrs: [192.0.2.64/28]":                 "cidrs: [" + routingVIP + "/32]",
		"networks: [127.40.0.0/16]":              "networks: [127.0.0.1/32]",
		"vip: { pool: routing-public }":          `vip: { pool: routing-public, address: "` + routingVIP + `" }`,
		"{ port: 80, protocol: http }":           "{ port: " + strconv.Itoa(port) + ", protocol: http }",
		"[127.40.0.11:30080, 127.40.0.12:30080]": `["` + members["stable"].addr + `"]`,
		"[127.40.0.21:30080]":                    `["` + members["canary"].addr + `"]`,
		"[127.40.0.31:30080]":                    `["` + members["beta"].addr + `"]`,
		"[127.40.0.41:30080]":                    `["` + members["shadow"].addr + `"]`,
		"[127.40.0.51:50051]":                    `["` + members["grpc"].addr + `"]`,
	} {
		if !strings.Contains(manifest, old) {
			t.Fatalf("examples/http-routing.yaml no longer holds %q; update this test", old)
		}
		manifest = strings.ReplaceAll(manifest, old, repl)
	}
	c := newCluster(t)
	n := c.bootstrap()
	mpath := filepath.Join(c.dir, "routing.yaml")
	if err := os.WriteFile(mpath, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", mpath); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}

	base := "http://" + net.JoinHostPort(routingVIP, strconv.Itoa(port))
	cl := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, host, path string, hdr http.Header) (*http.Response, routingSeen, error) {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			return nil, routingSeen{}, err
		}
		req.Host = host
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := cl.Do(req)
		if err != nil {
			return nil, routingSeen{}, err
		}
		defer resp.Body.Close()
		var s routingSeen
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(body, &s); err != nil {
				return resp, s, fmt.Errorf("body %q: %w", body, err)
			}
		}
		return resp, s, nil
	}
	// The listener opens and the routes compile shortly after the apply.
	waitFor(t, startTimeout, "the catalog's routes to answer", func() error {
		resp, s, err := do("GET", "books.example", "/shelf/1", nil)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 || (s.Pool != "stable" && s.Pool != "canary") {
			return fmt.Errorf("status %d from %q", resp.StatusCode, s.Pool)
		}
		return nil
	})

	t.Run("redirect", func(t *testing.T) {
		resp, _, err := do("GET", "books.example", "/old/b/42?x=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := "http://books.example:" + strconv.Itoa(port) + "/shelf/b/42?x=1"
		if resp.StatusCode != 301 || resp.Header.Get("Location") != want {
			t.Errorf("%d Location %q, want 301 %q", resp.StatusCode, resp.Header.Get("Location"), want)
		}
	})
	t.Run("testers", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			hdr  http.Header
		}{{"/shelf/1", http.Header{"X-Tester": {"yes"}}}, {"/shelf/1?beta=1", nil}} {
			resp, s, err := do("GET", "books.example", tc.path, tc.hdr)
			if err != nil || resp.StatusCode != 200 || s.Pool != "beta" {
				t.Errorf("%s %v: %v %+v", tc.path, tc.hdr, err, s)
			}
		}
	})
	t.Run("split, header changes and mirror", func(t *testing.T) {
		counts := map[string]int{}
		const requests = 300
		for range requests {
			resp, s, err := do("GET", "books.example", "/shelf/2", http.Header{"X-Debug": {"1"}})
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", err, resp)
			}
			if s.Shelf != "books" {
				t.Fatalf("the member saw X-Shelf %q, want books", s.Shelf)
			}
			if got := resp.Header.Get("Cache-Control"); got != "max-age=60" {
				t.Fatalf("Cache-Control %q", got)
			}
			counts[s.Pool]++
		}
		// 10% of 300 is 30 (sd 5.2): 10..60 is over 3.8 sd either side.
		if counts["stable"]+counts["canary"] != requests || counts["canary"] < 10 || counts["canary"] > 60 {
			t.Errorf("split %v, want about 270 stable and 30 canary", counts)
		}
		for _, r := range members["stable"].requests() {
			if r.Path == "/shelf/2" && r.Shelf != "books" {
				t.Fatalf("stable saw %+v", r)
			}
		}
		// 5% of 300 mirrored: none at all has a chance of 2e-7.
		waitFor(t, 30*time.Second, "mirrored requests at the shadow pool", func() error {
			if got := len(members["shadow"].requests()); got == 0 {
				return fmt.Errorf("none yet")
			}
			return nil
		})
		// Copies of the split route's requests only, with its header
		// changes; earlier subtests' requests to it may be among them.
		for _, r := range members["shadow"].requests() {
			if !strings.HasPrefix(r.Path, "/shelf/") || r.Shelf != "books" {
				t.Errorf("the shadow pool saw %+v", r)
			}
		}
	})
	t.Run("versioned API writes are rewritten", func(t *testing.T) {
		resp, s, err := do("POST", "books.example", "/api/orders?id=3", http.Header{"X-Api-Version": {"v2"}})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		if s.Pool != "stable" || s.Host != "api.books.example" || s.Path != "/orders" || s.Query != "id=3" {
			t.Errorf("member saw %+v", s)
		}
		resp, s, err = do("POST", "books.example", "/api/orders", http.Header{"X-Api-Version": {"v3"}})
		if err != nil || resp.StatusCode != 404 {
			t.Errorf("version v3: %v %v %+v, want 404 (no route)", err, resp, s)
		}
	})
	t.Run("gRPC service to the h2c pool", func(t *testing.T) {
		resp, s, err := do("POST", "grpc.books.example", "/books.v1.Catalog/GetBook", nil)
		if err != nil || resp.StatusCode != 200 || s.Pool != "grpc" || s.Proto != "HTTP/2.0" {
			t.Errorf("%v %v %+v", err, resp, s)
		}
		resp, _, err = do("POST", "grpc.books.example", "/books.v1.Other/GetBook", nil)
		if err != nil || resp.StatusCode != 404 {
			t.Errorf("another service: %v %v, want 404", err, resp)
		}
	})
}
