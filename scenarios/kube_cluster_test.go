package scenarios

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/packaging/image"
	"github.com/teapot-lb/teapot-lb/scenarios/kubecluster"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The tenant cluster lab: the VIP lab's three LB hosts and client on the
// bridge 192.0.2.0/24, plus a Kubernetes control plane (192.0.2.30) and
// two nodes (192.0.2.31, .32) whose pods live in 198.51.100.0/26 and
// 198.51.100.64/26. ClusterIPs come from 203.0.113.0/24; the tenant's
// VIPs from 192.0.2.160-199.
// kubeLabMisses: the LB hosts take a peer for dead after 25 missed
// heartbeats (500ms) rather than the VIP lab's 10: here a Kubernetes
// cluster shares the machine's cores, and its bursts (a pod starting, the
// race detector's pauses) stall every process at once for longer than
// 200ms, which makes every host drop and retake its VIPs.
const kubeLabMisses = "25"

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
	// tenant is the tenant whose credentials the agent runs with
	// ("": kubeTenant); agentReplicas its replicas (0: the manifest's).
	tenant        string
	agentReplicas int32
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

// kubeLabOptions change what newKubeLabWith starts.
type kubeLabOptions struct {
	// manifest replaces kubeLabManifest (the pool and the tenant).
	manifest string
	// images builds more image tarballs in dir, imported into every node.
	images func(dir string) []string
	// gatewayChannel is the channel of the Gateway API CRDs installed:
	// "standard" ("") or "experimental" (what the conformance suite's
	// experimental features, such as HTTPRoute retry, need).
	gatewayChannel string
	// args are more serve flags for every LB host.
	args []string
	// bgp gives the LB hosts a bgp: section and the lab's router
	// (labOptions.bgp), so that they take the tenants' BGP sessions.
	bgp bool
}

// newKubeLab starts the LB hosts and the tenant cluster with its images
// imported, then installs the agent from packaging/k8s as a Deployment.
func newKubeLab(t *testing.T) *kubeLab { return newKubeLabWith(t, kubeLabOptions{}) }

// newKubeLabWith starts the tenant cluster while the LB cluster forms:
// neither needs the other until the agent is installed, and each spends
// most of its start waiting (a Raft election and joins; an API server,
// kubelets and image imports).
func newKubeLabWith(t *testing.T, o kubeLabOptions) *kubeLab {
	t.Helper()
	needKubeTools(t)
	if o.manifest == "" {
		o.manifest = kubeLabManifest
	}
	bins := kubeBinaries(t)
	began := time.Now()
	// The images build in the background from the start: the first lab
	// of the package builds them (under a minute alone, minutes under
	// make test's load), the others find them built.
	type built struct {
		tarballs []string
		err      error
	}
	imagesBuilt := make(chan built, 1)
	go func() {
		tarballs, err := kubeImagesOnce()
		imagesBuilt <- built{tarballs, err}
	}()
	l := &kubeLab{}
	// The tenant cluster's start, in the background from before the LB
	// cluster forms until its nodes are Ready: its result is in started
	// once done is closed.
	var started struct {
		k    *kubecluster.Cluster
		err  error
		took time.Duration
	}
	done := make(chan struct{})
	beforeLB := func(v *vipLab) {
		l.vipLab = v
		l.dir = filepath.Join(v.dir, "kube")
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(l.dir, 0o755))
		var more []string
		if o.images != nil {
			more = o.images(l.dir)
		}
		cp, err := v.lab.AddHost("kcp", "192.0.2.30/24")
		must(err)
		var nodes []kubecluster.NodeConfig
		for i := range 2 {
			name := fmt.Sprintf("node%d", i+1)
			addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(31 + i)})
			h, err := v.lab.AddHost(name, addr.String()+"/24")
			must(err)
			nodes = append(nodes, kubecluster.NodeConfig{Name: name, Host: h, Addr: addr,
				PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(64 * i)}), 26)})
		}
		stop, cancel := context.WithCancel(context.Background())
		// Runs before the lab's own cleanup (registered earlier), which
		// removes the hosts the cluster lives in. A lab that failed
		// while the cluster started stops its start.
		t.Cleanup(func() {
			cancel()
			<-done
			if t.Failed() {
				logKubeCluster(t, l.dir)
			}
			if started.k == nil {
				return
			}
			if err := started.k.Close(); err != nil {
				t.Errorf("close the tenant cluster: %v", err)
			}
		})
		go func() {
			defer close(done)
			b := <-imagesBuilt
			if b.err != nil {
				started.err = b.err
				return
			}
			t.Logf("images ready %s after the lab's start", time.Since(began).Round(100*time.Millisecond))
			ctx, cancel := context.WithTimeout(stop, 5*time.Minute)
			defer cancel()
			from := time.Now()
			started.k, started.err = kubecluster.Start(ctx, kubecluster.Config{
				Bins: bins, Dir: l.dir,
				ControlPlane: cp, ControlAddr: netip.MustParseAddr("192.0.2.30"),
				Nodes:       nodes,
				ServiceCIDR: netip.MustParsePrefix("203.0.113.0/24"),
				ClusterCIDR: netip.MustParsePrefix("198.51.100.0/25"),
				Images:      append(b.tarballs, more...), PauseImage: "teapot.test/pause:" + kubeImageTag,
				Env: os.Environ(),
			})
			started.took = time.Since(from)
		}()
	}
	l.vipLab = newVIPLab(t, labOptions{teapot: true, acme: true, bgp: o.bgp, misses: kubeLabMisses, args: o.args, beforeLB: beforeLB})
	manifest := filepath.Join(l.dir, "tenant.yaml")
	if err := os.WriteFile(manifest, []byte(o.manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cli(l.lbs[0], "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	lbReady := time.Now()
	<-done
	l.start = time.Now()
	if started.err != nil {
		t.Fatalf("start the tenant cluster: %v", started.err)
	}
	l.k = started.k
	t.Logf("tenant cluster (control plane and 2 nodes) Ready in %s, %s after the lab's start; the LB cluster, formed and with the tenant's manifest, waited %s for it",
		started.took.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond), l.start.Sub(lbReady).Round(100*time.Millisecond))
	// The agent finds the Gateway API when it starts.
	installing := time.Now()
	l.installGatewayCRDs(o.gatewayChannel)
	l.installAgent()
	t.Logf("Gateway API CRDs and the agent installed in %s (both replicas Ready, one holds the Lease)", time.Since(installing).Round(100*time.Millisecond))
	return l
}

// logKubeCluster logs the last 30 lines of each log of the tenant
// cluster in dir: its components', its nodes' and its pods'.
func logKubeCluster(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	pods, _ := filepath.Glob(filepath.Join(dir, "*", "pod-logs", "*", "*", "*.log"))
	for _, p := range append(append(logs, more...), pods...) {
		t.Logf("---- %s, last 30 lines ----\n%s", p, tail(p, 30))
	}
}

// kubeAgentVersion is the version of the agent image the lab builds.
const kubeAgentVersion = "0.0.0-kubelab"

// buildImages returns the tarballs of the pause and echo images, and of
// the agent's image built the way `make image` does (packaging/image,
// tagged with its version and the floating tag the committed manifests
// use), each as `ctr images import` reads it. They are built once for the
// package's run, in the directory of its teapot-lb binary: the Kubernetes
// labs run side by side, and each built the same three images (over 3
// minutes of the machine's two CPUs under make test's load).
func (l *kubeLab) buildImages() []string {
	l.tb.Helper()
	began := time.Now()
	tarballs, err := kubeImagesOnce()
	if err != nil {
		l.tb.Fatal(err)
	}
	l.tb.Logf("images ready after %s (built once for the package in %s)",
		time.Since(began).Round(100*time.Millisecond), kubeImages.took.Round(100*time.Millisecond))
	return tarballs
}

// kubeImagesOnce builds the labs' images, the first time it is called,
// and returns their tarballs.
func kubeImagesOnce() ([]string, error) {
	kubeImages.once.Do(func() {
		// The LB hosts' binary first (a lab's hosts wait for it too): the
		// agent's binary is built with its compile flags, so it is then
		// only linked (see build). took is the images' own time, after it.
		if _, err := binary.plain.get(false); err != nil {
			kubeImages.err = fmt.Errorf("build teapot-lb: %w", err)
			return
		}
		began := time.Now()
		kubeImages.tarballs, kubeImages.err = buildKubeImages(filepath.Join(binary.dir, "kube-images"))
		kubeImages.took = time.Since(began)
	})
	return slices.Clone(kubeImages.tarballs), kubeImages.err
}

// kubeImages holds the images the Kubernetes labs share.
var kubeImages struct {
	once     sync.Once
	tarballs []string
	took     time.Duration
	err      error
}

// buildKubeImages builds the labs' images in dir.
func buildKubeImages(dir string) ([]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	build := func(pkg, out, ldflags string) error {
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
		return nil
	}
	var tarballs []string
	for _, img := range []struct {
		name, pkg string
		entry     []string
		user      string
	}{
		{"pause", "./scenarios/images/pause", []string{"/pause"}, ""},
		{"echo", "./scenarios/images/echo", []string{"/echo"}, "65532:65532"},
	} {
		bin := filepath.Join(dir, img.name)
		if err := build(img.pkg, bin, "-s -w"); err != nil {
			return nil, err
		}
		out := filepath.Join(dir, img.name+".tar")
		if err := kubecluster.WriteImage(kubecluster.Image{
			Ref: "teapot.test/" + img.name + ":" + kubeImageTag, Binary: bin,
			Entrypoint: img.entry, User: img.user,
		}, out); err != nil {
			return nil, err
		}
		tarballs = append(tarballs, out)
	}
	bin := filepath.Join(dir, "teapot-lb")
	const module = "github.com/teapot-lb/teapot-lb"
	if err := build(".", bin, "-s -w -X "+module+"/api/cli.Version="+kubeAgentVersion+" -X "+module+"/api/cli.Commit=kubelab"); err != nil {
		return nil, err
	}
	created := time.Unix(0, 0).UTC()
	idx, err := image.Build(image.Config{Version: kubeAgentVersion, Revision: "kubelab", Created: created,
		Binaries: map[string]string{runtime.GOARCH: bin}})
	if err != nil {
		return nil, err
	}
	layoutDir := filepath.Join(dir, "agent-layout")
	if err := image.WriteLayout(layoutDir, idx, image.Names(kubeAgentVersion)); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "teapot-lb-agent.oci.tar")
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	if err := image.TarDir(f, layoutDir, created); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return append(tarballs, out), nil
}

func (l *kubeLab) kube() *kube { return &kube{tb: l.tb, client: l.k.Client} }

func (l *kubeLab) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cliTimeout)
}

// installAgent applies packaging/k8s with the Secret that `teapot-lb
// tenant credentials` prints and the agent's image from this tree, and
// waits for its replicas (both, unless agentReplicas says otherwise) to be
// Ready and one to hold the Lease.
func (l *kubeLab) installAgent() {
	t := l.tb
	t.Helper()
	k := l.kube()
	k.applyManifest("00-namespace.yaml")
	k.applyManifest("10-rbac.yaml")
	k.applyManifest("40-ingressclass.yaml")
	out, err := l.cli(l.lbs[0], "tenant", "credentials", cmp.Or(l.tenant, kubeTenant), "-o", "json")
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
		// The manifest's image, imported from the tarball that
		// buildImages made as `make image` does; never pulled.
		if want := image.Repository + ":" + image.FloatingTag; c.Image != want {
			t.Fatalf("30-deployment.yaml runs %s; the image is %s", c.Image, want)
		}
		c.ImagePullPolicy = corev1.PullNever
		c.Args = append(c.Args, "--lease-duration=4s", "--renew-deadline=3s", "--retry-period=500ms")
	}
	if l.agentReplicas > 0 {
		dep.Spec.Replicas = &l.agentReplicas
	}
	if _, err := l.k.Client.AppsV1().Deployments(dep.Namespace).Create(ctx, &dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the agent Deployment: %v", err)
	}
	l.waitDeployment(dep.Namespace, dep.Name, *dep.Spec.Replicas)
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
						// Serve on for 8 s after SIGTERM, as a preStop delay
						// does in production: a terminating pod leaves the
						// EndpointSlice, then every node's kube-proxy rules,
						// and on a loaded machine that took over 3 s (the
						// echo default); connections the nodes still send to
						// a pod whose network is gone hang, whatever the LB does.
						Args: []string{"-drain=8s"},
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
						// A CPU request, as a Service that answers clients
						// has in production: without one the pod is
						// BestEffort, whose whole class weighs 2 shares on
						// its node against the agent's 50m (51), and the
						// nodes here share two CPUs with everything else: an
						// agent busy on the same node (its API server gone,
						// a relist) can hold the echo pods off the CPU, and
						// requests through the LB time out whatever it does.
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m")}},
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

// echoAnswer is what an echo pod said: its name, the address it saw the
// connection from, the request's X-Forwarded-For (HTTP) and the PROXY
// protocol header.
type echoAnswer struct{ pod, client, fwd, proxy string }

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
		case "fwd":
			a.fwd = v
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
// LoadBalancer, TCP and UDP, whose answers come from echo pods. The LB
// hosts answer DNS for the tenant's domain (the DNS subtest).
func TestKubeClusterLoadBalancer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a Kubernetes cluster and three LB hosts")
	}
	parallelScenarioTaking(t, 200*time.Second)
	l := newKubeLabWith(t, kubeLabOptions{args: kubeDNSArgs})
	l.createNamespace("shop")
	podsFrom := time.Now()
	l.echoDeployment("shop", "echo", 2, "")
	// The ExternalTrafficPolicyLocal subtest's pods, all on node1: they
	// start with the echo pods rather than after them.
	l.echoDeployment("shop", "local", 2, "node1")
	l.waitDeployment("shop", "echo", 2)
	t.Logf("2 echo pods Ready %s after their Deployment was created", time.Since(podsFrom).Round(100*time.Millisecond))

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
	t.Run("Gateway", l.testGateway)
	t.Run("DNS", l.testDNS)
	t.Run("NoNodePortsRefused", l.testNoNodePorts)
	t.Run("KillActiveAgent", func(t *testing.T) { l.testKillAgent(t, vip) })
	t.Run("StopTenantAPIServer", func(t *testing.T) { l.testStopAPIServer(t, vip) })
	t.Run("ScaleUnderTraffic", func(t *testing.T) { l.testScale(t, vip) })
	t.Run("ManyServices", l.testManyServices)
	t.Run("KillVIPHolder", func(t *testing.T) { l.testKillHolder(t, vip) })
	t.Run("DeleteFreesVIPs", l.testDelete)
	t.Logf("whole scenario %s", time.Since(l.start).Round(100*time.Millisecond))
}
