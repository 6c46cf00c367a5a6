package scenarios

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// h2specVersion is the conformance suite run against serve's HTTP/2,
// built from the Go module proxy into ~/.cache/teapot-lb/h2spec.
const h2specVersion = "v2.2.1+incompatible"

// h2specVIP is the loopback address of the scenario's load balancer.
const h2specVIP = "127.0.0.82"

// h2specBinary builds h2spec once and returns its path.
func h2specBinary(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		unavailable(t, "no cache directory for h2spec: %v", err)
	}
	dir := filepath.Join(cache, "teapot-lb", "h2spec", h2specVersion)
	bin := filepath.Join(dir, "h2spec")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/summerwind/h2spec/cmd/h2spec@"+h2specVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		unavailable(t, "build h2spec %s from the module proxy: %v\n%s", h2specVersion, err, out)
	}
	return bin
}

var h2specSummary = regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`)

// TestH2Spec runs the HTTP/2 conformance suite, plain and strict, against
// an https listener of serve whose route leads to a real member. Every
// case must pass: a failure, a skip or a missing summary fails the test.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts serve and builds h2spec")
	}
	h2spec := h2specBinary(t)

	var served atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("conformance member: a body of some length for the DATA frames\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	dir := t.TempDir()
	certFile, keyFile := benchCert(t, dir)
	c := newCluster(t)
	n := c.bootstrap()
	l, err := net.Listen("tcp", h2specVIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	tenant := fmt.Sprintf(`
kind: VIPPool
name: conf
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [conf]
`, h2specVIP)
	lb := fmt.Sprintf(`
kind: LoadBalancer
name: conf
tenant: acme
vip: { pool: conf, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: https, tls: { certificates: [conf] } }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["%[3]s"] } }
`, h2specVIP, port, ln.Addr().String())
	for i, doc := range []string{tenant, lb} {
		p := filepath.Join(dir, fmt.Sprintf("m%d.yaml", i))
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := c.cli(n, "cert", "upload", "conf", "--tenant", "acme", "--cert", certFile, "--key", keyFile); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.cli(n, "apply", "-f", p); err != nil {
			t.Fatal(err)
		}
	}
	addr := net.JoinHostPort(h2specVIP, strconv.Itoa(port))
	if err := waitHandshake(addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	for _, strict := range []bool{false, true} {
		args := []string{"-t", "-k", "-h", h2specVIP, "-p", strconv.Itoa(port), "-o", "5"}
		if strict {
			args = append(args, "-S")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := exec.CommandContext(ctx, h2spec, args...).CombinedOutput()
		cancel()
		m := h2specSummary.FindSubmatch(out)
		if m == nil {
			t.Fatalf("h2spec strict=%v: no summary (%v)\n%s", strict, err, out)
		}
		total, _ := strconv.Atoi(string(m[1]))
		passed, _ := strconv.Atoi(string(m[2]))
		if passed != total || total < 145 {
			t.Errorf("h2spec strict=%v: %s\n%s", strict, m[0], out)
		} else {
			t.Logf("h2spec strict=%v: %s", strict, m[0])
		}
	}
	if served.Load() == 0 {
		t.Error("no request reached the member: the cases ran against error pages only")
	}
}
