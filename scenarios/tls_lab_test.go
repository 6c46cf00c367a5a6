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
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/certs/pebbletest"
	"github.com/teapot-lb/teapot-lb/scenarios/netlab"
)

// The TLS lab: three LB hosts and a client host on one bridge
// (192.0.2.0/24). The client host runs pebble (the ACME server), its DNS,
// the tenants' backend and the test's clients. Every LB host accepts the
// VIPs (on its loopback); the client's route for a VIP picks the LB host
// that gets its traffic, pebble's validations included.
const (
	tlsVIP       = "198.51.100.10" // tenant acme
	tlsVIPGlobex = "198.51.100.11" // tenant globex
	tlsClientIP  = "192.0.2.100"
	tlsGlobexIP  = "192.0.2.101"    // globex's backend, on the client host (tenants' networks may not overlap)
	tlsValidity  = 90 * time.Second // of pebble's certificates: renewals come fast
	tlsIssue     = 3 * time.Minute  // an issuance, leader elections included
)

// tlsManifest is what the TLS lab applies.
const tlsManifest = `
kind: VIPPool
name: tls
cidrs: [198.51.100.10/31]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [192.0.2.100/32]
pools: [tls]
quotas: { certificates: 4 }
---
kind: Tenant
name: globex
domains: [globex.example]
networks: [192.0.2.101/32]
pools: [tls]
---
kind: LoadBalancer
name: shop
tenant: acme
vip: { pool: tls, address: "198.51.100.10" }
listeners:
  - { port: 443, protocol: https, tls: { acme: true } }
  - { port: 80, protocol: http }
routes:
%s
pools: { web: { members: ["192.0.2.100:8080"] } }
`

// tlsNode is one LB host of the lab and its teapot-lb process.
type tlsNode struct {
	id, ip  string
	host    *netlab.Host
	dir     string
	logPath string
	args    []string
	proc    *netlab.Process
}

type tlsLab struct {
	tb     testing.TB
	lab    *netlab.Lab
	dir    string
	bin    string
	client *netlab.Host
	nodes  []*tlsNode
	peb    *pebbletest.Pebble
	roots  *x509.CertPool // of the certificates pebble issues
}

func newTLSLab(tb testing.TB) *tlsLab {
	tb.Helper()
	pebbletest.Binaries(tb)
	if err := netlab.Check(); err != nil {
		unavailable(tb, "the TLS lab needs network namespaces: %v", err)
	}
	lab, err := netlab.New()
	if err != nil {
		tb.Fatal(err)
	}
	l := &tlsLab{tb: tb, lab: lab, dir: tb.TempDir(), bin: teapotBinary(tb)}
	tb.Cleanup(func() {
		for _, n := range l.nodes {
			if n.proc != nil {
				n.proc.Kill()
				if bad := alarming(n.logPath); bad != "" {
					tb.Errorf("%s logged %q", n.id, bad)
				}
			}
		}
		if tb.Failed() {
			for _, n := range l.nodes {
				tb.Logf("---- log of %s, last %d lines ----\n%s", n.id, logTailLines, tail(n.logPath, logTailLines))
			}
			if l.peb != nil {
				tb.Logf("---- pebble ----\n%s", tail(l.peb.LogPath, 60))
			}
		}
		if err := lab.Close(); err != nil {
			tb.Errorf("clean up the lab: %v", err)
		}
	})
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	l.client, err = lab.AddHost("client", tlsClientIP+"/24", tlsGlobexIP+"/24")
	must(err)
	for i := range 3 {
		n := &tlsNode{id: fmt.Sprintf("n%d", i+1), ip: fmt.Sprintf("192.0.2.%d", 11+i)}
		n.host, err = lab.AddHost("lb"+n.id[1:], n.ip+"/24")
		must(err)
		for _, vip := range []string{tlsVIP, tlsVIPGlobex} {
			must(n.host.IP("addr", "add", vip+"/32", "dev", "lo"))
		}
		n.dir, n.logPath = filepath.Join(l.dir, n.id), filepath.Join(l.dir, n.id+".log")
		l.nodes = append(l.nodes, n)
	}
	l.serveBackend()
	l.peb = pebbletest.Start(tb, pebbletest.Options{
		HTTPPort: 80, TLSPort: 443, Validity: tlsValidity, Addr: tlsClientIP,
		Start: func(logPath string, env []string, bin string, args ...string) error {
			_, err := l.client.Start(logPath, env, bin, args...)
			return err
		},
		Dial: l.dial,
	})
	for _, h := range []string{"shop.acme.example", "late.acme.example", "api.acme.example"} {
		l.peb.AddA(tb, h, tlsVIP)
	}
	l.peb.AddA(tb, "shop.globex.example", tlsVIPGlobex)
	l.roots = l.peb.IssuerRoots(tb)
	for _, n := range l.nodes {
		n.args = []string{"serve", "--data-dir", n.dir, "--node-id", n.id,
			"--raft-addr", n.ip + ":7300", "--api-addr", n.ip + ":7443",
			"--acme-ca", l.peb.Directory, "--acme-ca-root", l.peb.RootsFile, "--acme-email", "ops@acme.example",
			"--acme-renew-check", "2s",
		}
	}
	l.start(l.nodes[0])
	l.waitMember(l.nodes[0])
	for _, n := range l.nodes[1:] {
		token, err := l.cli(l.nodes[0], "cluster", "join-token")
		must(err)
		l.start(n, "--join", l.nodes[0].ip+":7443", "--token", strings.TrimSpace(token))
		l.waitMember(n)
	}
	l.route(l.nodes[0])
	return l
}

// dial opens a connection from the client host.
func (l *tlsLab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := l.client.Do(func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func (l *tlsLab) serveBackend() {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the backend for %s\n", r.Host)
	}), ReadHeaderTimeout: 5 * time.Second}
	for _, ip := range []string{tlsClientIP, tlsGlobexIP} {
		var ln net.Listener
		if err := l.client.Do(func() (err error) { ln, err = net.Listen("tcp", ip+":8080"); return err }); err != nil {
			l.tb.Fatal(err)
		}
		go srv.Serve(ln)
	}
	l.tb.Cleanup(func() { srv.Close() })
}

func (l *tlsLab) start(n *tlsNode, extra ...string) {
	l.tb.Helper()
	p, err := n.host.Start(n.logPath, childEnv(), l.bin, append(append([]string{}, n.args...), extra...)...)
	if err != nil {
		l.tb.Fatal(err)
	}
	n.proc = p
}

func (l *tlsLab) waitMember(n *tlsNode) {
	l.tb.Helper()
	waitFor(l.tb, startTimeout, n.id+" becomes a member", func() error {
		if !n.proc.Running() {
			return errStop(fmt.Errorf("%s exited", n.id))
		}
		_, err := os.Stat(filepath.Join(n.dir, "admin.conf"))
		return err
	})
}

func (l *tlsLab) kill(n *tlsNode) {
	l.tb.Helper()
	if err := n.proc.Signal(syscall.SIGKILL); err != nil {
		l.tb.Fatal(err)
	}
	_ = n.proc.Wait(10 * time.Second)
}

// cli runs a client command inside an LB host against its own API.
func (l *tlsLab) cli(n *tlsNode, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	args = append(args, "--config", filepath.Join(l.nodes[0].dir, "admin.conf"), "--server", n.ip+":7443")
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.host.NS, l.bin}, args...)...)
	cmd.Env = childEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("teapot-lb %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// live returns a running node.
func (l *tlsLab) live() *tlsNode {
	for _, n := range l.nodes {
		if n.proc.Running() {
			return n
		}
	}
	l.tb.Fatal("no node runs")
	return nil
}

// apply applies a manifest through a live node.
func (l *tlsLab) apply(manifest string) error {
	path := filepath.Join(l.dir, fmt.Sprintf("m%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		return err
	}
	_, err := l.cli(l.live(), "apply", "-f", path)
	return err
}

// route sends the client's (and pebble's) traffic for the VIPs to n.
func (l *tlsLab) route(n *tlsNode) {
	l.tb.Helper()
	for _, vip := range []string{tlsVIP, tlsVIPGlobex} {
		if err := l.client.IP("route", "replace", vip+"/32", "via", n.ip); err != nil {
			l.tb.Fatal(err)
		}
	}
}

// certStatus is the part of `cert get -o json` the tests read.
type certStatus struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Issuer    string `json:"issuer"`
	NotAfter  string `json:"notAfter"`
	LastError string `json:"lastError"`
}

func (l *tlsLab) certStatus(tenant, name string) (certStatus, error) {
	out, err := l.cli(l.live(), "cert", "get", tenant+"/"+name, "-o", "json")
	if err != nil {
		return certStatus{}, err
	}
	var docs []certStatus
	if err := json.Unmarshal([]byte(out), &docs); err != nil {
		var one certStatus
		if err2 := json.Unmarshal([]byte(out), &one); err2 != nil {
			return certStatus{}, fmt.Errorf("cert get -o json: %w: %q", err, out)
		}
		return one, nil
	}
	if len(docs) != 1 {
		return certStatus{}, fmt.Errorf("cert get -o json: %q", out)
	}
	return docs[0], nil
}

// waitValid waits until the certificate's state is valid and, when after
// is set, its not-after is later than after.
func (l *tlsLab) waitValid(tenant, name string, after time.Time, timeout time.Duration) certStatus {
	l.tb.Helper()
	var st certStatus
	waitFor(l.tb, timeout, "certificate "+tenant+"/"+name, func() error {
		var err error
		if st, err = l.certStatus(tenant, name); err != nil {
			return err
		}
		na, _ := time.Parse(time.RFC3339, st.NotAfter)
		if st.State != "valid" || !na.After(after) {
			return fmt.Errorf("state %q not after %s (last error %q)", st.State, st.NotAfter, st.LastError)
		}
		return nil
	})
	return st
}

// page is one HTTPS answer and the certificate that came with it.
type page struct {
	body string
	leaf *x509.Certificate
}

// get fetches https://host/ from the VIP through the node routed now,
// trusting only pebble's roots.
func (l *tlsLab) get(vip, host string) (page, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := l.dial(ctx, "tcp", vip+":443")
	if err != nil {
		return page{}, err
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	c := tls.Client(raw, &tls.Config{ServerName: host, RootCAs: l.roots, NextProtos: []string{"http/1.1"}})
	if err := c.Handshake(); err != nil {
		return page{}, err
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	b, err := io.ReadAll(c)
	if err != nil {
		return page{}, err
	}
	resp := string(b)
	if !strings.HasPrefix(resp, "HTTP/1.1 200") {
		return page{}, fmt.Errorf("answer %q", firstLine(resp))
	}
	_, body, _ := strings.Cut(resp, "\r\n\r\n")
	return page{body: body, leaf: c.ConnectionState().PeerCertificates[0]}, nil
}

// waitPage waits until the node routed now serves host's page with a
// certificate valid past after.
func (l *tlsLab) waitPage(vip, host string, after time.Time, timeout time.Duration) page {
	l.tb.Helper()
	var p page
	waitFor(l.tb, timeout, "https://"+host+" through "+vip, func() error {
		var err error
		if p, err = l.get(vip, host); err != nil {
			return err
		}
		if !p.leaf.NotAfter.After(after) {
			return fmt.Errorf("served a certificate valid until %s, want one past %s", p.leaf.NotAfter, after)
		}
		if !strings.Contains(p.body, "hello from the backend for "+host) {
			return fmt.Errorf("page %q", p.body)
		}
		return nil
	})
	return p
}

// leader returns the live node that leads.
func (l *tlsLab) leader() *tlsNode {
	l.tb.Helper()
	var leader *tlsNode
	waitFor(l.tb, startTimeout, "a leader", func() error {
		out, err := l.cli(l.live(), "cluster", "status", "-o", "json")
		if err != nil {
			return err
		}
		var st struct {
			LeaderID string `json:"leaderId"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return err
		}
		for _, n := range l.nodes {
			if n.id == st.LeaderID && n.proc.Running() {
				leader = n
				return nil
			}
		}
		return fmt.Errorf("leader %q is not a live node", st.LeaderID)
	})
	return leader
}

// servesHTTPS reports whether the data plane opens https listeners; it
// does not when serve runs without an L7 handler.
func (l *tlsLab) servesHTTPS() bool {
	l.tb.Helper()
	var missing bool
	waitFor(l.tb, 30*time.Second, "the data plane to take the load balancer", func() error {
		data, err := os.ReadFile(l.nodes[0].logPath)
		if err != nil {
			return err
		}
		s := string(data)
		if strings.Contains(s, "need the L7 handler") {
			missing = true
			return nil
		}
		if strings.Contains(s, "listeners=2") {
			return nil
		}
		return fmt.Errorf("the data plane has not taken the load balancer yet")
	})
	return !missing
}

func routes(hosts ...string) string {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "  - { host: %s, path: /, pool: web }\n", h)
	}
	return b.String()
}

// selfSignedFiles writes a self-signed ECDSA certificate for host and its
// key, valid for a day, and returns their paths.
func selfSignedFiles(tb testing.TB, dir, host string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, host+".pem"), filepath.Join(dir, host+".key")
	for path, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: kd}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return certFile, keyFile
}
