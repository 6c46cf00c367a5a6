// Package pebbletest runs a real ACME server for tests: pebble and its
// challenge test server (Debian's pebble package ships both), on loopback
// ports, with a DNS that tests can point names at.
package pebbletest

import (
	"bytes"
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

	"github.com/teapot-lb/teapot-lb/api/porttest"
)

// Options configure a Pebble.
type Options struct {
	// HTTPPort and TLSPort are where pebble validates HTTP-01 and
	// TLS-ALPN-01 challenges on the address a name resolves to.
	HTTPPort, TLSPort int
	// Validity is the lifetime of issued certificates (default pebble's).
	Validity time.Duration
	// Addr is the IP pebble listens on and names resolve to by default
	// (default 127.0.0.1).
	Addr string
	// Start runs one of pebble's programs and returns once it started;
	// the default runs it here until the test ends. Labs run it inside a
	// network namespace.
	Start func(logPath string, env []string, bin string, args ...string) error
	// Dial opens connections to pebble's endpoints (default net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DNSServer, when set (IP:port), is the DNS pebble resolves names
	// and validates DNS-01 challenges with, instead of its challenge
	// test server (AddA then has no effect).
	DNSServer string
}

// Pebble is a running ACME server.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// RootsFile is a PEM file that verifies pebble's HTTPS endpoints
	// (--acme-ca-root).
	RootsFile string
	// Roots holds the same certificate.
	Roots *x509.CertPool
	// LogPath holds both processes' output.
	LogPath string

	mgmt, dnsMgmt string
	client        *http.Client
}

// Binaries returns the paths of pebble and pebble-challtestsrv, or skips
// the test when they are not installed.
func Binaries(tb testing.TB) (pebble, challtestsrv string) {
	tb.Helper()
	p, err1 := exec.LookPath("pebble")
	c, err2 := exec.LookPath("pebble-challtestsrv")
	if err1 != nil || err2 != nil {
		tb.Skip("pebble is not installed (apt-get install pebble): the ACME tests need a real ACME server")
	}
	return p, c
}

// Start runs pebble and pebble-challtestsrv until the test ends. Every
// name resolves to 127.0.0.1 unless AddA says otherwise.
func Start(tb testing.TB, opts Options) *Pebble {
	tb.Helper()
	pebbleBin, challBin := Binaries(tb)
	dir := tb.TempDir()
	ip := opts.Addr
	if ip == "" {
		ip = "127.0.0.1"
	}
	ports := freePorts(tb, 4)
	if opts.Start != nil {
		ports = []int{14000, 15000, 8053, 8055} // a namespace of its own
	}
	at := func(port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }
	p := &Pebble{
		Directory: "https://" + at(ports[0]) + "/dir",
		RootsFile: filepath.Join(dir, "pebble-https-root.pem"),
		LogPath:   filepath.Join(dir, "pebble.log"),
		mgmt:      at(ports[1]),
		dnsMgmt:   at(ports[3]),
	}
	certFile, keyFile := p.writeHTTPSCert(tb, dir, ip)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  at(ports[0]),
		"managementListenAddress":        p.mgmt,
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       opts.HTTPPort,
		"tlsPort":                        opts.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"certificateValidityPeriod":      uint64(opts.Validity / time.Second),
	}}
	cfgFile := filepath.Join(dir, "pebble.json")
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	run := opts.Start
	if run == nil {
		run = func(logPath string, env []string, bin string, args ...string) error {
			return start(tb, logPath, env, bin, args...)
		}
	}
	dns := at(ports[2])
	env := append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	if err := run(p.LogPath, env, challBin, "-dns01", dns, "-http01", "", "-https01", "", "-tlsalpn01", "",
		"-management", p.dnsMgmt, "-defaultIPv4", ip, "-defaultIPv6", ""); err != nil {
		tb.Fatal(err)
	}
	if opts.DNSServer != "" {
		dns = opts.DNSServer
	}
	if err := run(p.LogPath, env, pebbleBin, "-config", cfgFile, "-dnsserver", dns); err != nil {
		tb.Fatal(err)
	}
	dial := opts.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	p.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: p.Roots}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get(p.Directory)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.LogPath)
			tb.Fatalf("pebble did not start: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		_, err := p.post("/set-default-ipv4", map[string]string{"ip": ip})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pebble-challtestsrv did not start: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

func start(tb testing.TB, logPath string, env []string, bin string, args ...string) error {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	return nil
}

// writeHTTPSCert makes a CA and a certificate for ip and localhost
// that pebble serves its endpoints with.
func (p *Pebble) writeHTTPSCert(tb testing.TB, dir, ip string) (certFile, keyFile string) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pebble test HTTPS root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "https.pem"), filepath.Join(dir, "https.key")
	write := func(path, typ string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	write(certFile, "CERTIFICATE", der)
	write(keyFile, "PRIVATE KEY", keyDER)
	write(p.RootsFile, "CERTIFICATE", caDER)
	p.Roots = x509.NewCertPool()
	p.Roots.AddCert(ca)
	return certFile, keyFile
}

func (p *Pebble) post(path string, body any) ([]byte, error) {
	data, _ := json.Marshal(body)
	resp, err := p.client.Post("http://"+p.dnsMgmt+path, "application/json", bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, out)
	}
	return out, nil
}

// AddA makes host resolve to addr for pebble.
func (p *Pebble) AddA(tb testing.TB, host, addr string) {
	tb.Helper()
	if _, err := p.post("/add-a", map[string]any{"host": strings.TrimSuffix(host, ".") + ".", "addresses": []string{addr}}); err != nil {
		tb.Fatal(err)
	}
}

// IssuerRoots returns the roots of the certificates pebble issues (they
// change every time pebble starts).
func (p *Pebble) IssuerRoots(tb testing.TB) *x509.CertPool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.mgmt+"/roots/0", nil)
	resp, err := p.client.Do(req)
	if err != nil {
		tb.Fatalf("pebble roots: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if resp.StatusCode != http.StatusOK || !pool.AppendCertsFromPEM(data) {
		tb.Fatalf("pebble roots: %s %q", resp.Status, data)
	}
	return pool
}

// freePorts returns n distinct free TCP (and UDP) ports on 127.0.0.1.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	return porttest.Ports(tb, n)
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(tb testing.TB, n int) []int { return freePorts(tb, n) }
