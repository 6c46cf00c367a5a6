package scenarios

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// kubeStartTimeout bounds etcd plus kube-apiserver becoming ready.
const kubeStartTimeout = 120 * time.Second

// kubeBins is the directory with the kube-apiserver and etcd binaries,
// built once per test binary by scenarios/kubetools/build.sh (which
// caches them across runs), or the reason they could not be built.
var kubeBins struct {
	once sync.Once
	dir  string
	err  error
}

// kubeBinaries returns the directory holding kube-apiserver and etcd. When
// they cannot be built the test is skipped with the reason, except in CI
// (CI=true), where that is a failure: make test builds them first.
func kubeBinaries(tb testing.TB) string {
	tb.Helper()
	kubeBins.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			kubeBins.err = err
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "scenarios", "kubetools", "build.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			kubeBins.err = fmt.Errorf("scenarios/kubetools/build.sh: %w\n%s", err, stderr.String())
			return
		}
		kubeBins.dir = strings.TrimSpace(string(out))
	})
	if kubeBins.err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("build kube-apiserver and etcd: %v", kubeBins.err)
		}
		unavailable(tb, "kube-apiserver and etcd cannot be built here, so this test cannot run: %v", kubeBins.err)
	}
	return kubeBins.dir
}

// kube is a real etcd and kube-apiserver on loopback, with no controllers:
// tests create EndpointSlices themselves.
type kube struct {
	tb        testing.TB
	dir       string
	bins      string
	url       string
	token     string
	caFile    string
	etcdURL   string
	peerURL   string
	apiPort   string
	client    kubernetes.Interface
	etcd      *proc
	apiserver *proc
}

// proc is a child process whose output goes to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// startProc starts bin with args, logging to dir/name.log; it dies with
// the test binary.
func startProc(tb testing.TB, dir, name, bin string, args ...string) *proc {
	tb.Helper()
	p := &proc{name: name, logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(logFile, "==== start %s at %s ====\n", name, time.Now().Format(time.RFC3339Nano))
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		fmt.Fprintf(logFile, "==== %s exited at %s: %v ====\n", name, time.Now().Format(time.RFC3339Nano), err)
		logFile.Close()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		p.kill()
		if tb.Failed() {
			tb.Logf("---- log of %s (%s), last %d lines ----\n%s", name, p.logPath, logTailLines, tail(p.logPath, logTailLines))
		}
		if bad := alarming(p.logPath); bad != "" {
			tb.Errorf("%s logged %q", name, bad)
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to exit.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop sends SIGTERM and waits for the process to exit.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.kill()
	}
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// startKube starts etcd and kube-apiserver and waits until the API is ready.
func startKube(tb testing.TB) *kube {
	tb.Helper()
	bins := kubeBinaries(tb)
	addrs := freeAddrs(tb, 3)
	k := &kube{tb: tb, dir: tb.TempDir(), bins: bins, token: "teapot-scenario-admin"}
	k.etcdURL, k.peerURL = "http://"+addrs[0], "http://"+addrs[1]
	k.apiPort = strings.TrimPrefix(addrs[2], "127.0.0.1:")
	k.url = "https://" + addrs[2]
	k.startEtcd()
	k.writeFiles()
	k.startAPIServer()
	return k
}

func (k *kube) startEtcd() {
	k.etcd = startProc(k.tb, k.dir, "etcd", filepath.Join(k.bins, "etcd"),
		"--name", "scenario",
		"--data-dir", filepath.Join(k.dir, "etcd"),
		"--listen-client-urls", k.etcdURL, "--advertise-client-urls", k.etcdURL,
		"--listen-peer-urls", k.peerURL, "--initial-advertise-peer-urls", k.peerURL,
		"--initial-cluster", "scenario="+k.peerURL,
		"--unsafe-no-fsync", "--log-level", "warn",
	)
}

// writeFiles writes the service-account signing key and the static token
// of the scenario's administrator.
func (k *kube) writeFiles() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		k.tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		k.tb.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		k.tb.Fatal(err)
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(k.token + ",scenario-admin,scenario-admin,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(k.dir, name), data, 0o600); err != nil {
			k.tb.Fatal(err)
		}
	}
}

func (k *kube) startAPIServer() {
	k.tb.Helper()
	certDir := filepath.Join(k.dir, "certs")
	k.apiserver = startProc(k.tb, k.dir, "kube-apiserver", filepath.Join(k.bins, "kube-apiserver"),
		"--etcd-servers", k.etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", k.apiPort,
		"--cert-dir", certDir,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(k.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(k.dir, "sa.key"),
		"--token-auth-file", filepath.Join(k.dir, "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--enable-priority-and-fairness=false",
		"--v", "0",
	)
	k.caFile = filepath.Join(certDir, "apiserver.crt")
	k.waitReady()
	rc := k.restConfig(k.token)
	rc.QPS, rc.Burst = 2000, 2000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		k.tb.Fatal(err)
	}
	k.client = client
}

// waitReady polls /readyz until the API server answers 200.
func (k *kube) waitReady() {
	k.tb.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	waitFor(k.tb, kubeStartTimeout, "kube-apiserver ready", func() error {
		if !k.apiserver.running() {
			return errStop(errors.New("kube-apiserver exited"))
		}
		if !k.etcd.running() {
			return errStop(errors.New("etcd exited"))
		}
		rc := k.restConfig(k.token)
		tr, err := rest.TransportFor(rc)
		if err != nil {
			return err
		}
		hc.Transport = tr
		resp, err := hc.Get(k.url + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
}

// restConfig authenticates with a bearer token and trusts the API server's
// self-signed certificate.
func (k *kube) restConfig(token string) *rest.Config {
	rc := &rest.Config{Host: k.url, BearerToken: token}
	if _, err := os.Stat(k.caFile); err == nil {
		rc.TLSClientConfig.CAFile = k.caFile
	} else {
		rc.TLSClientConfig.Insecure = true
	}
	return rc
}

// kubeconfig writes a kubeconfig file with token and returns its path.
func (k *kube) kubeconfig(name, token string) string {
	k.tb.Helper()
	ca, err := os.ReadFile(k.caFile)
	if err != nil {
		k.tb.Fatal(err)
	}
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "scenario",
		"clusters": []any{map[string]any{"name": "scenario", "cluster": map[string]any{
			"server": k.url, "certificate-authority-data": ca,
		}}},
		"users":    []any{map[string]any{"name": name, "user": map[string]any{"token": token}}},
		"contexts": []any{map[string]any{"name": "scenario", "context": map[string]any{"cluster": "scenario", "user": name}}},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		k.tb.Fatal(err)
	}
	path := filepath.Join(k.dir, name+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		k.tb.Fatal(err)
	}
	return path
}

// applyManifest creates the objects of one of packaging/k8s's files.
func (k *kube) applyManifest(file string) {
	k.tb.Helper()
	root, err := moduleRoot()
	if err != nil {
		k.tb.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "packaging", "k8s", file))
	if err != nil {
		k.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			k.tb.Fatalf("%s: %v", file, err)
		}
		if err := k.create(ctx, meta.Kind, []byte(doc)); err != nil {
			k.tb.Fatalf("%s: create %s: %v", file, meta.Kind, err)
		}
	}
}

func (k *kube) create(ctx context.Context, kind string, doc []byte) error {
	c, opts := k.client, metav1.CreateOptions{}
	decode := func(into any) error { return yaml.UnmarshalStrict(doc, into) }
	switch kind {
	case "Namespace":
		var o corev1.Namespace
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.CoreV1().Namespaces().Create(ctx, &o, opts)
		return err
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, opts)
		return err
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.RbacV1().ClusterRoles().Create(ctx, &o, opts)
		return err
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &o, opts)
		return err
	case "Role":
		var o rbacv1.Role
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.RbacV1().Roles(o.Namespace).Create(ctx, &o, opts)
		return err
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, opts)
		return err
	case "IngressClass":
		var o networkingv1.IngressClass
		if err := decode(&o); err != nil {
			return err
		}
		_, err := c.NetworkingV1().IngressClasses().Create(ctx, &o, opts)
		return err
	}
	return fmt.Errorf("kind %s is not handled by the scenario", kind)
}

// serviceAccountToken asks the API server for a token of a service account.
func (k *kube) serviceAccountToken(ns, name string) string {
	k.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	exp := int64(3600)
	tr, err := k.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		k.tb.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}
