package scenarios

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A real host explains what it sees: a listener whose port another
// process holds is reported not bound with the reason, a member that does
// not answer is down, and both show in get lbs, explain and events. Once
// the port is freed the host takes it on its own (retry with backoff, no
// new state) and the load balancer serves.
func TestExplainThroughARealHost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a teapot-lb process")
	}
	parallelScenarioTaking(t, 4*time.Second)
	// The host, the VIP and the member each have a loopback address of
	// their own (ownaddr_test.go): the host binds the VIP's port once the
	// test frees it, and the test binds the member's port again later.
	c := newCluster(t)
	n, _ := c.newNodeOn(explainHost, 0)
	c.start(n)
	c.waitMember(n)

	busy, err := net.Listen("tcp", explainVIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	// Nothing answers at the member's address until the backend starts
	// below.
	memberAddr := freeAddrsOn(t, explainMember, 1)[0]

	manifest := fmt.Sprintf(`
kind: VIPPool
name: lab
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
networks: [%[4]s/32]
pools: [lab]
---
kind: LoadBalancer
name: web
tenant: acme
vip: { pool: lab, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: tcp, pool: app }]
pools:
  app:
    members: ["%[3]s"]
    healthCheck: { tcp: {}, interval: 1s, timeout: 500ms }
`, explainVIP, port, memberAddr, explainMember)
	path := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}

	explain := func() string {
		out, err := c.cli(n, "explain", "lb", "acme/web")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var out string
	waitUntil(t, "explain to show the busy port and the dead member", 60*time.Second, func() bool {
		out = explain()
		return strings.Contains(out, "Load balancer acme/web: Failing") &&
			strings.Contains(out, "address already in use; free the port on "+n.id) &&
			strings.Contains(out, memberAddr+"   no")
	}, func() string { return out })
	wide, err := c.cli(n, "get", "lbs", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(wide, "Failing") || !strings.Contains(wide, "is not bound") {
		t.Errorf("get lbs -o wide:\n%s", wide)
	}
	events, err := c.cli(n, "events", "--lb", "acme/web")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(events, "bind-failed") || !strings.Contains(events, "member-down") {
		t.Errorf("events:\n%s", events)
	}

	// Free the port and start the member: no new state is written.
	busy.Close()
	backend, err := net.Listen("tcp", memberAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			conn, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); io.Copy(conn, conn) }()
		}
	}()
	waitUntil(t, "the host to bind the freed port and see the member up", 60*time.Second, func() bool {
		out = explain()
		return strings.Contains(out, "Load balancer acme/web: Serving")
	}, func() string { return out })
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(explainVIP, fmt.Sprint(port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the load balancer: %q, %v", buf, err)
	}
	events, err = c.cli(n, "events", "--lb", "acme/web")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(events, "bind-ok") || !strings.Contains(events, "member-up") {
		t.Errorf("events after the recovery:\n%s", events)
	}
}

// waitUntil polls cond every pollInterval until it holds or within
// passes; last describes the state for the failure message.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool, last func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last:\n%s", within, what, last())
		}
		time.Sleep(pollInterval)
	}
}
