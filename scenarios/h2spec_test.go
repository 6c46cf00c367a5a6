package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// h2specBinary builds h2spec once, at the versions pinned by
// scenarios/h2spectool's go.mod and go.sum (cached across runs by its
// build.sh), and returns its path.
func h2specBinary(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		unavailable(t, "find the module root to build h2spec: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scenarios", "h2spectool", "build.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		unavailable(t, "build h2spec with scenarios/h2spectool/build.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// h2specVIP is the loopback address of the scenario's load balancer.
const h2specVIP = "127.0.0.82"

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
