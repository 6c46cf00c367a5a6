package scenarios

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The control-plane lab: the VIP lab's three LB hosts, plus a tenant
// cluster's control plane on the same bridge: one etcd and three
// kube-apiservers, the third reaching etcd through a relay the test can
// cut (so it stays up, accepting TCP, but answers /readyz with 500).
var (
	cpVIP    = netip.MustParseAddr("192.0.2.205")
	cpEtcdIP = netip.MustParseAddr("192.0.2.60")
	cpAPIIPs = []netip.Addr{netip.MustParseAddr("192.0.2.61"), netip.MustParseAddr("192.0.2.62"), netip.MustParseAddr("192.0.2.63")}
)

const (
	cpPort       = 6443
	cpEtcdPort   = 2379
	cpRelayPort  = 12379
	cpAdminToken = "teapot-cp-admin"
)

// cpTenantManifest is the tenant owning the control plane's addresses.
const cpTenantManifest = `
kind: Tenant
name: kube
networks: [192.0.2.60/30]
pools: [l2]
`

// controlPlane is a running tenant control plane in the lab.
type controlPlane struct {
	tb         testing.TB
	lab        *vipLab
	dir        string
	bins       string
	ca         *labCA
	caFile     string
	hcCert     string // the health checks' client certificate file
	hcKey      string
	etcd       *netlab.Process
	hosts      []*netlab.Host
	apiservers []*netlab.Process
	relay      *relay
}

// labCA issues the control plane's certificates.
type labCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newLabCA(tb testing.TB) *labCA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &labCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate and key signed by the CA to dir/name.crt and
// dir/name.key and returns their paths.
func (ca *labCA) issue(tb testing.TB, dir, name string, client bool, ips ...netip.Addr) (string, string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	if !client {
		tmpl.DNSNames = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	for path, data := range map[string][]byte{
		certPath: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPath:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return certPath, keyPath
}

// startControlPlane adds the control plane's hosts to the lab, starts
// etcd and the three kube-apiservers, and waits until each is ready.
func startControlPlane(tb testing.TB, l *vipLab, bins string) *controlPlane {
	tb.Helper()
	cp := &controlPlane{tb: tb, lab: l, dir: filepath.Join(l.dir, "cp"), bins: bins, ca: newLabCA(tb)}
	if err := os.MkdirAll(cp.dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cp.caFile = filepath.Join(cp.dir, "ca.crt")
	if err := os.WriteFile(cp.caFile, cp.ca.pem, 0o644); err != nil {
		tb.Fatal(err)
	}
	cp.hcCert, cp.hcKey = cp.ca.issue(tb, cp.dir, "teapot-lb-health", true)
	k := &kube{tb: tb, dir: cp.dir, token: cpAdminToken}
	k.writeFiles() // the shared service-account key and the admin token

	etcdHost, err := l.lab.AddHost("etcd", cpEtcdIP.String()+"/24")
	if err != nil {
		tb.Fatal(err)
	}
	client := "http://" + netip.AddrPortFrom(cpEtcdIP, cpEtcdPort).String()
	peer := "http://" + netip.AddrPortFrom(cpEtcdIP, cpEtcdPort+1).String()
	cp.etcd, err = etcdHost.Start(filepath.Join(cp.dir, "etcd.log"), childEnv(), filepath.Join(bins, "etcd"),
		"--name", "cp", "--data-dir", filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "cp="+peer,
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		tb.Fatal(err)
	}
	for i, ip := range cpAPIIPs {
		h, err := l.lab.AddHost(fmt.Sprintf("api%d", i+1), ip.String()+"/24")
		if err != nil {
			tb.Fatal(err)
		}
		cp.hosts = append(cp.hosts, h)
	}
	// The third reaches etcd through a relay inside its own host.
	cp.relay = startRelay(tb, cp.hosts[2], netip.AddrPortFrom(cpAPIIPs[2], cpRelayPort), netip.AddrPortFrom(cpEtcdIP, cpEtcdPort))
	cp.apiservers = make([]*netlab.Process, len(cpAPIIPs))
	for i := range cpAPIIPs {
		cp.startAPIServer(i)
	}
	tb.Cleanup(func() {
		for i, p := range append([]*netlab.Process{cp.etcd}, cp.apiservers...) {
			if p == nil {
				continue
			}
			p.Kill()
			name := "etcd"
			if i > 0 {
				name = fmt.Sprintf("kube-apiserver-%d", i)
			}
			if tb.Failed() {
				tb.Logf("---- log of %s, last %d lines ----\n%s", name, logTailLines, tail(filepath.Join(cp.dir, name+".log"), logTailLines))
			}
		}
	})
	for i := range cpAPIIPs {
		waitFor(tb, kubeStartTimeout, fmt.Sprintf("kube-apiserver %d ready", i+1), func() error {
			if !cp.apiservers[i].Running() {
				return errStop(fmt.Errorf("kube-apiserver %d exited", i+1))
			}
			if !cp.etcd.Running() {
				return errStop(errors.New("etcd exited"))
			}
			code, err := cp.readyz(i)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("/readyz answers %d", code)
			}
			return err
		})
	}
	return cp
}

// startAPIServer starts kube-apiserver i in its host. Anonymous requests
// are refused, so its /readyz answers only clients with a certificate of
// the cluster CA (or a token): the LB's checks present one.
func (cp *controlPlane) startAPIServer(i int) {
	cp.tb.Helper()
	ip := cpAPIIPs[i]
	etcd := "http://" + netip.AddrPortFrom(cpEtcdIP, cpEtcdPort).String()
	if i == 2 {
		etcd = "http://" + cp.relay.addr.String()
	}
	name := fmt.Sprintf("kube-apiserver-%d", i+1)
	cert, key := cp.ca.issue(cp.tb, cp.dir, name, false, ip, cpVIP)
	p, err := cp.hosts[i].Start(filepath.Join(cp.dir, name+".log"), childEnv(), filepath.Join(cp.bins, "kube-apiserver"),
		"--etcd-servers", etcd,
		"--bind-address", ip.String(), "--advertise-address", ip.String(),
		"--secure-port", fmt.Sprint(cpPort),
		"--cert-dir", filepath.Join(cp.dir, name+"-certs"),
		"--tls-cert-file", cert, "--tls-private-key-file", key,
		"--client-ca-file", cp.caFile,
		"--anonymous-auth=false",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(cp.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(cp.dir, "sa.key"),
		"--token-auth-file", filepath.Join(cp.dir, "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--enable-priority-and-fairness=false",
		"--v", "0",
	)
	if err != nil {
		cp.tb.Fatal(err)
	}
	cp.apiservers[i] = p
}

// readyz asks apiserver i for /readyz directly from the client host, with
// the health checks' client certificate, and returns the status.
func (cp *controlPlane) readyz(i int) (int, error) {
	cert, err := tls.LoadX509KeyPair(cp.hcCert, cp.hcKey)
	if err != nil {
		return 0, errStop(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.ca.pem)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DialContext:     cp.lab.client.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + netip.AddrPortFrom(cpAPIIPs[i], cpPort).String() + "/readyz")
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// clientset returns a client of the control plane through the VIP, from
// the client host, with a connection of its own.
func (cp *controlPlane) clientset() kubernetes.Interface {
	cp.tb.Helper()
	rc := &rest.Config{
		Host:            "https://" + netip.AddrPortFrom(cpVIP, cpPort).String(),
		BearerToken:     cpAdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca.pem},
		// A Dial of its own keeps client-go from sharing one transport
		// (and so one HTTP/2 connection, one member) between clients.
		Dial: cp.lab.client.DialContext,
		QPS:  1000, Burst: 1000,
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		cp.tb.Fatal(err)
	}
	return c
}

// memberHealth returns, per LB host running, whether it sees member m of
// kube/cp as healthy, as `teapot-lb explain` shows it.
func (cp *controlPlane) memberHealth(n *lbHost, member netip.AddrPort) (map[string]bool, error) {
	out, err := cp.lab.cli(n, "explain", "lb", "kube/cp")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == "apiservers" && f[2] == member.String() {
			seen[f[0]] = f[3] == "yes"
		}
	}
	return seen, nil
}

// relay forwards TCP connections from addr to to; cut closes the ones
// open and closes new ones at once (the port still accepts), until
// restore.
type relay struct {
	addr netip.AddrPort
	mu   sync.Mutex
	cut  bool
	open map[net.Conn]bool
}

func startRelay(tb testing.TB, h *netlab.Host, addr, to netip.AddrPort) *relay {
	tb.Helper()
	r := &relay{addr: addr, open: map[net.Conn]bool{}}
	var ln net.Listener
	if err := h.Do(func() (err error) { ln, err = net.Listen("tcp", addr.String()); return err }); err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		r.setCut(true)
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { r.serve(h, c, to) })
		}
	})
	return r
}

func (r *relay) serve(h *netlab.Host, c net.Conn, to netip.AddrPort) {
	defer c.Close()
	if !r.track(c) {
		return
	}
	defer r.untrack(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := h.DialContext(ctx, "tcp", to.String())
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	if !r.track(up) {
		return
	}
	defer r.untrack(up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// track registers c unless the relay is cut.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return false
	}
	r.open[c] = true
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, c)
}

// setCut cuts (closing every relayed connection) or restores the relay.
func (r *relay) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for c := range r.open {
			c.Close()
		}
	}
}

// startAgent runs the tenant's agent in the client host, against its own
// control plane through the VIP (the kubeconfig names only the VIP), with
// the least-privilege service account of packaging/k8s and credentials
// the operator issued for tenant kube.
func (cp *controlPlane) startAgent(n *lbHost) *netlab.Process {
	cp.tb.Helper()
	k := &kube{tb: cp.tb, client: cp.clientset()}
	k.applyManifest("00-namespace.yaml")
	k.applyManifest("10-rbac.yaml")
	token := k.serviceAccountToken("teapot-lb-system", "teapot-lb-agent")

	out, err := cp.lab.cli(n, "tenant", "credentials", "kube", "-o", "json")
	if err != nil {
		cp.tb.Fatal(err)
	}
	var secret struct {
		StringData map[string]string `json:"stringData"`
	}
	if err := json.Unmarshal([]byte(out), &secret); err != nil {
		cp.tb.Fatalf("tenant credentials -o json: %v: %q", err, out)
	}
	creds := filepath.Join(cp.dir, "agent-credentials")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		cp.tb.Fatal(err)
	}
	for _, key := range []string{"tenant", "servers", "ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(creds, key), []byte(secret.StringData[key]), 0o600); err != nil {
			cp.tb.Fatal(err)
		}
	}
	kc, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "kube",
		"clusters": []any{map[string]any{"name": "kube", "cluster": map[string]any{
			"server": "https://" + netip.AddrPortFrom(cpVIP, cpPort).String(), "certificate-authority-data": cp.ca.pem,
		}}},
		"users":    []any{map[string]any{"name": "agent", "user": map[string]any{"token": token}}},
		"contexts": []any{map[string]any{"name": "kube", "context": map[string]any{"cluster": "kube", "user": "agent"}}},
	})
	if err != nil {
		cp.tb.Fatal(err)
	}
	kubeconfig := filepath.Join(cp.dir, "agent.kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		cp.tb.Fatal(err)
	}
	logPath := filepath.Join(cp.dir, "agent.log")
	// The lease timings are the defaults (renew deadline 10s): a leader
	// whose connection sits on an API server that just lost etcd renews
	// once the LB has taken that server out and closed the connection.
	p, err := cp.lab.client.Start(logPath, childEnv(), cp.lab.binary(), "agent",
		"--kubeconfig", kubeconfig, "--credentials", creds, "--namespace", "teapot-lb-system", "--id", "agent-1")
	if err != nil {
		cp.tb.Fatal(err)
	}
	cp.tb.Cleanup(func() {
		p.Kill()
		if bad := alarming(logPath); bad != "" {
			cp.tb.Errorf("the agent logged %q", bad)
		}
		if cp.tb.Failed() {
			cp.tb.Logf("---- log of the agent, last %d lines ----\n%s", logTailLines, tail(logPath, logTailLines))
		}
	})
	return p
}

// waitServiceVIP creates a LoadBalancer Service of the agent's class in
// the tenant cluster (through the VIP) and waits until the agent has
// written its VIP into the status; it returns the time that took.
func (cp *controlPlane) waitServiceVIP(name string) time.Duration {
	cp.tb.Helper()
	c := cp.clientset()
	start := time.Now()
	waitFor(cp.tb, cpRequestTime*4, "create Service "+name, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cpRequestTime)
		defer cancel()
		_, err := c.CoreV1().Services("default").Create(ctx, lbService("default", name, "teapot-lb.io/lb", 443, nil), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	waitFor(cp.tb, syncTimeout, "the agent to write the VIP of Service "+name, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cpRequestTime)
		defer cancel()
		svc, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(svc.Status.LoadBalancer.Ingress) == 0 {
			return errors.New("no VIP in the status yet")
		}
		return nil
	})
	return time.Since(start)
}
