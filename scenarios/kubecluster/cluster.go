// Package kubecluster runs a real Kubernetes cluster on one machine, for
// scenarios and for anyone who wants to try teapot-lb with real pods:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler in one
// network namespace, and per node a containerd (with runc and the CNI
// plugins from the distribution), a kubelet and a kube-proxy in a network
// namespace of its own. The namespaces come from netlab; the binaries from
// scenarios/kubetools/build.sh. Images are built here from static
// binaries and imported into every node's containerd: nothing is pulled.
//
// Pods get addresses from their node's PodCIDR through the ptp plugin
// (traffic leaving the pod network is masqueraded), each node routes the
// other nodes' PodCIDRs through them, and kube-proxy runs in iptables
// mode. The machine may use cgroup v1: the kubelet runs with
// failCgroupV1: false and the cgroupfs driver under a cgroup root of its
// own, which Close removes with every process left in it. That root weighs
// 100 busy threads against the machine's other work (weighCgroup): the
// nodes stand for machines of their own, and their pods answer when asked
// whatever else the machine runs.
package kubecluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// Config describes a cluster to start.
type Config struct {
	// Bins holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kube-proxy.
	Bins string
	// Dir receives every file and log of the cluster.
	Dir string
	// ControlPlane is the host of the control plane, reachable from the
	// nodes at ControlAddr.
	ControlPlane *netlab.Host
	ControlAddr  netip.Addr
	Nodes        []NodeConfig
	// ServiceCIDR is the range of ClusterIPs; ClusterCIDR covers every
	// node's PodCIDR.
	ServiceCIDR netip.Prefix
	ClusterCIDR netip.Prefix
	// Images are docker-archive tarballs imported into every node. One of
	// them must be PauseImage.
	Images     []string
	PauseImage string
	// Env is the environment of every process (PATH must find nsenter,
	// iptables, containerd-shim-runc-v2 and runc).
	Env []string
}

// NodeConfig is one node.
type NodeConfig struct {
	Name    string
	Host    *netlab.Host
	Addr    netip.Addr
	PodCIDR netip.Prefix
}

// Cluster is a running cluster.
type Cluster struct {
	cfg    Config
	URL    string
	CAFile string
	// Token authenticates as a cluster administrator (system:masters).
	Token  string
	Client kubernetes.Interface
	Nodes  []*Node

	mu        sync.Mutex
	etcd      *Proc
	apiserver *Proc
	others    []*Proc
	cgroup    string // the kubelets' cgroup parent, relative to each hierarchy
	startedAt time.Time
}

// Timeouts for a cluster to come up on a loaded machine.
const (
	APITimeout  = 2 * time.Minute
	NodeTimeout = 3 * time.Minute
)

// Start brings the cluster up: control plane, then every node, and waits
// until every node is Ready.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, Token: "teapot-kube-admin", startedAt: time.Now(),
		URL:    fmt.Sprintf("https://%s", netip.AddrPortFrom(cfg.ControlAddr, 6443)),
		cgroup: fmt.Sprintf("teapot-kube-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	// A cluster whose test was killed left containers, mounts and
	// namespaces behind; what cannot be removed now is tried again at
	// the next start and does not stop this one.
	_ = RemoveStale()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := c.writeRecord(); err != nil {
		return nil, fmt.Errorf("note the cluster for cleanup: %w", err)
	}
	// The control plane and each node's containerd with its images
	// start side by side: none of them needs another until the kubelets
	// start, and each mostly waits (etcd and the API server for their
	// readiness, containerd for its socket, the imports for the disk).
	cpErr := make(chan error, 1)
	go func() { cpErr <- c.startControlPlane(ctx) }()
	nodes := make([]*Node, len(cfg.Nodes))
	nodeErrs := make([]error, len(cfg.Nodes))
	var wg sync.WaitGroup
	for i, nc := range cfg.Nodes {
		nodes[i], nodeErrs[i] = c.newNode(nc)
		if nodeErrs[i] != nil {
			break
		}
	}
	for i, n := range nodes {
		if n != nil && nodeErrs[i] == nil {
			wg.Go(func() { nodeErrs[i] = n.startRuntime(ctx) })
		}
	}
	wg.Wait()
	err := <-cpErr
	for i, n := range nodes {
		if n != nil {
			c.Nodes = append(c.Nodes, n)
		}
		if nodeErrs[i] != nil && err == nil {
			err = fmt.Errorf("node %s: %w", cfg.Nodes[i].Name, nodeErrs[i])
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := n.startAgents(); err != nil {
			c.Close()
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	if err := c.WaitNodesReady(ctx, NodeTimeout); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	cfg := c.cfg
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	if err := c.writeKeys(); err != nil {
		return err
	}
	ns := cfg.ControlPlane.NS
	etcd, err := start(cfg.Dir, ns, "etcd", filepath.Join(cfg.Bins, "etcd"), cfg.Env,
		"--name", "kube", "--data-dir", filepath.Join(cfg.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "kube=http://127.0.0.1:2380",
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	c.etcd = etcd
	if err := c.StartAPIServer(); err != nil {
		return err
	}
	if err := c.waitAPI(ctx, APITimeout); err != nil {
		return err
	}
	c.CAFile = filepath.Join(cfg.Dir, "certs", "apiserver.crt")
	rc := c.RestConfig()
	rc.QPS, rc.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	c.Client = client
	kc, err := c.WriteKubeconfig("admin", c.Token)
	if err != nil {
		return err
	}
	cm, err := start(cfg.Dir, ns, "kube-controller-manager", filepath.Join(cfg.Bins, "kube-controller-manager"), cfg.Env,
		"--kubeconfig", kc, "--leader-elect=false",
		"--root-ca-file", c.CAFile,
		"--service-account-private-key-file", filepath.Join(cfg.Dir, "sa.key"),
		"--cluster-cidr", cfg.ClusterCIDR.String(), "--service-cluster-ip-range", cfg.ServiceCIDR.String(),
		"--allocate-node-cidrs=false",
		"--bind-address", "127.0.0.1",
		"--node-monitor-grace-period", "20s",
		"--v", "1")
	if err != nil {
		return err
	}
	sched, err := start(cfg.Dir, ns, "kube-scheduler", filepath.Join(cfg.Bins, "kube-scheduler"), cfg.Env,
		"--kubeconfig", kc, "--leader-elect=false", "--bind-address", "127.0.0.1", "--v", "1")
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.others = append(c.others, cm, sched)
	c.mu.Unlock()
	return nil
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer).
func (c *Cluster) StartAPIServer() error {
	cfg := c.cfg
	p, err := start(cfg.Dir, cfg.ControlPlane.NS, "kube-apiserver", filepath.Join(cfg.Bins, "kube-apiserver"), cfg.Env,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", cfg.ControlAddr.String(), "--advertise-address", cfg.ControlAddr.String(),
		"--secure-port", "6443",
		"--cert-dir", filepath.Join(cfg.Dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(cfg.Dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(cfg.Dir, "sa.key"),
		"--token-auth-file", filepath.Join(cfg.Dir, "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		// Pod logs and exec go to the kubelet at the node's address: the
		// lab has no DNS for node names.
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--service-cluster-ip-range", cfg.ServiceCIDR.String(),
		"--service-node-port-range", "30000-32767",
		"--enable-priority-and-fairness=false",
		"--v", "0")
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apiserver = p
	c.mu.Unlock()
	return nil
}

// StopAPIServer kills kube-apiserver; the rest of the cluster keeps
// running without it.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// WaitAPI waits until the API server answers /readyz.
func (c *Cluster) WaitAPI(ctx context.Context) error { return c.waitAPI(ctx, APITimeout) }

func (c *Cluster) waitAPI(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		c.mu.Lock()
		api := c.apiserver
		c.mu.Unlock()
		if !api.Running() {
			return fmt.Errorf("kube-apiserver exited (log %s)", api.LogPath)
		}
		if !c.etcd.Running() {
			return fmt.Errorf("etcd exited (log %s)", c.etcd.LogPath)
		}
		last = c.probe(ctx, "/readyz")
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s: %v", timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probe GETs path on the API server from inside the control plane's host.
func (c *Cluster) probe(ctx context.Context, path string) error {
	rc := c.RestConfig()
	tlsc, err := rest.TLSConfigFor(rc)
	if err != nil {
		return err
	}
	tr := &http.Transport{DialContext: c.cfg.ControlPlane.DialContext, TLSClientConfig: tlsc}
	defer tr.CloseIdleConnections()
	rt, err := rest.HTTPWrappersForConfig(rc, tr)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+path, nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: rt, Timeout: 2 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

// RestConfig authenticates as the administrator. Its connections must be
// made from a namespace that reaches ControlAddr: Client dials through the
// control plane's host.
func (c *Cluster) RestConfig() *rest.Config {
	rc := &rest.Config{Host: c.URL, BearerToken: c.Token}
	if c.CAFile != "" {
		rc.TLSClientConfig.CAFile = c.CAFile
	} else {
		rc.TLSClientConfig.Insecure = true
	}
	rc.Dial = c.cfg.ControlPlane.DialContext
	return rc
}

// writeKeys writes the service-account signing key and the static tokens
// of the administrator and the node components.
func (c *Cluster) writeKeys() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(c.Token + ",kube-admin,kube-admin,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.cfg.Dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for token and returns its path.
func (c *Cluster) WriteKubeconfig(name, token string) (string, error) {
	caFile := filepath.Join(c.cfg.Dir, "certs", "apiserver.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\ncurrent-context: kube\nclusters:\n- name: kube\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n", c.URL, base64(ca))
	fmt.Fprintf(&b, "users:\n- name: %s\n  user:\n    token: %s\ncontexts:\n- name: kube\n  context: {cluster: kube, user: %s}\n", name, token, name)
	path := filepath.Join(c.cfg.Dir, name+".kubeconfig")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// WaitNodesReady waits until every node reports Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		last = c.nodesReady(ctx)
		if last == nil {
			return nil
		}
		for _, n := range c.Nodes {
			if err := n.exited(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes not ready after %s: %v", timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Cluster) nodesReady(ctx context.Context) error {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ready := map[string]bool{}
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	var missing []string
	for _, n := range c.cfg.Nodes {
		if !ready[n.Name] {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not Ready: %s", strings.Join(missing, ", "))
	}
	return nil
}

func (c *Cluster) started() time.Time { return c.startedAt }

// Logs lists the log file of every process of the cluster.
func (c *Cluster) Logs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var logs []string
	for _, p := range append([]*Proc{c.etcd, c.apiserver}, c.others...) {
		if p != nil {
			logs = append(logs, p.LogPath)
		}
	}
	for _, n := range c.Nodes {
		for _, p := range n.procs() {
			logs = append(logs, p.LogPath)
		}
	}
	return logs
}

// Close stops every node (containers included) and the control plane,
// and removes what they left on the machine: mounts, pod network
// namespaces and cgroups.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.close())
	}
	c.mu.Lock()
	procs := append([]*Proc{c.apiserver, c.etcd}, c.others...)
	c.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			p.Kill()
		}
	}
	errs = append(errs, removeCgroups(c.cgroup))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.removeRecord()
	return nil
}
