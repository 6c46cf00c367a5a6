package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// State an operator can create (a tenant with raised quotas and load
// balancers with long route lists) that would not fit in one gRPC message
// (4 MB) is still read by `get lbs` and `get tenants`: the admin API pages
// and the CLI follows the pages.
func TestGetFollowsPagesPastMessageLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes about 5 MB of state through a real node")
	}
	parallelScenario(t)
	c := newCluster(t)
	n := c.bootstrap()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	apply := func(p string) {
		t.Helper()
		if _, err := c.cli(n, "apply", "-f", p); err != nil {
			t.Fatal(err)
		}
	}
	apply(write("base.yaml", `kind: VIPPool
name: public
cidrs: [203.0.113.0/27]
mode: static
---
kind: Tenant
name: big
domains: [big.example]
networks: [10.20.0.0/16]
pools: [public]
quotas: {loadBalancers: 30, routesPerLb: 2000, routes: 100000}
`))
	// Few routes of long paths: the state's size is what matters here,
	// and each route costs the host a compile at every apply.
	const lbs, routes = 16, 300
	segment := strings.Repeat("p", 1000)
	// Nothing dials the listeners: a port picked free keeps them off
	// the addresses of the scenarios beside this one.
	port := freePort(t)
	for i := range lbs {
		var b strings.Builder
		fmt.Fprintf(&b, "kind: LoadBalancer\nname: lb%02d\ntenant: big\nvip: {pool: public}\n", i)
		fmt.Fprintf(&b, "listeners:\n  - {port: %d, protocol: http}\nroutes:\n", port)
		for j := range routes {
			fmt.Fprintf(&b, "  - {host: shop.big.example, path: /%s/%d, pool: web}\n", segment, j)
		}
		b.WriteString("pools:\n  web:\n    members: [10.20.0.1:80]\n")
		apply(write(fmt.Sprintf("lb%02d.yaml", i), b.String()))
	}

	out, err := c.cli(n, "get", "lbs", "-o", "json")
	if err != nil {
		t.Fatalf("get lbs -o json over %d load balancers of %d routes: %v", lbs, routes, err)
	}
	if len(out) < 4<<20 {
		t.Fatalf("get lbs -o json printed %d bytes; the state is meant to exceed one 4 MB message", len(out))
	}
	for i := range lbs {
		if !strings.Contains(out, fmt.Sprintf(`"lb%02d"`, i)) {
			t.Fatalf("get lbs -o json misses lb%02d", i)
		}
	}
	table, err := c.cli(n, "get", "lbs")
	if err != nil {
		t.Fatalf("get lbs: %v", err)
	}
	for _, name := range []string{"lb00", fmt.Sprintf("lb%02d", lbs-1)} {
		if !strings.Contains(table, name) {
			t.Fatalf("get lbs misses %s:\n%s", name, table)
		}
	}
	tenants, err := c.cli(n, "get", "tenants")
	if err != nil {
		t.Fatalf("get tenants (which counts every load balancer): %v", err)
	}
	if !strings.Contains(tenants, fmt.Sprintf("%d/30", lbs)) {
		t.Errorf("get tenants does not count %d of 30 load balancers:\n%s", lbs, tenants)
	}
	t.Logf("get lbs -o json: %d bytes over %d load balancers", len(out), lbs)
}
