package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// writeCA writes a self-signed CA certificate as PEM and returns its path
// and contents.
func writeCA(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, string(data)
}

func TestControlPlaneWritesTheAPIServerLoadBalancer(t *testing.T) {
	caFile, caPEM := writeCA(t)
	fake := newFake()
	fake.put(api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28"}, Mode: "arp"}))
	fake.put(api.Wrap(&pb.Tenant{Name: "acme", Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}))
	args := []string{"lb", "control-plane", "acme", "cp", "--pool", "public", "--members", "10.20.0.11:6443,10.20.0.12:6443", "--members", "10.20.0.13:6443", "--ca-file", caFile}
	if r := run(t, fake, "", args...); r.code != 0 {
		t.Fatalf("control-plane failed: %s", r.stderr)
	}
	if len(fake.applied) != 1 || len(fake.applied[0].GetObjects()) != 1 {
		t.Fatalf("applied %v, want one load balancer", fake.applied)
	}
	if m := fake.applied[0].GetMode(); m != pb.ApplyMode_APPLY_MODE_UPSERT {
		t.Errorf("mode %v, want UPSERT (running it again updates)", m)
	}
	lb := fake.applied[0].GetObjects()[0].GetLoadBalancer()
	l := lb.GetListeners()
	if lb.GetTenant() != "acme" || lb.GetName() != "cp" || lb.GetVip().GetPool() != "public" || len(l) != 1 ||
		l[0].GetPort() != 6443 || l[0].GetProtocol() != "tcp" || l[0].GetIdleTimeout().AsDuration() != time.Hour {
		t.Errorf("load balancer %v", lb)
	}
	p := lb.GetPools()[l[0].GetPool()]
	if p.GetAlgorithm() != "least-request" || len(p.GetMembers()) != 3 || p.GetMembers()[2].GetAddress() != "10.20.0.13:6443" {
		t.Errorf("pool %v", p)
	}
	h := p.GetHealthCheck().GetHttps()
	if h.GetPath() != "/readyz" || h.GetCaPem() != caPEM || h.GetInsecureSkipVerify() || !p.GetHealthCheck().GetCloseOnDown() {
		t.Errorf("health check %v", p.GetHealthCheck())
	}

	// --dry-run is the cluster's check, which the fake (serving no DryRun
	// call, as an older release) refuses: nothing is applied.
	r := run(t, fake, "", append(args, "--dry-run")...)
	if r.code == 0 || !strings.Contains(r.stderr, "without dry runs") || len(fake.applied) != 1 {
		t.Errorf("--dry-run against hosts that do not know dry runs: exit %d, stderr %q, %d applies", r.code, r.stderr, len(fake.applied))
	}
}

func TestControlPlaneRefusesIncompleteFlags(t *testing.T) {
	caFile, _ := writeCA(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool", "public", "--ca-file", caFile}, "needs --members"},
		{[]string{"--members", "10.20.0.11:6443", "--ca-file", caFile}, "needs --pool"},
		{[]string{"--pool", "public", "--members", "10.20.0.11:6443"}, "--ca-file"},
		{[]string{"--pool", "public", "--members", "10.20.0.11:6443", "--ca-file", caFile, "--insecure-skip-verify"}, "not both"},
		{[]string{"--pool", "public", "--members", "10.20.0.11:6443", "--ca-file", "/nonexistent/ca.crt"}, "--ca-file"},
	} {
		fake := newFake()
		r := run(t, fake, "", append([]string{"lb", "control-plane", "acme", "cp"}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want a failure naming %q", tc.args, r.code, r.stderr, tc.want)
		}
		if len(fake.applied) != 0 {
			t.Errorf("%v: applied %v", tc.args, fake.applied)
		}
	}
}

// writeClientPair writes a client certificate and its key as PEM files
// and returns their paths and the key.
func writeClientPair(t *testing.T) (certFile, keyFile, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "teapot-lb-health"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "health.crt"), filepath.Join(dir, "health.key")
	keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(keyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, keyPEM
}

// The client key goes to the cluster and is never printed: the fake
// answers with the key as a host that does not redact would, and no
// output of control-plane, apply, get or list shows it.
func TestControlPlaneNeverPrintsTheClientKey(t *testing.T) {
	caFile, _ := writeCA(t)
	certFile, keyFile, keyPEM := writeClientPair(t)
	keyBody := strings.Split(keyPEM, "\n")[1]
	fake := newFake()
	fake.put(api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28"}, Mode: "arp"}))
	fake.put(api.Wrap(&pb.Tenant{Name: "acme", Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}))
	cp := []string{"lb", "control-plane", "acme", "cp", "--pool", "public", "--members", "10.20.0.11:6443",
		"--ca-file", caFile, "--client-cert", certFile, "--client-key", keyFile}
	for _, args := range [][]string{
		cp,
		append(cp, "-o", "yaml"),
		append(cp, "-o", "json"),
		{"get", "lb", "acme/cp", "-o", "yaml"},
		{"get", "lb", "acme/cp", "-o", "json"},
		{"get", "lb", "acme/cp"},
		{"get", "lbs", "-o", "yaml"},
		{"get", "lbs", "--tenant", "acme", "-o", "json"},
	} {
		r := run(t, fake, "", args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
		}
		if strings.Contains(r.stdout, keyBody) || strings.Contains(r.stderr, keyBody) || strings.Contains(r.stdout, "PRIVATE KEY") {
			t.Errorf("%s prints the client key:\n%s%s", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
	sent := fake.applied[0].GetObjects()[0].GetLoadBalancer().GetPools()["apiservers"].GetHealthCheck().GetHttps()
	if sent.GetClientKeyPem() != keyPEM || sent.GetClientCertPem() == "" {
		t.Fatalf("the key was not sent: %v", sent)
	}
	// The fake stores and returns it: the outputs above left it out
	// themselves.
	if r := run(t, fake, "", "get", "lb", "acme/cp", "-o", "yaml"); !strings.Contains(r.stdout, "CERTIFICATE") {
		t.Errorf("get -o yaml drops the client certificate:\n%s", r.stdout)
	}
}

// A host that reports no feature level (a release before them) answers
// cluster status: the CLI refuses the HTTPS check and closeOnDown before
// it sends anything, naming the fields and the host, since a write that
// enters through such a host and reaches a leader of its release would
// be stored with the fields ignored.
func TestControlPlaneRefusedWhileAHostIsOlder(t *testing.T) {
	caFile, _ := writeCA(t)
	fake := newFake()
	fake.olderHost = "lb2"
	fake.put(api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28"}, Mode: "arp"}))
	fake.put(api.Wrap(&pb.Tenant{Name: "acme", Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}))
	args := []string{"lb", "control-plane", "acme", "cp", "--pool", "public", "--members", "10.20.0.11:6443", "--ca-file", caFile}
	r := run(t, fake, "", args...)
	for _, want := range []string{"pools.", "healthCheck.https (https-health-check)", "healthCheck.closeOnDown (close-on-down)", "needs feature level 2", "lb2 (version 0.9.0) is at level 1", "nothing was written"} {
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Fatalf("with an older host: exit %d, stderr %q, want %q", r.code, r.stderr, want)
		}
	}
	if strings.Contains(r.stderr, "lb1") || strings.Contains(r.stderr, "lb3") || len(fake.applied) != 0 {
		t.Fatalf("named hosts at level 2 or unreachable, or applied %d: %q", len(fake.applied), r.stderr)
	}
	// Load balancers without those fields are written as before.
	plain := "kind: LoadBalancer\nname: plain\ntenant: acme\nvip: { pool: public }\nlisteners: [{ port: 80, protocol: tcp, pool: web }]\n" +
		"pools: { web: { members: [10.20.0.11:80], healthCheck: { tcp: {} } } }\n"
	if r := run(t, fake, plain, "apply", "-f", "-"); r.code != 0 || len(fake.applied) != 1 {
		t.Fatalf("a load balancer without level-2 fields: exit %d, %q", r.code, r.stderr)
	}
	fake.olderHost = ""
	if r := run(t, fake, "", args...); r.code != 0 || len(fake.applied) != 2 {
		t.Fatalf("once every host is at level 2: exit %d, %q", r.code, r.stderr)
	}
}
