package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

func TestTenantIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts etcd, kube-apiserver and a three-node cluster")
	}
	parallelScenarioTaking(t, 6*time.Second)
	l := newTenantLab(t, isolationLab)
	pods := newPodNet(t, 2)
	acmeCreds := l.seedTenant("acme", "acme.example", pods.network())
	betaCreds := l.seedTenant("beta", "beta.example", "10.99.0.0/16")
	l.agent("acme-agent", acmeCreds)
	// beta's agent takes its own class in the same Kubernetes cluster.
	l.agent("beta-agent", betaCreds, "--leader-elect=false",
		"--lb-class", "teapot-lb.io/lb-beta", "--ingress-controller", "teapot-lb.io/ingress-beta")

	const port = 8080
	backend := pods.addr(0)
	startPodBackend(t, pods, "acme-backend", backend, port)
	l.createService(lbService("shop", "web", "teapot-lb.io/lb", 8080, nil))
	l.putSlice(endpointSlice("shop", "web-1", "web", port, backend))
	vip, _ := l.waitServiceVIP("shop", "web")
	front := vip + ":8080"
	waitReaches(t, front, "acme-backend")
	before := l.waitLB("acme", "svc-shop-web", "stored", hasMembers("web", fmt.Sprintf("%s:%d", backend, port)))

	// beta claims acme's VIP.
	l.createService(lbService("beta", "steal-vip", "teapot-lb.io/lb-beta", 9000,
		map[string]string{"teapot-lb.io/load-balancer-ips": vip}))
	msg := l.waitEvent("beta", "Service", "steal-vip", "LoadBalancerRefused", "address "+vip+" is taken")
	if strings.Contains(msg, "acme/") {
		t.Errorf("the refusal names acme's objects to beta: %s", msg)
	}
	t.Logf("VIP claim refused: %s", msg)

	// beta points members at acme's pods, outside its networks.
	l.createService(lbService("beta", "steal-pods", "teapot-lb.io/lb-beta", 9001, nil))
	l.putSlice(endpointSlice("beta", "steal-pods-1", "steal-pods", port, backend))
	msg = l.waitEvent("beta", "Service", "steal-pods", "LoadBalancerRefused", "outside the tenant's networks")
	t.Logf("members outside the networks refused: %s", msg)

	// beta routes acme's hostname.
	l.createIngressClass("beta", "teapot-lb.io/ingress-beta")
	l.createService(lbService("beta", "web", "teapot-lb.io/lb-beta", 9002, nil))
	l.createIngress("beta", "steal-host", "beta", "shop.acme.example", "web")
	msg = l.waitEvent("beta", "Ingress", "steal-host", "LoadBalancerRefused", "not inside the tenant's domains")
	t.Logf("hostname claim refused: %s", msg)

	// beta's objects named like acme's stay beta's: a Service shop/web in
	// beta's class becomes beta/svc-shop-web.
	l.createService(lbService("shop", "web-beta", "teapot-lb.io/lb-beta", 9003, nil))
	l.waitLB("beta", "svc-shop-web-beta", "stored under beta", func(lb *pb.LoadBalancer) error {
		if lb == nil {
			return fmt.Errorf("not stored")
		}
		return nil
	})

	// beta's credential cannot call the admin API.
	conf := writeTenantAdminConf(t, l, betaCreds)
	out, err := exec.Command(l.c.bin, "tenant", "list", "--config", conf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "may not call") {
		t.Errorf("admin call with beta's credential: %v: %s, want it refused", err, out)
	} else {
		t.Logf("admin API refused beta's credential: %s", strings.TrimSpace(string(out)))
	}

	// acme kept working throughout, unchanged.
	waitReaches(t, front, "acme-backend")
	after, err := l.lb("acme", "svc-shop-web")
	if err != nil || after == nil {
		t.Fatalf("acme's load balancer: %v", err)
	}
	if syncspec.Version(after) != syncspec.Version(before) || after.GetStatus().GetAddress() != vip ||
		after.GetMeta().GetGeneration() != before.GetMeta().GetGeneration() {
		t.Errorf("acme's load balancer changed during beta's attempts: generation %d -> %d, VIP %s -> %s",
			before.GetMeta().GetGeneration(), after.GetMeta().GetGeneration(), vip, after.GetStatus().GetAddress())
	}
}

// writeTenantAdminConf turns a tenant's agent credentials into an admin
// config file, as someone holding them would try.
func writeTenantAdminConf(t *testing.T, l *tenantLab, creds string) string {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(creds, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cfg := &client.Config{CA: read("ca.crt"), Cert: read("tls.crt"), Key: read("tls.key"), Servers: strings.Split(read("servers"), ",")}
	path := filepath.Join(l.c.dir, "tenant-admin.conf")
	if err := client.SaveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}
