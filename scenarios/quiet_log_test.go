package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noisy returns the WARN and ERROR lines of a log part, and those that
// name the host name gone.
func noisy(part, gone string) []string {
	var out []string
	for line := range strings.Lines(part) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, gone) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// A newcomer's first hour logs nothing alarming: a first bootstrap logs no
// WARN or ERROR; after an https load balancer with ACME is deleted and the
// host restarted, the restart logs none either, and nothing about the
// deleted load balancer's name (its certificate is not ordered again).
func TestQuietLogs(t *testing.T) {
	c := newCluster(t)
	n := c.bootstrap()
	readLog := func() string {
		data, err := os.ReadFile(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	const gone = "gone.quiet.example"
	if bad := noisy(readLog(), gone); len(bad) > 0 {
		t.Errorf("a first bootstrap logged:\n%s", strings.Join(bad, "\n"))
	}

	manifest := filepath.Join(c.dir, "quiet.yaml")
	if err := os.WriteFile(manifest, []byte(`kind: VIPPool
name: quiet
cidrs: [127.0.31.0/28]
mode: static
---
kind: Tenant
name: quiet
domains: [quiet.example]
networks: [127.0.0.0/8]
pools: [quiet]
---
kind: LoadBalancer
name: shop
tenant: quiet
vip: { pool: quiet }
listeners: [{ port: 18443, protocol: https, tls: { acme: true } }]
routes: [{ host: `+gone+`, path: /, pool: web }]
pools: { web: { members: [127.0.0.1:9] } }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	// The host asks the (closed) CA for the name: its failures belong to
	// this run, before the delete.
	waitFor(t, startTimeout, "the name handed to ACME", func() error {
		if !strings.Contains(readLog(), gone) {
			return os.ErrNotExist
		}
		return nil
	})
	if _, err := c.cli(n, "delete", "lb", "quiet/shop"); err != nil {
		t.Fatal(err)
	}
	// A clean stop, then a start from the same state.
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(startTimeout):
		t.Fatal("the host did not stop on SIGTERM")
	}
	before := len(readLog())
	c.restart(n)
	c.waitMember(n)
	// The certificate manager reconciles every few seconds: give it two
	// rounds after the host is current, then read the restart's lines.
	if _, err := c.cli(n, "get", "lbs"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if bad := noisy(readLog()[before:], gone); len(bad) > 0 {
			t.Fatalf("the restart logged:\n%s", strings.Join(bad, "\n"))
		}
		time.Sleep(pollInterval)
	}
}
