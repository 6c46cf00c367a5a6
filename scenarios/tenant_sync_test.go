package scenarios

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// checkOneLeader checks that the Lease names one of the agents and that
// only that one leads.
func checkOneLeader(t *testing.T, l *tenantLab, agents []*proc) *proc {
	t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	lease, err := l.k.client.CoordinationV1().Leases("teapot-lb-system").Get(ctx, "teapot-lb-agent", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("the agents' Lease: %v %v", lease, err)
	}
	var leading []string
	for _, a := range agents {
		if data, err := os.ReadFile(a.logPath); err == nil && strings.Contains(string(data), "msg=leading") {
			leading = append(leading, a.name)
		}
	}
	if len(leading) != 1 || leading[0] != *lease.Spec.HolderIdentity {
		t.Fatalf("leading: %v, Lease holder %s; want the holder alone", leading, *lease.Spec.HolderIdentity)
	}
	for _, a := range agents {
		if a.name == leading[0] {
			return a
		}
	}
	return nil
}

// seedTenant creates the pool public of the lab's VIPs and a tenant whose
// pods are routable, and returns its credentials directory.
func (l *tenantLab) seedTenant(name, domain string, networks ...string) string {
	l.t.Helper()
	if out, _ := l.c.cli(l.c.live()[0], "pool", "list"); !strings.Contains(out, "public") {
		l.cliOK("pool", "create", "public", "--cidr", l.vips.String(), "--mode", "static")
	}
	l.cliOK("tenant", "create", name, "--domains", domain, "--networks", strings.Join(networks, ","), "--pools", "public", "--pods-routable")
	return l.credentials(name)
}

func TestTenantAgentAgainstKubeAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts etcd, kube-apiserver and a three-node cluster")
	}
	parallelScenarioTaking(t, 15*time.Second)
	l := newTenantLab(t, agentLab)
	pods := newPodNet(t, 2)
	creds := l.seedTenant("acme", "acme.example", pods.network())
	probes := freeAddrs(t, 2)
	agents := []*proc{
		l.agent("agent-1", creds, "--health-addr", probes[0]),
		l.agent("agent-2", creds, "--health-addr", probes[1]),
	}

	// The pool has an IPv6 address too (::1, on loopback like the rest),
	// so that the dual-stack Service below gets a VIP of each family. No
	// other test binds port 8080 of ::1, and it lies below the kernel's
	// range for ports picked free (32768 and up), so it is this test's own.
	{
		ctx, cancel := l.ctx()
		_, err := l.conn.Admin.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{l.vips.String(), "::1/128"}, Mode: "static"})}})
		cancel()
		if err != nil {
			t.Fatalf("add ::1 to the pool: %v", err)
		}
	}

	const port = 8080
	b2, b3 := pods.addr(0), pods.addr(1)
	startPodBackend(t, pods, "backend-2", b2, port)
	startPodBackend(t, pods, "backend-3", b3, port)
	web := lbService("shop", "web", "teapot-lb.io/lb", 8080, nil)
	preferDual := corev1.IPFamilyPolicyPreferDualStack
	web.Spec.IPFamilyPolicy = &preferDual // the kube cluster is IPv4 only: the LB's VIPs are both families all the same
	l.createService(web)
	l.putSlice(endpointSlice("shop", "web-1", "web", port, b2))

	vip, svc := l.waitServiceVIP("shop", "web") // from the lab's pool
	if in := svc.Status.LoadBalancer.Ingress; len(in) != 2 || in[1].IP != "::1" {
		t.Fatalf("status.loadBalancer.ingress %v; want the IPv4 VIP and ::1 (PreferDualStack)", in)
	}
	if m := svc.Status.LoadBalancer.Ingress[0].IPMode; m == nil || *m != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ipMode = %v, want VIP (no PROXY protocol, no termination)", m)
	}
	lb := l.waitLB("acme", "svc-shop-web", "one member", hasMembers("web", fmt.Sprintf("%s:%d", b2, port)))
	if lb.GetStatus().GetAddress() != vip {
		t.Errorf("the LB cluster holds VIP %s, the Service's status says %s", lb.GetStatus().GetAddress(), vip)
	}
	l.waitEvent("shop", "Service", "web", "VIPAssigned", vip+" and ::1")
	front, front6 := fmt.Sprintf("%s:8080", vip), "[::1]:8080"
	waitReaches(t, front, "backend-2")
	waitReaches(t, front6, "backend-2")
	t.Logf("Service shop/web got VIP %s; HTTP over its TCP listener reaches the backend", vip)
	leader := checkOneLeader(t, l, agents)
	// The probes: both replicas live; the leader ready because it is
	// connected, the standby because its caches are warm.
	for i, a := range agents {
		want := "standby, caches synced"
		if a == leader {
			want = "leading, connected to the LB cluster"
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body := probe(t, probes[i], path)
			if code != http.StatusOK || (path == "/readyz" && body != want) {
				t.Errorf("%s %s: %d %q, want 200 %q", a.name, path, code, body, want)
			}
		}
	}

	// Scaling the endpoints changes the members.
	l.putSlice(endpointSlice("shop", "web-1", "web", int32(port), b2, b3))
	l.waitLB("acme", "svc-shop-web", "two members", hasMembers("web", fmt.Sprintf("%s:%d", b2, port), fmt.Sprintf("%s:%d", b3, port)))
	waitReaches(t, front, "backend-2", "backend-3")
	l.putSlice(endpointSlice("shop", "web-1", "web", port, b3))
	l.waitLB("acme", "svc-shop-web", "scaled down", hasMembers("web", fmt.Sprintf("%s:%d", b3, port)))

	// An Ingress of the manifests' class gets a VIP too.
	l.k.applyManifest("40-ingressclass.yaml")
	l.createIngress("shop", "main", "teapot-lb", "shop.acme.example", "web")
	ing := l.waitLB("acme", "ing-shop-main", "routes to shop/web", func(lb *pb.LoadBalancer) error {
		if lb == nil || len(lb.GetRoutes()) != 1 || lb.GetRoutes()[0].GetHost() != "shop.acme.example" {
			return fmt.Errorf("routes %v", lb.GetRoutes())
		}
		return hasMembers("web-web", fmt.Sprintf("%s:%d", b3, port))(lb)
	})
	waitFor(t, syncTimeout, "VIP in the Ingress status", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		got, err := l.k.client.NetworkingV1().Ingresses("shop").Get(ctx, "main", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := got.Status.LoadBalancer.Ingress; len(st) != 1 || st[0].IP != ing.GetStatus().GetAddress() {
			return fmt.Errorf("status %v, want %s", st, ing.GetStatus().GetAddress())
		}
		return nil
	})

	// HTTP through the L7 proxy: the Ingress's VIP routes its host.
	ingFront := ing.GetStatus().GetAddress() + ":80"
	waitFor(t, syncTimeout, "HTTP to the Ingress VIP reaches the backend", func() error {
		name, err := httpNameFor(ingFront, "shop.acme.example")
		if err != nil {
			return err
		}
		if name != "backend-3" {
			return fmt.Errorf("answered by %s, want backend-3", name)
		}
		return nil
	})
	t.Logf("HTTP for shop.acme.example through the Ingress VIP %s reaches the backend", ingFront)

	// The leading replica dies: the other takes over the Lease and the
	// next change arrives through it.
	leader.kill()
	l.putSlice(endpointSlice("shop", "web-1", "web", port, b2))
	l.waitLB("acme", "svc-shop-web", "a change after the leading agent died", hasMembers("web", fmt.Sprintf("%s:%d", b2, port)))
	t.Logf("agent %s killed; the other replica carried the next change", leader.name)

	// Deleting the Service frees its VIP: the next Service gets it.
	ctx, cancel := l.ctx()
	defer cancel()
	if err := l.k.client.CoreV1().Services("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l.waitLB("acme", "svc-shop-web", "removed", lbGone)
	l.createService(lbService("shop", "next", "teapot-lb.io/lb", 8081, nil))
	next, _ := l.waitServiceVIP("shop", "next")
	if next != vip {
		t.Errorf("the next Service got %s, want the freed VIP %s", next, vip)
	}
	waitFor(t, syncTimeout, "the old listeners to close", func() error {
		for _, f := range []string{front, front6} {
			if _, err := httpName(f); err == nil {
				return fmt.Errorf("%s still answering", f)
			}
		}
		return nil
	})
}

// probe GETs one of the agent's health paths and returns code and body.
func probe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}
