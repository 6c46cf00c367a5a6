package scenarios

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cpuSettingsVIP is the static VIP of TestTenantCPUSettings.
const cpuSettingsVIP = "127.0.0.151"

// TestTenantCPUSettings: the real binary honours both settings of a
// tenant's host CPU budget. serve --cpu-per-tenant is the budget of a
// tenant without quotas.cpuMillicores (teapot_lb_tenant_cpu_budget_cores);
// tenant update --cpu-millicores replaces it on the host, explain tenant
// says so, and --cpu-millicores 0 gives the host's default back. A
// --cpu-per-tenant over the host's CPUs is refused at start.
func TestTenantCPUSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a cluster")
	}
	c := newCluster(t)
	n := c.newNode()
	c.start(n, "--cpu-per-tenant", "0.3")
	c.waitMember(n)
	port := freePortOn(t, cpuSettingsVIP)
	manifest := fmt.Sprintf(`
kind: VIPPool
name: cpu
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: cpu
networks: [127.0.0.1/32]
pools: [cpu]
---
kind: LoadBalancer
name: echo
tenant: cpu
vip: { pool: cpu, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: tcp, pool: echo }]
pools:
  echo: { members: ["127.0.0.1:9"] }
`, cpuSettingsVIP, port)
	path := filepath.Join(c.dir, "cpu.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(n, "apply", "-f", path); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	budget := func(want float64) func() error {
		return func() error {
			ss, err := scrape(n)
			if err != nil {
				return err
			}
			for _, s := range ss["teapot_lb_tenant_cpu_budget_cores"] {
				if s.labels["tenant"] == "cpu" {
					if math.Abs(s.value-want) > 1e-9 {
						return fmt.Errorf("budget %g cores, want %g", s.value, want)
					}
					return nil
				}
			}
			return fmt.Errorf("no teapot_lb_tenant_cpu_budget_cores of tenant cpu")
		}
	}
	waitFor(t, 15*time.Second, "the budget of serve --cpu-per-tenant", budget(0.3))

	if out, err := c.cli(n, "tenant", "update", "cpu", "--cpu-millicores", "700"); err != nil {
		t.Fatalf("tenant update: %v\n%s", err, out)
	}
	waitFor(t, 15*time.Second, "the budget of quotas.cpuMillicores", budget(0.7))
	out, err := c.cli(n, "explain", "tenant", "cpu")
	if err != nil || !strings.Contains(out, "CPU budget (quotas.cpuMillicores: 0.70 cores;") {
		t.Fatalf("explain tenant: %v\n%s", err, out)
	}
	if out, err := c.cli(n, "tenant", "update", "cpu", "--cpu-millicores", "0"); err != nil {
		t.Fatalf("tenant update: %v\n%s", err, out)
	}
	waitFor(t, 15*time.Second, "the host's default back", budget(0.3))

	// A budget no tenant could reach is refused before anything starts.
	over := c.newNode()
	c.start(over, "--cpu-per-tenant", "100000")
	select {
	case <-over.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("serve --cpu-per-tenant 100000 still runs")
	}
	if log, _ := os.ReadFile(over.logPath); !strings.Contains(string(log), "--cpu-per-tenant 100000: more than this host's") {
		t.Fatalf("serve --cpu-per-tenant 100000 logged:\n%s", log)
	}
}
