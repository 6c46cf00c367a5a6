package scenarios

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// passiveVIP is a loopback address the scenario's load balancer listens on.
const passiveVIP = "127.0.0.62"

// A load balancer with no health check whose member answers 502 to every
// request shows Failing in explain and get -o json within a minute, with
// the evidence from what its clients got (the member, the host, the
// counts), and Serving again once the member answers well.
func TestPassiveHealthShowsFailingThroughARealHost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a teapot-lb process")
	}
	var status atomic.Int32
	status.Store(502)
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	member := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	})}
	go member.Serve(ml)
	defer member.Close()
	memberAddr := ml.Addr().String()

	c := newCluster(t)
	n := c.bootstrap()
	port := freePortOn(t, passiveVIP)
	manifest := fmt.Sprintf(`
kind: VIPPool
name: lab
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [lab]
---
kind: LoadBalancer
name: web
tenant: acme
vip: { pool: lab, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: http }]
routes: [{ host: shop.acme.example, path: /, pool: app }]
pools: { app: { members: ["%[3]s"] } }
`, passiveVIP, port, memberAddr)
	path := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	url := "http://" + net.JoinHostPort(passiveVIP, strconv.Itoa(port)) + "/"
	send := func(n, want int) {
		t.Helper()
		for range n {
			req, _ := http.NewRequest("GET", url, nil)
			req.Host = "shop.acme.example"
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("status %d, want %d", resp.StatusCode, want)
			}
		}
	}
	explain := func() string {
		out, err := c.cli(n, "explain", "lb", "acme/web")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var out string
	waitUntil(t, "the load balancer to serve", 30*time.Second, func() bool {
		out = explain()
		return strings.Contains(out, "Load balancer acme/web: Serving")
	}, func() string { return out })

	start := time.Now()
	send(40, 502)
	evidence := "502 from " + memberAddr + " on 40 of 40 requests in the last 60 s"
	waitUntil(t, "explain to show Failing with the evidence", time.Minute, func() bool {
		out = explain()
		return strings.Contains(out, "Load balancer acme/web: Failing") &&
			strings.Contains(out, n.id+": pool app member "+memberAddr+" is down: "+evidence) &&
			strings.Contains(out, "40 of 40 requests failed")
	}, func() string { return out })
	t.Logf("Failing with the evidence %s after the first request", time.Since(start).Round(time.Millisecond))
	js, err := c.cli(n, "get", "lb", "acme/web", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js, `"Failing"`) || !strings.Contains(js, evidence) {
		t.Errorf("get lb -o json:\n%s", js)
	}

	// The member recovers: good answers outweigh the failures in the
	// window.
	status.Store(200)
	send(200, 200)
	waitUntil(t, "explain to show Serving again", 30*time.Second, func() bool {
		out = explain()
		return strings.Contains(out, "Load balancer acme/web: Serving")
	}, func() string { return out })
}
