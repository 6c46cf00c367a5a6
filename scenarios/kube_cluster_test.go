package scenarios

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/scenarios/kubecluster"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The tenant cluster lab: the VIP lab's three LB hosts and client on the
// bridge 192.0.2.0/24, plus a Kubernetes control plane (192.0.2.30) and
// two nodes (192.0.2.31, .32) whose pods live in 198.51.100.0/26 and
// 198.51.100.64/26. ClusterIPs come from 203.0.113.0/24; the tenant's
// VIPs from 192.0.2.160-199.
const (
	kubeTenant     = "kube"
	kubeImageTag   = "1"
	kubeLabTimeout = 3 * time.Minute
)

const kubeLabManifest = `
kind: VIPPool
name: kube
cidrs: ["192.0.2.160-192.0.2.199"]
mode: arp
---
kind: Tenant
name: kube
networks: [192.0.2.31/32, 192.0.2.32/32, 198.51.100.0/25]
domains: [shop.example]
pools: [kube]
quotas: { loadBalancers: 40, addresses: 40 }
`

// kubeLab is a running tenant cluster next to a running VIP lab.
type kubeLab struct {
	*vipLab
	k     *kubecluster.Cluster
	dir   string
	start time.Time
}

// needKubeTools skips (or fails under CI) when the node tools are missing.
func needKubeTools(tb testing.TB) {
	tb.Helper()
	needTools(tb)
	for _, t := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "iptables"} {
		if _, err := exec.LookPath(t); err != nil {
			unavailable(tb, "tenant cluster: %s is not installed (Debian packages containerd, runc, util-linux, iptables)", t)
		}
	}
	for _, t := range []string{"pebble", "pebble-challtestsrv"} {
		if _, err := exec.LookPath(t); err != nil {
			unavailable(tb, "tenant cluster: %s is not installed (Debian package pebble): the Ingress's certificate comes from a real ACME server", t)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/ptp"); err != nil {
		unavailable(tb, "tenant cluster: /usr/lib/cni/ptp is missing (Debian package containernetworking-plugins)")
	}
}

// newKubeLab starts the LB hosts, then the tenant cluster with its images
// imported, then installs the agent from packaging/k8s as a Deployment.
func newKubeLab(t *testing.T) *kubeLab {
	t.Helper()
	needKubeTools(t)
	bins := kubeBinaries(t)
	l := &kubeLab{vipLab: newVIPLab(t, labOptions{teapot: true, acme: true}), start: time.Now()}
	l.dir = filepath.Join(l.vipLab.dir, "kube")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(l.dir, 0o755))
	manifest := filepath.Join(l.dir, "tenant.yaml")
	must(os.WriteFile(manifest, []byte(kubeLabManifest), 0o644))
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	images := l.buildImages()
	cp, err := l.lab.AddHost("kcp", "192.0.2.30/24")
	must(err)
	var nodes []kubecluster.NodeConfig
	for i := range 2 {
		name := fmt.Sprintf("node%d", i+1)
		addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(31 + i)})
		h, err := l.lab.AddHost(name, addr.String()+"/24")
		must(err)
		nodes = append(nodes, kubecluster.NodeConfig{Name: name, Host: h, Addr: addr,
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(64 * i)}), 26)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	k, err := kubecluster.Start(ctx, kubecluster.Config{
		Bins: bins, Dir: l.dir,
		ControlPlane: cp, ControlAddr: netip.MustParseAddr("192.0.2.30"),
		Nodes:       nodes,
		ServiceCIDR: netip.MustParsePrefix("203.0.113.0/24"),
		ClusterCIDR: netip.MustParsePrefix("198.51.100.0/25"),
		Images:      images, PauseImage: "teapot.test/pause:" + kubeImageTag,
		Env: os.Environ(),
	})
	if k != nil {
		l.k = k
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(l.dir, "*.log"))
			more, _ := filepath.Glob(filepath.Join(l.dir, "*", "*.log"))
			pods, _ := filepath.Glob(filepath.Join(l.dir, "*", "pod-logs", "*", "*", "*.log"))
			for _, p := range append(append(logs, more...), pods...) {
				t.Logf("---- %s, last 30 lines ----\n%s", p, tail(p, 30))
			}
		}
		if l.k == nil {
			return
		}
		if err := l.k.Close(); err != nil {
			t.Errorf("close the tenant cluster: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start the tenant cluster: %v", err)
	}
	t.Logf("tenant cluster (control plane and 2 nodes) Ready in %s", time.Since(began).Round(100*time.Millisecond))
	l.installAgent()
	return l
}

// buildImages builds pause, echo and a static teapot-lb and packs each as
// an image tarball.
func (l *kubeLab) buildImages() []string {
	l.tb.Helper()
	root, err := moduleRoot()
	if err != nil {
		l.tb.Fatal(err)
	}
	began := time.Now()
	var tarballs []string
	for _, img := range []struct {
		name, pkg string
		entry     []string
		user      string
	}{
		{"pause", "./scenarios/images/pause", []string{"/pause"}, ""},
		{"echo", "./scenarios/images/echo", []string{"/echo"}, "65532:65532"},
		// As packaging/image builds it: the entrypoint is `teapot-lb agent`.
		{"teapot-lb", ".", []string{"/teapot-lb", "agent"}, "65532:65532"},
	} {
		bin := filepath.Join(l.dir, img.name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, img.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			l.tb.Fatalf("build %s: %v\n%s", img.pkg, err, out)
		}
		out := filepath.Join(l.dir, img.name+".tar")
		if err := kubecluster.WriteImage(kubecluster.Image{
			Ref: "teapot.test/" + img.name + ":" + kubeImageTag, Binary: bin,
			Entrypoint: img.entry, User: img.user,
		}, out); err != nil {
			l.tb.Fatal(err)
		}
		tarballs = append(tarballs, out)
	}
	l.tb.Logf("images built in %s", time.Since(began).Round(100*time.Millisecond))
	return tarballs
}

func (l *kubeLab) kube() *kube { return &kube{tb: l.tb, client: l.k.Client} }

func (l *kubeLab) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cliTimeout)
}

// installAgent applies packaging/k8s with the Secret that `teapot-lb
// tenant credentials` prints and the agent's image from this tree, and
// waits for both replicas to be Ready and one to hold the Lease.
func (l *kubeLab) installAgent() {
	t := l.tb
	t.Helper()
	k := l.kube()
	k.applyManifest("00-namespace.yaml")
	k.applyManifest("10-rbac.yaml")
	k.applyManifest("40-ingressclass.yaml")
	out, err := l.cli(l.lbs[0], "tenant", "credentials", kubeTenant, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	if err := json.Unmarshal([]byte(out), &secret); err != nil {
		t.Fatalf("tenant credentials -o json: %v", err)
	}
	secret.Namespace = "teapot-lb-system"
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := l.k.Client.CoreV1().Secrets(secret.Namespace).Create(ctx, &secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the credentials Secret: %v", err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "packaging", "k8s", "30-deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &dep); err != nil {
		t.Fatalf("30-deployment.yaml: %v", err)
	}
	for i := range dep.Spec.Template.Spec.Containers {
		c := &dep.Spec.Template.Spec.Containers[i]
		c.Image = "teapot.test/teapot-lb:" + kubeImageTag
		c.ImagePullPolicy = corev1.PullNever
		c.Args = append(c.Args, "--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms")
	}
	if _, err := l.k.Client.AppsV1().Deployments(dep.Namespace).Create(ctx, &dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the agent Deployment: %v", err)
	}
	l.waitDeployment(dep.Namespace, dep.Name, 2)
	waitFor(t, kubeLabTimeout, "an agent replica holds the Lease", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		lease, err := l.k.Client.CoordinationV1().Leases(dep.Namespace).Get(ctx, "teapot-lb-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || !strings.HasPrefix(*lease.Spec.HolderIdentity, dep.Name) {
			return fmt.Errorf("holder %v", lease.Spec.HolderIdentity)
		}
		return nil
	})
}

// waitDeployment waits until want replicas of a Deployment are Ready.
func (l *kubeLab) waitDeployment(ns, name string, want int32) {
	l.tb.Helper()
	waitFor(l.tb, kubeLabTimeout, fmt.Sprintf("%d Ready replicas of %s/%s", want, ns, name), func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		d, err := l.k.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != want || d.Status.UpdatedReplicas != want || d.Status.Replicas != want {
			return fmt.Errorf("ready %d, updated %d, replicas %d", d.Status.ReadyReplicas, d.Status.UpdatedReplicas, d.Status.Replicas)
		}
		return nil
	})
}

// echoDeployment creates a Deployment of echo pods, on node if it is not
// "".
func (l *kubeLab) echoDeployment(ns, name string, replicas int32, node string) {
	l.tb.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  nodeSelector(node),
					TerminationGracePeriodSeconds: ptrTo(int64(10)),
					Containers: []corev1.Container{{
						Name: "echo", Image: "teapot.test/echo:" + kubeImageTag, ImagePullPolicy: corev1.PullNever,
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{
							{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
							{Name: "udp", ContainerPort: 8081, Protocol: corev1.ProtocolUDP},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := l.k.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		l.tb.Fatalf("create Deployment %s/%s: %v", ns, name, err)
	}
}

func nodeSelector(node string) map[string]string {
	if node == "" {
		return nil
	}
	return map[string]string{"kubernetes.io/hostname": node}
}

// podNodes maps the names of the pods of app to their nodes.
func (l *kubeLab) podNodes(ns, app string) map[string]string {
	l.tb.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	pods, err := l.k.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		l.tb.Fatal(err)
	}
	m := map[string]string{}
	for _, p := range pods.Items {
		m[p.Name] = p.Spec.NodeName
	}
	return m
}

// createNamespace creates a namespace in the tenant cluster.
func (l *kubeLab) createNamespace(ns string) {
	l.tb.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := l.k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		l.tb.Fatal(err)
	}
}

// lbServiceFor is a Service type LoadBalancer of teapot-lb's class for
// the echo pods of app, on port to the pods' port of the same protocol.
func lbServiceFor(ns, name, app string, proto corev1.Protocol, port int32) *corev1.Service {
	target := intstr.FromString("http")
	if proto == corev1.ProtocolUDP {
		target = intstr.FromString("udp")
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptrTo("teapot-lb.io/lb"),
			Selector:          map[string]string{"app": app},
			Ports:             []corev1.ServicePort{{Name: strings.ToLower(string(proto)), Protocol: proto, Port: port, TargetPort: target}},
		},
	}
}

// createService creates svc and waits for a VIP in its status.
func (l *kubeLab) createService(svc *corev1.Service) netip.Addr {
	l.tb.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	if _, err := l.k.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		l.tb.Fatalf("create Service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	return l.waitVIP(svc.Namespace, svc.Name)
}

// waitVIP waits for the Service's status to carry a VIP.
func (l *kubeLab) waitVIP(ns, name string) netip.Addr {
	l.tb.Helper()
	var vip netip.Addr
	waitFor(l.tb, kubeLabTimeout, "a VIP in the status of "+ns+"/"+name, func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		s, err := l.k.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				vip = a
				return nil
			}
		}
		return fmt.Errorf("no VIP in status")
	})
	return vip
}

// echoAnswer is what an echo pod said.
type echoAnswer struct{ pod, client, proxy string }

func parseEcho(line string) (echoAnswer, error) {
	var a echoAnswer
	line = strings.TrimSpace(line)
	head, quoted, _ := strings.Cut(line, " proxy=")
	for _, f := range strings.Fields(head) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "pod":
			a.pod = v
		case "client":
			a.client = v
		}
	}
	if quoted != "" {
		p, err := strconv.Unquote(quoted)
		if err != nil {
			return a, fmt.Errorf("proxy field of %q: %v", line, err)
		}
		a.proxy = p
	}
	if a.pod == "" {
		return a, fmt.Errorf("not an echo answer: %q", line)
	}
	return a, nil
}

// echoHTTP sends one HTTP request from h to addr.
func echoHTTP(h *netlab.Host, addr netip.AddrPort, timeout time.Duration) (echoAnswer, error) {
	return echoHTTPHost(h, addr, "", timeout)
}

// echoHTTPHost sends one HTTP request for host from h to addr.
func echoHTTPHost(h *netlab.Host, addr netip.AddrPort, host string, timeout time.Duration) (echoAnswer, error) {
	return echoHTTPPath(h, addr, host, "/", timeout)
}

// echoVia asks the echo pod that addr reaches to send a request to to
// itself (an in-cluster client) and returns that request's answer.
func echoVia(h *netlab.Host, addr, to netip.AddrPort, timeout time.Duration) (echoAnswer, error) {
	return echoHTTPPath(h, addr, "", "/via?to="+to.String(), timeout)
}

// echoHTTPPath sends one HTTP request for host and path from h to addr.
func echoHTTPPath(h *netlab.Host, addr netip.AddrPort, host, path string, timeout time.Duration) (echoAnswer, error) {
	tr := &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr.String()+path, nil)
	if err != nil {
		return echoAnswer{}, err
	}
	req.Host = host
	resp, err := hc.Do(req)
	if err != nil {
		return echoAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return echoAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return echoAnswer{}, fmt.Errorf("%s: %s", resp.Status, firstLine(string(body)))
	}
	return parseEcho(string(body))
}

// echoHTTPS sends one HTTPS request for host from h to addr, trusting
// only roots, and returns the answer and the server's certificate.
func echoHTTPS(h *netlab.Host, addr netip.AddrPort, host string, roots *x509.CertPool, timeout time.Duration) (echoAnswer, *x509.Certificate, error) {
	tr := &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: host}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr.String()+"/", nil)
	if err != nil {
		return echoAnswer{}, nil, err
	}
	req.Host = host
	resp, err := hc.Do(req)
	if err != nil {
		return echoAnswer{}, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return echoAnswer{}, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return echoAnswer{}, nil, fmt.Errorf("%s: %s", resp.Status, firstLine(string(body)))
	}
	a, err := parseEcho(string(body))
	return a, resp.TLS.PeerCertificates[0], err
}

// echoUDP sends one datagram from h to addr and reads the answer.
func echoUDP(h *netlab.Host, addr netip.AddrPort, timeout time.Duration) (echoAnswer, error) {
	c, err := h.DialContext(context.Background(), "udp", addr.String())
	if err != nil {
		return echoAnswer{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return echoAnswer{}, err
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return echoAnswer{}, err
	}
	return parseEcho(string(buf[:n]))
}

// waitEcho waits until ask gets an answer from a pod.
func (l *kubeLab) waitEcho(what string, ask func() (echoAnswer, error)) echoAnswer {
	l.tb.Helper()
	var a echoAnswer
	waitFor(l.tb, kubeLabTimeout, what, func() (err error) {
		a, err = ask()
		return err
	})
	return a
}

// TestKubeClusterLoadBalancer runs a real tenant cluster (control plane,
// two nodes with containerd, kubelet and kube-proxy) beside three LB
// hosts, installs the agent from packaging/k8s as a Deployment of two
// replicas, and serves a client outside both through Services of type
// LoadBalancer, TCP and UDP, whose answers come from echo pods.
func TestKubeClusterLoadBalancer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a Kubernetes cluster and three LB hosts")
	}
	l := newKubeLab(t)
	l.createNamespace("shop")
	l.echoDeployment("shop", "echo", 2, "")
	l.waitDeployment("shop", "echo", 2)

	began := time.Now()
	vip := l.createService(lbServiceFor("shop", "web", "echo", corev1.ProtocolTCP, 80))
	inStatus := time.Since(began)
	a := l.waitEcho("an HTTP answer from a pod through "+vip.String(), func() (echoAnswer, error) {
		return echoHTTP(l.client, netip.AddrPortFrom(vip, 80), 2*time.Second)
	})
	t.Logf("TCP Service: VIP %s in status after %s, first answer (from %s) after %s",
		vip, inStatus.Round(time.Millisecond), a.pod, time.Since(began).Round(time.Millisecond))
	if !strings.HasPrefix(a.pod, "echo-") {
		t.Fatalf("answer from %q, want an echo pod", a.pod)
	}

	uvip := l.createService(lbServiceFor("shop", "dns", "echo", corev1.ProtocolUDP, 53))
	ua := l.waitEcho("a UDP answer from a pod through "+uvip.String(), func() (echoAnswer, error) {
		return echoUDP(l.client, netip.AddrPortFrom(uvip, 53), time.Second)
	})
	if !strings.HasPrefix(ua.pod, "echo-") {
		t.Fatalf("UDP answer from %q, want an echo pod", ua.pod)
	}
	t.Logf("UDP Service: VIP %s answered by %s", uvip, ua.pod)

	t.Run("ExternalTrafficPolicyLocal", l.testLocalTraffic)
	t.Run("IngressToClusterIP", l.testIngressClusterIP)
	t.Run("KillActiveAgent", func(t *testing.T) { l.testKillAgent(t, vip) })
	t.Run("StopTenantAPIServer", func(t *testing.T) { l.testStopAPIServer(t, vip) })
	t.Run("ScaleUnderTraffic", func(t *testing.T) { l.testScale(t, vip) })
	t.Run("ManyServices", l.testManyServices)
	t.Run("KillVIPHolder", func(t *testing.T) { l.testKillHolder(t, vip) })
	t.Run("DeleteFreesVIPs", l.testDelete)
	t.Logf("whole scenario %s", time.Since(l.start).Round(100*time.Millisecond))
}

// testLocalTraffic: a Service with externalTrafficPolicy: Local and PROXY
// protocol, its pods on node1 only. The LB health-checks kube-proxy's
// healthCheckNodePort, so node2 (no local pod: kube-proxy drops the
// traffic) gets none and every request is answered, from node1's pods,
// which see the client's own address in the PROXY header. Moved to node2,
// the traffic follows.
func (l *kubeLab) testLocalTraffic(t *testing.T) {
	l.echoDeployment("shop", "local", 2, "node1")
	l.waitDeployment("shop", "local", 2)
	svc := lbServiceFor("shop", "local", "local", corev1.ProtocolTCP, 80)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Annotations = map[string]string{"teapot-lb.io/proxy-protocol": "v1"}
	vip := l.createService(svc)
	ctx, cancel := l.ctx()
	got, err := l.k.Client.CoreV1().Services("shop").Get(ctx, "local", metav1.GetOptions{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.HealthCheckNodePort == 0 {
		t.Fatal("the Service has no healthCheckNodePort")
	}
	if in := got.Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IPMode == nil || *in[0].IPMode != corev1.LoadBalancerIPModeProxy {
		t.Fatalf("status %+v, want one address with ipMode Proxy", in)
	}
	to := netip.AddrPortFrom(vip, 80)
	ask := func() (echoAnswer, error) { return echoHTTP(l.client, to, 2*time.Second) }
	l.waitEcho("an answer through "+vip.String(), ask)
	onNode := func(node string) {
		t.Helper()
		// Until the LB's health checks agree, a request may still go to
		// the other node; then every request must be answered on node.
		waitFor(t, kubeLabTimeout, "20 answers in a row from pods on "+node, func() error {
			pods := l.podNodes("shop", "local")
			for i := range 20 {
				a, err := ask()
				if err != nil {
					return fmt.Errorf("request %d: %v", i, err)
				}
				if pods[a.pod] != node {
					return fmt.Errorf("request %d answered by %s on %q", i, a.pod, pods[a.pod])
				}
				if want := "PROXY TCP4 192.0.2.100 " + vip.String() + " "; !strings.HasPrefix(a.proxy, want) {
					return errStop(fmt.Errorf("PROXY header %q, want the client's address (%q...)", a.proxy, want))
				}
			}
			return nil
		})
	}
	began := time.Now()
	onNode("node1")
	t.Logf("ETP=Local: every answer from node1 %s after the VIP, with the client's address in the PROXY header", time.Since(began).Round(time.Millisecond))

	// ipMode: Proxy keeps kube-proxy from short-circuiting the VIP inside
	// the cluster: a pod's own request to the VIP goes out through the LB
	// too, and so carries a PROXY header (from the pod's node, which
	// masquerades it) that the pod expects.
	in := l.waitEcho("an in-cluster client's answer through "+vip.String(), func() (echoAnswer, error) {
		return echoVia(l.client, to, to, 5*time.Second)
	})
	if !strings.HasPrefix(in.proxy, "PROXY TCP4 192.0.2.3") || !strings.Contains(in.proxy, " "+vip.String()+" ") {
		t.Fatalf("a pod's request to the VIP reached %s with PROXY header %q; want one from a node's address to %s (through the LB, not short-circuited by kube-proxy)",
			in.pod, in.proxy, vip)
	}
	t.Logf("ipMode Proxy: a pod's own request to %s went through the LB (PROXY header %q)", vip, in.proxy)

	ctx, cancel = l.ctx()
	defer cancel()
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"node2"}}}}}`)
	if _, err := l.k.Client.AppsV1().Deployments("shop").Patch(ctx, "local", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	onNode("node2")
	t.Logf("ETP=Local: pods moved to node2; traffic followed within %s", time.Since(began).Round(time.Millisecond))
}

// ingressVIP is the address the shop Ingress asks for, so that the ACME
// server's DNS can name it before the Ingress exists (as a tenant's DNS
// record would).
const ingressVIP = "192.0.2.199"

// testIngressClusterIP: an Ingress with tls whose backend is an ordinary
// ClusterIP Service is served with no change by the tenant, over HTTP and
// over HTTPS with a certificate from the ACME server: the agent creates a
// NodePort Service for it (labelled as its own, owned by the ClusterIP
// Service), and deletes it with the Ingress.
func (l *kubeLab) testIngressClusterIP(t *testing.T) {
	c := l.k.Client
	ctx, cancel := l.ctx()
	defer cancel()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-internal"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	svc, err := c.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.peb.AddA(t, "shop.example", ingressVIP)
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "shop",
			Annotations: map[string]string{"teapot-lb.io/load-balancer-ips": ingressVIP}},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptrTo("teapot-lb"),
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"shop.example"}, SecretName: "shop-tls"}},
			Rules: []networkingv1.IngressRule{{Host: "shop.example", IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &pathType,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: "web-internal", Port: networkingv1.ServiceBackendPort{Number: 80}}},
				}}},
			}}},
		},
	}
	began := time.Now()
	if _, err := c.NetworkingV1().Ingresses("shop").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip netip.Addr
	waitFor(t, kubeLabTimeout, "a VIP in the Ingress's status", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		got, err := c.NetworkingV1().Ingresses("shop").Get(ctx, "shop", metav1.GetOptions{})
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
	a := l.waitEcho("an answer for shop.example through "+vip.String(), func() (echoAnswer, error) {
		return echoHTTPHost(l.client, netip.AddrPortFrom(vip, 80), "shop.example", 2*time.Second)
	})
	t.Logf("Ingress to a ClusterIP Service: answered by %s %s after the Ingress was created", a.pod, time.Since(began).Round(time.Millisecond))
	if vip.String() != ingressVIP {
		t.Fatalf("the Ingress got %s, want the address it asked for, %s", vip, ingressVIP)
	}
	roots := l.peb.IssuerRoots(t)
	var leaf *x509.Certificate
	a = l.waitEcho("an HTTPS answer for shop.example through "+vip.String(), func() (a echoAnswer, err error) {
		a, leaf, err = echoHTTPS(l.client, netip.AddrPortFrom(vip, 443), "shop.example", roots, 2*time.Second)
		return a, err
	})
	t.Logf("Ingress with tls: HTTPS answered by %s %s after the Ingress was created, certificate issued by %q for %v",
		a.pod, time.Since(began).Round(time.Millisecond), leaf.Issuer.CommonName, leaf.DNSNames)
	np, err := c.CoreV1().Services("shop").Get(ctx, "web-internal-teapot-np", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent's NodePort Service: %v", err)
	}
	if np.Spec.Type != corev1.ServiceTypeNodePort || np.Labels["app.kubernetes.io/managed-by"] != "teapot-lb-agent" ||
		len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != svc.UID {
		t.Fatalf("NodePort Service: type %s, labels %v, owners %+v; want NodePort, managed by teapot-lb-agent, owned by %s", np.Spec.Type, np.Labels, np.OwnerReferences, svc.UID)
	}
	if err := c.NetworkingV1().Ingresses("shop").Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, kubeLabTimeout, "the agent's NodePort Service deleted with the Ingress", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		_, err := c.CoreV1().Services("shop").Get(ctx, "web-internal-teapot-np", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// echoProber asks an echo Service over and over from the client and
// records who answered when.
type echoProber struct {
	mu       sync.Mutex
	sent     int
	failures []probeFailure
	firstBy  map[string]time.Time
	stop     chan struct{}
	done     chan struct{}
}

func startEchoProber(h *netlab.Host, to netip.AddrPort, interval time.Duration) *echoProber {
	p := &echoProber{firstBy: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			wg.Go(func() {
				a, err := echoHTTP(h, to, 3*time.Second)
				now := time.Now()
				p.mu.Lock()
				defer p.mu.Unlock()
				p.sent++
				if err != nil {
					p.failures = append(p.failures, probeFailure{now, err})
					return
				}
				if _, ok := p.firstBy[a.pod]; !ok {
					p.firstBy[a.pod] = now
				}
			})
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// reportFailures fails t when any request failed, naming the first few.
func reportFailures(t *testing.T, when string, failures []probeFailure) {
	t.Helper()
	for i, f := range failures {
		if i == 5 {
			t.Errorf("... %d more", len(failures)-5)
			break
		}
		t.Errorf("a request failed %s, at %s", when, f)
	}
}

// probeFailure is a request that failed, and when.
type probeFailure struct {
	at  time.Time
	err error
}

func (f probeFailure) String() string { return f.at.Format("15:04:05.000") + ": " + f.err.Error() }

func (p *echoProber) finish() (sent int, failures []probeFailure) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.failures
}

func (p *echoProber) first(pod string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.firstBy[pod]
	return t, ok
}

// percentiles returns the p50 and p99 of ds.
func percentiles(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99)
}

// scaleEcho sets the replicas of the echo Deployment.
func (l *kubeLab) scaleEcho(t *testing.T, replicas int32) {
	t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := l.k.Client.AppsV1().Deployments("shop").Patch(ctx, "echo", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testScale scales the echo Deployment 2 -> 10 -> 1 while the client
// sends a request every 20ms to its LoadBalancer Service: every new pod
// must get traffic; it reports the time from a pod's Ready to its first
// answer and the requests that failed.
func (l *kubeLab) testScale(t *testing.T, vip netip.Addr) {
	before := l.podNodes("shop", "echo")
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	l.scaleEcho(t, 10)
	l.waitDeployment("shop", "echo", 10)
	var lags []time.Duration
	waitFor(t, kubeLabTimeout, "traffic on all 10 pods", func() error {
		ctx, cancel := l.ctx()
		defer cancel()
		pods, err := l.k.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return err
		}
		lags = lags[:0]
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp != nil {
				continue
			}
			_, old := before[pod.Name]
			var ready time.Time
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = c.LastTransitionTime.Time
				}
			}
			first, ok := p.first(pod.Name)
			if ready.IsZero() || !ok {
				return fmt.Errorf("no traffic yet on %s", pod.Name)
			}
			// Ready is stamped in whole seconds; a pod that answered
			// before its Ready second ended counts as 0.
			if !old {
				lags = append(lags, max(0, first.Sub(ready.Add(time.Second))))
			}
		}
		return nil
	})
	p50, p99 := percentiles(lags)
	t.Logf("scaled 2 -> 10: from a pod's Ready (second resolution) to its first answer: p50 %s, p99 %s over %d new pods",
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(lags))
	down := time.Now()
	l.scaleEcho(t, 1)
	l.waitDeployment("shop", "echo", 1)
	waitFor(t, kubeLabTimeout, "the terminating pods gone", func() error {
		if n := len(l.podNodes("shop", "echo")); n != 1 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	sent, failures := p.finish()
	var upFailed, downFailed []probeFailure
	for _, f := range failures {
		if f.at.Before(down) {
			upFailed = append(upFailed, f)
		} else {
			downFailed = append(downFailed, f)
		}
	}
	t.Logf("scaled 2 -> 10 -> 1 under %d requests: %d failed while scaling up, %d while scaling down", sent, len(upFailed), len(downFailed))
	reportFailures(t, "while scaling", failures)
	l.waitEcho("an answer after scaling to 1", func() (echoAnswer, error) {
		return echoHTTP(l.client, netip.AddrPortFrom(vip, 80), 2*time.Second)
	})
}

// testManyServices creates 20 LoadBalancer Services at once and measures,
// for each, the time from create to a VIP in its status and to the first
// good answer through that VIP.
func (l *kubeLab) testManyServices(t *testing.T) {
	const n = 20
	type result struct{ vip, answer time.Duration }
	results := make([]result, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	began := time.Now()
	for i := range n {
		wg.Go(func() {
			svc := lbServiceFor("shop", fmt.Sprintf("many-%02d", i), "echo", corev1.ProtocolTCP, 80)
			ctx, cancel := l.ctx()
			defer cancel()
			start := time.Now()
			if _, err := l.k.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			deadline := start.Add(kubeLabTimeout)
			var vip netip.Addr
			for !vip.IsValid() {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: no VIP after %s", svc.Name, kubeLabTimeout)
					return
				}
				got, err := l.k.Client.CoreV1().Services("shop").Get(ctx, svc.Name, metav1.GetOptions{})
				if err == nil && len(got.Status.LoadBalancer.Ingress) > 0 {
					vip, _ = netip.ParseAddr(got.Status.LoadBalancer.Ingress[0].IP)
				}
				if !vip.IsValid() {
					time.Sleep(20 * time.Millisecond)
				}
			}
			results[i].vip = time.Since(start)
			for {
				if _, err := echoHTTP(l.client, netip.AddrPortFrom(vip, 80), time.Second); err == nil {
					break
				}
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: no answer through %s after %s", svc.Name, vip, kubeLabTimeout)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			results[i].answer = time.Since(start)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var vips, answers []time.Duration
	for _, r := range results {
		vips, answers = append(vips, r.vip), append(answers, r.answer)
	}
	v50, v99 := percentiles(vips)
	a50, a99 := percentiles(answers)
	t.Logf("%d Services created at once: create -> VIP in status p50 %s p99 %s; create -> first good answer p50 %s p99 %s; all served after %s",
		n, v50.Round(time.Millisecond), v99.Round(time.Millisecond), a50.Round(time.Millisecond), a99.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// testDelete deletes every Service of the namespace: the LB cluster frees
// their VIPs (no host holds one) and no NodePort Service of the agent is
// left.
func (l *kubeLab) testDelete(t *testing.T) {
	ctx, cancel := l.ctx()
	defer cancel()
	svcs, err := l.k.Client.CoreV1().Services("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vips []netip.Addr
	for _, s := range svcs.Items {
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				vips = append(vips, a)
			}
		}
		if err := l.k.Client.CoreV1().Services("shop").Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(vips) < 20 {
		t.Fatalf("only %d Services had a VIP before the delete", len(vips))
	}
	began := time.Now()
	waitFor(t, kubeLabTimeout, "every VIP of the deleted Services released", func() error {
		for _, v := range vips {
			hs, err := l.holders(v)
			if err != nil {
				return err
			}
			if len(hs) > 0 {
				return fmt.Errorf("%s still held by %s", v, hs[0].id)
			}
		}
		return nil
	})
	t.Logf("%d Services deleted: every VIP released %s later", len(vips), time.Since(began).Round(time.Millisecond))
	left, err := l.k.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=teapot-lb-agent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 {
		t.Errorf("the agent's NodePort Services are left: %s/%s ...", left.Items[0].Namespace, left.Items[0].Name)
	}
}

// leaseHolder returns the agent replica holding the Lease.
func (l *kubeLab) leaseHolder() (string, error) {
	ctx, cancel := l.ctx()
	defer cancel()
	lease, err := l.k.Client.CoordinationV1().Leases("teapot-lb-system").Get(ctx, "teapot-lb-agent", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", errors.New("no holder")
	}
	return *lease.Spec.HolderIdentity, nil
}

// testKillAgent deletes the active agent pod at once (no grace) while the
// client is served: the data plane does not depend on the agent, so no
// request fails, and the other replica takes the Lease.
func (l *kubeLab) testKillAgent(t *testing.T, vip netip.Addr) {
	old, err := l.leaseHolder()
	if err != nil {
		t.Fatal(err)
	}
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	ctx, cancel := l.ctx()
	defer cancel()
	began := time.Now()
	if err := l.k.Client.CoreV1().Pods("teapot-lb-system").Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	var next string
	waitFor(t, kubeLabTimeout, "another agent replica takes the Lease", func() error {
		h, err := l.leaseHolder()
		if err != nil {
			return err
		}
		if h == old {
			return fmt.Errorf("%s still holds it", h)
		}
		next = h
		return nil
	})
	took := time.Since(began)
	time.Sleep(2 * time.Second)
	sent, failures := p.finish()
	t.Logf("active agent pod %s deleted: %s leads after %s; %d requests, %d failed", old, next, took.Round(time.Millisecond), sent, len(failures))
	reportFailures(t, "while the agent failed over", failures)
	l.waitDeployment("teapot-lb-system", "teapot-lb-agent", 2)
}

// testStopAPIServer stops the tenant's kube-apiserver for 10s while the
// client is served: nothing on the LB side depends on it, so no request
// fails; the cluster carries on once it is back.
func (l *kubeLab) testStopAPIServer(t *testing.T, vip netip.Addr) {
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	l.k.StopAPIServer()
	time.Sleep(10 * time.Second)
	if err := l.k.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubeLabTimeout)
	defer cancel()
	if err := l.k.WaitAPI(ctx); err != nil {
		t.Fatal(err)
	}
	sent, failures := p.finish()
	t.Logf("tenant kube-apiserver stopped for 10s: %d requests, %d failed", sent, len(failures))
	reportFailures(t, "while the tenant's apiserver was stopped", failures)
	if err := l.k.WaitNodesReady(ctx, kubeLabTimeout); err != nil {
		t.Fatal(err)
	}
}

// holderBudget bounds the failover of a killed VIP holder as the client
// sees it: requests in flight when it died time out after 3s, and the
// takeover takes ~100ms, with room for a loaded machine.
const holderBudget = 4 * time.Second

// testKillHolder kills the LB host holding the Service's VIP and unplugs
// it: another host takes the VIP and the client is served again; the
// failed requests are those of the failover.
func (l *kubeLab) testKillHolder(t *testing.T, vip netip.Addr) {
	holder := l.waitHolder(vip, kubeLabTimeout)
	p := startEchoProber(l.client, netip.AddrPortFrom(vip, 80), 20*time.Millisecond)
	time.Sleep(time.Second)
	at := l.kill(holder, true)
	next := l.waitHolder(vip, kubeLabTimeout)
	took := time.Since(at)
	time.Sleep(2 * time.Second)
	sent, failures := p.finish()
	var window time.Duration
	for _, f := range failures {
		window = max(window, f.at.Sub(at))
		if f.at.Before(at) {
			t.Errorf("a request failed before the kill, at %s", f)
		}
	}
	t.Logf("VIP holder %s killed and unplugged: %s holds %s after %s; %d requests, %d failed (the failover), the last %s after the kill",
		holder.id, next.id, vip, took.Round(time.Millisecond), sent, len(failures), window.Round(time.Millisecond))
	if next == holder {
		t.Fatal("the dead host still holds the VIP")
	}
	// The failover budget: the takeover is ~100ms (vip/DESIGN.md); a
	// request that failed later than holderBudget after the kill is not
	// the failover's.
	if window > holderBudget {
		t.Errorf("requests failed until %s after the kill; the failover budget is %s", window.Round(time.Millisecond), holderBudget)
	}
	l.revive(holder)
	l.waitMember(holder)
}
