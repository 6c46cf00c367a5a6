package kubecluster

import (
	"context"
	base64pkg "encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is one running node: containerd, kubelet and kube-proxy in the
// node's network namespace.
type Node struct {
	NodeConfig
	c   *Cluster
	dir string

	mu         sync.Mutex
	containerd *Proc
	kubelet    *Proc
	kubeProxy  *Proc
	netnsSeen  map[string]bool // pod namespaces under /run/netns before the node started
}

// socket is the node's containerd address.
func (n *Node) socket() string { return filepath.Join(n.dir, "containerd.sock") }

// cgroupRoot is the kubelet's cgroup root, the same path in every
// hierarchy.
func (n *Node) cgroupRoot() string { return "/" + n.c.cgroup + "/" + n.Name }

// newNode sets up a node's network and cgroup, the parts it shares with
// the other nodes (its routes to their pods, the cluster's cgroup).
func (c *Cluster) newNode(nc NodeConfig) (*Node, error) {
	n := &Node{NodeConfig: nc, c: c, dir: filepath.Join(c.cfg.Dir, nc.Name), netnsSeen: map[string]bool{}}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			n.netnsSeen[e.Name()] = true
		}
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "cni"), 0o755); err != nil {
		return nil, err
	}
	if err := n.network(); err != nil {
		return n, err
	}
	if err := makeCgroup(n.cgroupRoot()); err != nil {
		return n, err
	}
	if err := weighCgroup("/" + c.cgroup); err != nil {
		return n, err
	}
	return n, nil
}

// startRuntime starts the node's containerd and imports the cluster's
// images into it: what the node needs before its kubelet starts, and
// nothing the API server serves.
func (n *Node) startRuntime(ctx context.Context) error {
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	for _, img := range n.c.cfg.Images {
		if err := n.Import(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// startAgents starts the node's kubelet and kube-proxy, which register
// with the API server.
func (n *Node) startAgents() error {
	if err := n.startKubelet(); err != nil {
		return err
	}
	return n.startKubeProxy()
}

// network turns on forwarding and routes the other nodes' pods.
func (n *Node) network() error {
	if err := n.Host.Sysctl("net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	for _, o := range n.c.cfg.Nodes {
		if o.Name == n.Name {
			continue
		}
		if err := n.Host.IP("route", "add", o.PodCIDR.String(), "via", o.Addr.String()); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	conf := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  stream_server_address = "127.0.0.1"
  # A machine may refuse to lower oom_score_adj (no CAP_SYS_RESOURCE, as
  # in a container): containers then keep at least containerd's.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.socket(),
		filepath.Join(n.dir, "containerd", "opt"), n.c.cfg.PauseImage, filepath.Join(n.dir, "cni"))
	confPath := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "teapot-pods",
  "plugins": [
    {"type": "ptp", "ipMasq": true, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.PodCIDR.String(), filepath.Join(n.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-pods.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	p, err := start(n.dir, n.Host.NS, "containerd", "containerd", n.c.cfg.Env, "--config", confPath)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = p
	n.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := runIn(ctx, n.Host.NS, "ctr", "--address", n.socket(), "version")
		if err == nil {
			return nil
		}
		if !p.Running() || time.Now().After(deadline) {
			return fmt.Errorf("containerd did not start (log %s): %w", p.LogPath, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Import loads a docker-archive or OCI tarball into the node's containerd
// for the kubelet.
func (n *Node) Import(ctx context.Context, tarball string) error {
	_, err := runIn(ctx, n.Host.NS, "ctr", "--address", n.socket(), "-n", "k8s.io", "images", "import", "--no-unpack=false", tarball)
	if err != nil {
		return fmt.Errorf("import %s: %w", filepath.Base(tarball), err)
	}
	return nil
}

// startKubelet starts the node's kubelet. Its API takes anonymous requests
// (authorised: the lab's nodes are reachable from the lab alone), so that
// the API server, which has no kubelet client certificate, serves pod
// logs.
func (n *Node) startKubelet() error {
	kc, err := n.c.WriteKubeconfig("kubelet-"+n.Name, n.c.Token)
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: ""
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
localStorageCapacityIsolation: false
shutdownGracePeriod: 0s
oomScoreAdj: 0
podLogsDir: %[4]s
`, n.cgroupRoot(), n.socket(), n.Addr, filepath.Join(n.dir, "pod-logs"))
	confPath := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := startKubeletAlone(func() (*Proc, error) {
		return start(n.dir, n.Host.NS, "kubelet", filepath.Join(n.c.cfg.Bins, "kubelet"), n.c.cfg.Env,
			"--config", confPath, "--kubeconfig", kc,
			"--root-dir", filepath.Join(n.dir, "kubelet"),
			"--cert-dir", filepath.Join(n.dir, "kubelet-pki"),
			"--hostname-override", n.Name, "--node-ip", n.Addr.String(),
			"--v", "1")
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	return nil
}

func (n *Node) startKubeProxy() error {
	kc, err := n.c.WriteKubeconfig("kube-proxy-"+n.Name, n.c.Token)
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %[1]q}
hostnameOverride: %[2]s
clusterCIDR: %[3]s
mode: iptables
healthzBindAddress: "%[4]s:10256"
metricsBindAddress: "127.0.0.1:10249"
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, kc, n.Name, n.c.cfg.ClusterCIDR, n.Addr)
	confPath := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := start(n.dir, n.Host.NS, "kube-proxy", filepath.Join(n.c.cfg.Bins, "kube-proxy"), n.c.cfg.Env,
		"--config", confPath, "--v", "1")
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubeProxy = p
	n.mu.Unlock()
	return nil
}

func (n *Node) procs() []*Proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ps []*Proc
	for _, p := range []*Proc{n.containerd, n.kubelet, n.kubeProxy} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// exited says which of the node's processes has exited, if one has.
func (n *Node) exited() error {
	for _, p := range n.procs() {
		if !p.Running() {
			return fmt.Errorf("%s of %s exited (log %s)", p.Name, n.Name, p.LogPath)
		}
	}
	return nil
}

// close kills the node's processes, its containers and their shims, and
// removes its mounts and the pod network namespaces its containerd made.
func (n *Node) close() error {
	for _, p := range n.procs() {
		p.Kill()
	}
	killShims(n.socket())
	killCgroup(n.cgroupRoot())
	var errs []error
	if err := unmountUnder(n.dir); err != nil {
		errs = append(errs, err)
	}
	// Another lab's containerd, running at the same time, makes cni-
	// namespaces too: one a live process is in (its pods' pause
	// containers) is not this node's, whose processes are dead by now.
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		inUse := netnsInUse()
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "cni-") || n.netnsSeen[e.Name()] {
				continue
			}
			path := filepath.Join("/run/netns", e.Name())
			if fi, err := os.Stat(path); err == nil && fi.ModTime().Before(n.c.started()) {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(path, &st) == nil && inUse[st.Ino] {
				continue
			}
			_ = syscall.Unmount(path, syscall.MNT_DETACH)
			_ = os.Remove(path)
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd shims serving the containerd at socket.
func killShims(socket string) {
	killShimsWhere(func(args []string) bool { return slices.Contains(args, socket) })
}

// killShimsWhere kills the containerd shims whose arguments match.
func killShimsWhere(match func(args []string) bool) {
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && match(args[1:]) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func base64(b []byte) string { return base64std.EncodeToString(b) }

var base64std = base64pkg.StdEncoding
