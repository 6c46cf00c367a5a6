package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/teapot-lb/teapot-lb/scenarios/kubecluster"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The pod-routes lab: the BGP VIP lab's three LB hosts and fabric router,
// and two tenants, blue and green, each with a Kubernetes cluster of its
// own as light as the lab allows (a control plane and one node, the agent
// as a Deployment of one replica). Each node runs BIRD as Calico does
// (a blackhole static route for the node's pod block, exported with next
// hop the node over an eBGP session with every LB host), and nothing else
// routes to the pods: the LB hosts learn the pod ranges over the tenants'
// BGP sessions and dial the pods straight (pod mode, podsRoutable). Green's
// BIRD also announces blue's pod range, which every host drops.
type podRouteTenant struct {
	name     string
	asn      int
	cp       netip.Addr // the control plane's address
	node     netip.Addr
	pods     netip.Prefix // the node's pod range
	networks netip.Prefix // the tenant's pod networks (the cluster CIDR)
	services netip.Prefix
	// foreign are prefixes the node announces besides its own pods.
	foreign []netip.Prefix
}

var podRouteTenants = []podRouteTenant{
	{name: "blue", asn: 64601, cp: netip.MustParseAddr("192.0.2.30"), node: netip.MustParseAddr("192.0.2.31"),
		pods: netip.MustParsePrefix("10.244.1.0/24"), networks: netip.MustParsePrefix("10.244.0.0/16"),
		services: netip.MustParsePrefix("10.96.0.0/24")},
	{name: "green", asn: 64602, cp: netip.MustParseAddr("192.0.2.40"), node: netip.MustParseAddr("192.0.2.41"),
		pods: netip.MustParsePrefix("10.245.1.0/24"), networks: netip.MustParsePrefix("10.245.0.0/16"),
		services: netip.MustParsePrefix("10.97.0.0/24"),
		foreign:  []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}},
}

// podRoutesManifest is the pool and the tenants: pods routable, BGP peers
// their nodes; no route to any pod is written anywhere.
func podRoutesManifest() string {
	var b strings.Builder
	b.WriteString(`
kind: VIPPool
name: kube
cidrs: ["192.0.2.160-192.0.2.199"]
mode: arp
`)
	for _, tn := range podRouteTenants {
		fmt.Fprintf(&b, `---
kind: Tenant
name: %s
networks: [%s/32, %s]
domains: [%s.example]
pools: [kube]
podsRoutable: true
quotas: { loadBalancers: 10, addresses: 10 }
bgp: { asn: %d, peers: [%s] }
`, tn.name, tn.node, tn.networks, tn.name, tn.asn, tn.node)
	}
	return b.String()
}

// calicoBird is a node's BIRD configuration in the style Calico's
// calico-node writes: the node's IPAM block as a blackhole static route,
// an export filter of the IP pools, and a session with every LB host,
// next hop self.
func calicoBird(dir string, tn podRouteTenant, lbs []*lbHost) string {
	var b strings.Builder
	fmt.Fprintf(&b, "log %q all;\nrouter id %s;\nprotocol device { scan time 10; }\n", filepath.Join(dir, "bird.log"), tn.node)
	fmt.Fprintf(&b, "protocol static {\n  ipv4;\n  route %s blackhole;\n", tn.pods)
	for _, p := range tn.foreign {
		fmt.Fprintf(&b, "  route %s blackhole;\n", p)
	}
	b.WriteString("}\nfilter calico_export_to_bgp_peers {\n")
	for _, p := range append([]netip.Prefix{tn.networks}, tn.foreign...) {
		fmt.Fprintf(&b, "  if ( net ~ %s ) then { accept; }\n", p)
	}
	fmt.Fprintf(&b, `  reject;
}
template bgp bgp_template {
  local %s as %d;
  ipv4 { import none; export filter calico_export_to_bgp_peers; next hop self; };
  graceful restart;
  connect delay time 1; connect retry time 1; error wait time 1, 2;
}
`, tn.node, tn.asn)
	for _, n := range lbs {
		fmt.Fprintf(&b, "protocol bgp Node_%s from bgp_template { neighbor %s as %d; }\n",
			strings.ReplaceAll(n.ip4.String(), ".", "_"), n.ip4, labASN)
	}
	return b.String()
}

// podRouteCluster is one tenant's running cluster.
type podRouteCluster struct {
	podRouteTenant
	*kubeLab
	cpHost   *netlab.Host
	nodeHost *netlab.Host
	bird     *netlab.Process
	vip      netip.Addr
}

// startBird starts the node's BIRD.
func (c *podRouteCluster) startBird(t *testing.T) {
	t.Helper()
	c.bird = startCalicoBird(t, c.dir, c.nodeHost, c.podRouteTenant, c.lbs)
}

// startCalicoBird starts BIRD on a node's host with calicoBird's
// configuration, its files in dir; the test fails if it does not start.
func startCalicoBird(t *testing.T, dir string, node *netlab.Host, tn podRouteTenant, lbs []*lbHost) *netlab.Process {
	t.Helper()
	conf := filepath.Join(dir, "bird.conf")
	sock := filepath.Join(dir, "bird.ctl")
	if err := os.WriteFile(conf, []byte(calicoBird(dir, tn, lbs)), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := node.Start(filepath.Join(dir, "bird.out"), nil, "bird", "-f", "-c", conf, "-s", sock, "-P", filepath.Join(dir, "bird.pid"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s's BIRD log ----\n%s", tn.name, tail(filepath.Join(dir, "bird.log"), 40))
		}
	})
	waitFor(t, 10*time.Second, tn.name+"'s BIRD to start", func() error {
		if !p.Running() {
			return errStop(fmt.Errorf("bird exited: %s", tail(filepath.Join(dir, "bird.out"), 20)))
		}
		_, err := os.Stat(sock)
		return err
	})
	return p
}

// podIngress creates a ClusterIP Service for the pods of app and an
// Ingress of teapot-lb's class routing host to it, and returns the
// Ingress's VIP.
func (c *podRouteCluster) podIngress(t *testing.T, ns, app, host string) netip.Addr {
	t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-internal"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	if _, err := c.k.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptrTo("teapot-lb"),
			Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &pathType,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: svc.Name, Port: networkingv1.ServiceBackendPort{Number: 80}}},
				}}},
			}}},
		},
	}
	if _, err := c.k.Client.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip netip.Addr
	waitFor(t, kubeLabTimeout, "a VIP in the Ingress's status", func() error {
		ctx, cancel := c.ctx()
		defer cancel()
		got, err := c.k.Client.NetworkingV1().Ingresses(ns).Get(ctx, ing.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, in := range got.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				vip = a
				return nil
			}
		}
		return errors.New("no VIP in status")
	})
	return vip
}

// annotateService sets (value "": removes) an annotation of a Service.
func (c *podRouteCluster) annotateService(t *testing.T, ns, name, key, value string) {
	t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	svc, err := c.k.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	if value == "" {
		delete(svc.Annotations, key)
	} else {
		svc.Annotations[key] = value
	}
	if _, err := c.k.Client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podRoutes returns every IPv4 route of h's main table but the default
// one whose destination overlaps p: prefix -> "via GW proto N". (The
// default route goes to the fabric router, which knows no pod.)
func podRoutes(h *netlab.Host, p netip.Prefix) (map[string]string, error) {
	got := map[string]string{}
	err := h.Do(func() error {
		rs, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				continue
			}
			dst, err := netip.ParsePrefix(r.Dst.String())
			if err != nil || !dst.Overlaps(p) {
				continue
			}
			got[dst.String()] = fmt.Sprintf("via %v proto %d", r.Gw, r.Protocol)
		}
		return nil
	})
	return got, err
}

// TestKubeTenantBGP: two tenant clusters whose nodes announce their pod
// ranges with BIRD; every LB host installs each range (protocol 196) with
// the node as next hop, and nothing else; each tenant's Service of type
// LoadBalancer is served in pod mode, the LB hosts dialling the pods
// straight (the pod sees an LB host's address, no node's, and no PROXY
// protocol header), and with teapot-lb.io/client-source on the Service
// (its node routing the client via the VIP's holder, as the tenant must)
// the client's own address; a range one tenant announces for the other's
// pods is dropped and listed by explain tenant.
func TestKubeTenantBGP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts two Kubernetes clusters, three LB hosts and a router")
	}
	needKubeTools(t)
	needTools(t, "bird", "birdc")
	parallelScenarioTaking(t, 120*time.Second)
	bins := kubeBinaries(t)
	v := newVIPLab(t, labOptions{bgp: true, teapot: true, misses: kubeLabMisses})
	began := time.Now()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(v.dir, "kube")
	must(os.MkdirAll(dir, 0o755))
	manifest := filepath.Join(dir, "tenants.yaml")
	must(os.WriteFile(manifest, []byte(podRoutesManifest()), 0o644))
	if _, err := v.cli(v.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	images := (&kubeLab{vipLab: v, dir: dir}).buildImages()

	var clusters []*podRouteCluster
	for _, tn := range podRouteTenants {
		c := &podRouteCluster{podRouteTenant: tn,
			kubeLab: &kubeLab{vipLab: v, dir: filepath.Join(dir, tn.name), start: began, tenant: tn.name, agentReplicas: 1}}
		must(os.MkdirAll(c.dir, 0o755))
		cp, err := v.lab.AddHost("cp"+tn.name[:1], tn.cp.String()+"/24")
		must(err)
		c.nodeHost, err = v.lab.AddHost("n"+tn.name[:1], tn.node.String()+"/24")
		must(err)
		c.cpHost = cp
		clusters = append(clusters, c)
	}
	// The clusters start together: most of it is waiting.
	var wg sync.WaitGroup
	errs := make([]error, len(clusters))
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			k, err := kubecluster.Start(ctx, kubecluster.Config{
				Bins: bins, Dir: c.dir,
				ControlPlane: c.cpHost, ControlAddr: c.cp,
				Nodes:       []kubecluster.NodeConfig{{Name: "node-" + c.name, Host: c.nodeHost, Addr: c.node, PodCIDR: c.pods}},
				ServiceCIDR: c.services, ClusterCIDR: c.networks,
				Images: images, PauseImage: "teapot.test/pause:" + kubeImageTag,
				Env: os.Environ(),
			})
			c.k = k
			if err != nil {
				errs[i] = fmt.Errorf("start %s's cluster: %w", c.name, err)
			}
		}()
	}
	wg.Wait()
	for _, c := range clusters {
		t.Cleanup(func() {
			if t.Failed() {
				logKubeCluster(t, c.dir)
			}
			if c.k == nil {
				return
			}
			if err := c.k.Close(); err != nil {
				t.Errorf("close %s's cluster: %v", c.name, err)
			}
		})
	}
	must(errors.Join(errs...))
	t.Logf("two tenant clusters (a control plane and a node each) Ready %s after the LB hosts", time.Since(began).Round(100*time.Millisecond))
	for _, c := range clusters {
		c.installAgent()
		c.createNamespace("shop")
		c.echoDeployment("shop", "echo", 1, "")
	}
	for _, c := range clusters {
		c.waitDeployment("shop", "echo", 1)
		c.vip = c.createService(lbServiceFor("shop", "web", "echo", corev1.ProtocolTCP, 80))
	}
	t.Logf("agents running and Services given VIPs %s after the LB hosts", time.Since(began).Round(100*time.Millisecond))

	// Nothing routes to the pods yet: no host has a route to a pod range,
	// and the VIPs reach no pod.
	for _, c := range clusters {
		for _, n := range v.lbs {
			got, err := podRoutes(n.host, c.networks)
			must(err)
			if len(got) > 0 {
				t.Fatalf("%s has routes to %s's pods before any announcement: %v", n.id, c.name, got)
			}
		}
		if a, err := echoHTTP(v.client, netip.AddrPortFrom(c.vip, 80), time.Second); err == nil {
			t.Fatalf("%s's VIP answered (%s) before its pods were routable", c.name, a.pod)
		}
	}

	// The nodes' BIRDs start: every host installs each pod range via its
	// node, and each VIP is answered by its tenant's pod.
	announced := time.Now()
	for _, c := range clusters {
		c.startBird(t)
	}
	// Each host's install and each VIP's first answer are timed from
	// there, all polled in one loop.
	installedAt := map[string]time.Duration{}
	answers := map[string]echoAnswer{}
	servedAt := map[string]time.Duration{}
	waitFor(t, kubeLabTimeout, "every host installs every tenant's pod range, and each tenant's pod answers through its VIP", func() error {
		var errs []error
		for _, c := range clusters {
			want := fmt.Sprintf("via %s proto %d", c.node, tenantRouteProto)
			for _, n := range v.lbs {
				key := n.id + " " + c.name
				if _, ok := installedAt[key]; ok {
					continue
				}
				got, err := podRoutes(n.host, c.pods)
				if err != nil {
					return err
				}
				if got[c.pods.String()] != want {
					errs = append(errs, fmt.Errorf("%s has %v, want %s %s", key, got, c.pods, want))
					continue
				}
				installedAt[key] = time.Since(announced)
			}
			if _, ok := answers[c.name]; ok {
				continue
			}
			a, err := echoHTTP(v.client, netip.AddrPortFrom(c.vip, 80), time.Second)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s through %s: %w", c.name, c.vip, err))
				continue
			}
			answers[c.name], servedAt[c.name] = a, time.Since(announced)
		}
		return errors.Join(errs...)
	})
	var installs []string
	for _, c := range clusters {
		for _, n := range v.lbs {
			key := n.id + " " + c.name
			installs = append(installs, fmt.Sprintf("%s %s", key, installedAt[key].Round(time.Millisecond)))
		}
	}
	t.Logf("after the nodes' BIRDs started: pod ranges installed (%s), first answers from the pods through their VIPs after %s (blue) and %s (green)",
		strings.Join(installs, ", "), servedAt["blue"].Round(time.Millisecond), servedAt["green"].Round(time.Millisecond))

	t.Run("the pod is dialled straight from an LB host, without PROXY protocol", func(t *testing.T) {
		hosts := map[string]bool{}
		for _, n := range v.lbs {
			hosts[n.ip4.String()] = true
		}
		for _, c := range clusters {
			a := answers[c.name]
			if !strings.HasPrefix(a.pod, "echo-") {
				t.Errorf("%s's VIP answered by %q, want an echo pod", c.name, a.pod)
			}
			peer, err := netip.ParseAddrPort(a.client)
			if err != nil || !hosts[peer.Addr().String()] {
				t.Errorf("%s's pod saw the connection from %q, want an LB host's own address (no node's hop)", c.name, a.client)
			}
			if a.proxy != "" {
				t.Errorf("%s's pod got a PROXY protocol header %q", c.name, a.proxy)
			}
		}
	})

	t.Run("a Service with teapot-lb.io/client-source gives the pod the client's own address at L4, without PROXY protocol", func(t *testing.T) {
		c := clusters[0]
		client := netip.MustParseAddr("192.0.2.100")
		holder := v.waitHolder(c.vip, settleTimeout)
		// The tenant routes its clients via the LB host that dials (the
		// arp VIP's holder), as it must for the pod's replies to reach
		// the socket they belong to.
		if err := c.nodeHost.IP("route", "add", client.String()+"/32", "via", holder.ip4.String()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.nodeHost.IP("route", "del", client.String()+"/32") }()
		peerIs := func(want func(netip.Addr) bool, what string) echoAnswer {
			var a echoAnswer
			waitFor(t, kubeLabTimeout, "the pod to see "+what+" through "+c.vip.String(), func() (err error) {
				if a, err = echoHTTP(v.client, netip.AddrPortFrom(c.vip, 80), 2*time.Second); err != nil {
					return err
				}
				if peer, err := netip.ParseAddrPort(a.client); err != nil || !want(peer.Addr()) {
					return fmt.Errorf("the pod saw %q", a.client)
				}
				return nil
			})
			return a
		}
		began := time.Now()
		c.annotateService(t, "shop", "web", "teapot-lb.io/client-source", "true")
		a := peerIs(func(a netip.Addr) bool { return a == client }, "the client's address")
		t.Logf("the pod saw the client %s through %s %s after the annotation", a.client, holder.id, time.Since(began).Round(100*time.Millisecond))
		if a.proxy != "" {
			t.Errorf("the pod got a PROXY protocol header %q", a.proxy)
		}
		c.annotateService(t, "shop", "web", "teapot-lb.io/client-source", "")
		peerIs(func(a netip.Addr) bool { return slices.ContainsFunc(v.lbs, func(n *lbHost) bool { return n.ip4 == a }) }, "an LB host's address again")
	})

	t.Run("an Ingress in pod mode gives the pod the client's own address, without PROXY protocol", func(t *testing.T) {
		c := clusters[0]
		vip := c.podIngress(t, "shop", "echo", c.name+".example")
		a := c.waitEcho("an answer for "+c.name+".example through "+vip.String(), func() (echoAnswer, error) {
			return echoHTTPHost(v.client, netip.AddrPortFrom(vip, 80), c.name+".example", 2*time.Second)
		})
		peer, err := netip.ParseAddrPort(a.client)
		if err != nil || !slices.ContainsFunc(v.lbs, func(n *lbHost) bool { return n.ip4 == peer.Addr() }) {
			t.Errorf("the pod saw the connection from %q, want an LB host's own address", a.client)
		}
		if a.fwd != "192.0.2.100" || a.proxy != "" {
			t.Errorf("the pod got X-Forwarded-For %q and PROXY header %q, want the client's address 192.0.2.100 and none", a.fwd, a.proxy)
		}
	})

	t.Run("only learned routes reach the pods: no static route on any host", func(t *testing.T) {
		for _, c := range clusters {
			for _, n := range v.lbs {
				got, err := podRoutes(n.host, c.networks)
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{c.pods.String(): fmt.Sprintf("via %s proto %d", c.node, tenantRouteProto)}
				if !mapsEqual(got, want) {
					t.Errorf("%s's routes to %s's pods: %v, want %v alone", n.id, c.name, got, want)
				}
			}
		}
	})

	t.Run("a route one tenant announces for the other's pods is dropped", func(t *testing.T) {
		for _, c := range clusters {
			for _, p := range c.foreign {
				var out string
				waitFor(t, settleTimeout, "explain tenant "+c.name+" lists "+p.String()+" dropped", func() error {
					var err error
					if out, err = v.cli(v.lbs[0], "explain", "tenant", c.name); err != nil {
						return err
					}
					if !regexpLine(out, strings.ReplaceAll(p.String(), ".", `\.`)+`\s.*dropped: outside the tenant's networks`) {
						return fmt.Errorf("not listed dropped:\n%s", out)
					}
					return nil
				})
				for _, n := range v.lbs {
					waitFor(t, settleTimeout, n.id+"'s /metrics counts "+c.name+"'s dropped route", func() error {
						s, err := v.scrape(n)
						if err != nil {
							return err
						}
						for result, want := range map[string]int{"accepted": 1, "dropped": len(c.foreign)} {
							if got := sum(s, "teapot_lb_tenant_bgp_routes", map[string]string{"tenant": c.name, "result": result}); got != float64(want) {
								return fmt.Errorf("%v routes %s, want %d", got, result, want)
							}
						}
						return nil
					})
				}
			}
		}
		// Every host still reaches blue's pods through blue's node alone.
		for _, n := range v.lbs {
			got, err := podRoutes(n.host, netip.MustParsePrefix("10.244.1.0/24"))
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{"10.244.1.0/24": fmt.Sprintf("via %s proto %d", clusters[0].node, tenantRouteProto)}; !mapsEqual(got, want) {
				t.Errorf("%s's routes to blue's pods: %v, want %v", n.id, got, want)
			}
		}
		a, err := echoHTTP(v.client, netip.AddrPortFrom(clusters[0].vip, 80), 2*time.Second)
		if err != nil || a.pod != answers["blue"].pod {
			t.Errorf("blue's VIP answered %q (%v), want its pod %s", a.pod, err, answers["blue"].pod)
		}
	})
	t.Logf("whole scenario %s", time.Since(began).Round(100*time.Millisecond))
}

func TestParseEcho(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want echoAnswer
	}{
		{`pod=echo-1 client=192.0.2.11:40000 fwd=192.0.2.100 proxy=""`, echoAnswer{pod: "echo-1", client: "192.0.2.11:40000", fwd: "192.0.2.100"}},
		{`pod=echo-1 client=192.0.2.11:40000 fwd= proxy="PROXY TCP4 192.0.2.100 192.0.2.200 41234 80"` + "\n",
			echoAnswer{pod: "echo-1", client: "192.0.2.11:40000", proxy: "PROXY TCP4 192.0.2.100 192.0.2.200 41234 80"}},
		// What the echo of an earlier tree answered.
		{`pod=echo-1 client=192.0.2.11:40000 proxy=""`, echoAnswer{pod: "echo-1", client: "192.0.2.11:40000"}},
	} {
		got, err := parseEcho(tc.line)
		if err != nil || got != tc.want {
			t.Errorf("parseEcho(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
}
