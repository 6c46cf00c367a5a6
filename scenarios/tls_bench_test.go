package scenarios

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The TLS handshake benchmark: teapot-lb and HAProxy terminate TLS with
// the same ECDSA P-256 certificate, each pinned to core 0; the client
// (this process) runs on core 1. A client verifying ECDSA works harder
// than a server signing, so one client core cannot saturate a server
// core: besides handshakes per second, each run reports handshakes per
// second of server CPU (from /proc), and the ratios compare those.
const (
	benchHandshakeRun     = 3 * time.Second // one measurement
	benchHandshakeRounds  = 3               // measurements per server and kind
	benchHandshakeWorkers = 32              // concurrent client connections
	benchServerCPU        = "0"
	benchClientCPU        = "1"
	benchTLSHost          = "bench.acme.example"
	benchTeapotVIP        = "127.0.0.70"
	benchHAProxyAddr      = "127.0.0.71"
)

// hsResult is one measurement.
type hsResult struct {
	handshakes int64
	perSecond  float64
	perCPUSec  float64 // per second of the server's CPU time
	errors     int64
}

func BenchmarkTLSHandshakes(b *testing.B) {
	for _, tool := range []string{"haproxy", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s is not installed", tool)
		}
	}
	dir := b.TempDir()
	certFile, keyFile := benchCert(b, dir)

	c := newCluster(b)
	n := bootstrapForBench(c)
	port := freeBenchPort(b)
	manifest := fmt.Sprintf(`
kind: VIPPool
name: bench
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [bench]
%[4]s
---
kind: LoadBalancer
name: bench
tenant: acme
vip: { pool: bench, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: https, tls: { certificates: [bench] } }]
routes: [{ host: %[3]s, path: /, pool: web }]
pools: { web: { members: ["127.0.0.1:9"] } }
`, benchTeapotVIP, port, benchTLSHost, benchTenantQuotas())
	mpath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(mpath, []byte(manifest), 0o644); err != nil {
		b.Fatal(err)
	}
	tenantOnly := manifest[:strings.Index(manifest, "---\nkind: LoadBalancer")]
	if err := os.WriteFile(mpath+".t", []byte(tenantOnly), 0o644); err != nil {
		b.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", mpath+".t"); err != nil {
		b.Fatal(err)
	}
	if _, err := c.cli(n, "cert", "upload", "bench", "--tenant", "acme", "--cert", certFile, "--key", keyFile); err != nil {
		b.Fatal(err)
	}
	if _, err := c.cli(n, "apply", "-f", mpath); err != nil {
		b.Fatal(err)
	}
	teapotAddr := net.JoinHostPort(benchTeapotVIP, strconv.Itoa(port))
	if err := waitHandshake(teapotAddr, 30*time.Second); err != nil {
		if data, _ := os.ReadFile(n.logPath); strings.Contains(string(data), "need the L7 handler") {
			b.Fatal("serve opens no https listener: the data plane reports that https listeners need the L7 handler")
		}
		b.Fatal(err)
	}

	haproxyAddr := net.JoinHostPort(benchHAProxyAddr, strconv.Itoa(port))
	hapid := startHAProxy(b, dir, haproxyAddr, certFile, keyFile)
	if err := waitHandshake(haproxyAddr, 10*time.Second); err != nil {
		b.Fatal(err)
	}

	n.mu.Lock()
	teapotPid := n.cmd.Process.Pid
	n.mu.Unlock()
	pin(b, teapotPid, benchServerCPU)
	pin(b, os.Getpid(), benchClientCPU)
	b.Cleanup(func() { _ = exec.Command("taskset", "-a", "-cp", "0-1023", strconv.Itoa(os.Getpid())).Run() })

	type run struct {
		name    string
		version uint16
		resume  bool
	}
	runs := []run{
		{"tls1.3-full", tls.VersionTLS13, false},
		{"tls1.3-resumed", tls.VersionTLS13, true},
		{"tls1.2-full", tls.VersionTLS12, false},
		{"tls1.2-resumed", tls.VersionTLS12, true},
	}
	b.ResetTimer()
	for _, r := range runs {
		// Interleaved rounds, so that both servers see the same machine;
		// the medians are reported.
		var tps, hps []hsResult
		for range benchHandshakeRounds {
			tps = append(tps, measureHandshakes(b, teapotAddr, teapotPid, r.version, r.resume))
			hps = append(hps, measureHandshakes(b, haproxyAddr, hapid, r.version, r.resume))
		}
		tp, hp := median(tps), median(hps)
		ratio := tp.perCPUSec / hp.perCPUSec
		b.Logf("%-15s teapot-lb %7.0f/s (%6.0f per CPU-s, %d errors)  haproxy %7.0f/s (%6.0f per CPU-s, %d errors)  ratio per CPU-s %.2f",
			r.name, tp.perSecond, tp.perCPUSec, tp.errors, hp.perSecond, hp.perCPUSec, hp.errors, ratio)
		b.ReportMetric(tp.perSecond, r.name+"-teapot/s")
		b.ReportMetric(hp.perSecond, r.name+"-haproxy/s")
		b.ReportMetric(ratio, r.name+"-ratio")
	}
	b.ReportMetric(0, "ns/op")
}

// median returns the result with the median handshakes per CPU second;
// its errors are the sum of all runs.
func median(rs []hsResult) hsResult {
	sorted := slices.SortedFunc(slices.Values(rs), func(a, b hsResult) int { return cmp.Compare(a.perCPUSec, b.perCPUSec) })
	m := sorted[len(sorted)/2]
	m.errors = 0
	for _, r := range rs {
		m.errors += r.errors
	}
	return m
}

// measureHandshakes runs benchHandshakeWorkers clients doing handshakes
// against addr for benchHandshakeRun and reads the server's CPU time.
// Resumed runs count only resumed handshakes (each worker's first one is
// full).
func measureHandshakes(tb testing.TB, addr string, pid int, version uint16, resume bool) hsResult {
	tb.Helper()
	var done, failed atomic.Int64
	stop := time.Now().Add(benchHandshakeRun)
	cpu0 := cpuTime(tb, pid)
	start := time.Now()
	var wg sync.WaitGroup
	for range benchHandshakeWorkers {
		cfg := &tls.Config{
			ServerName: benchTLSHost, InsecureSkipVerify: true, // the chain is checked once by waitHandshake
			MinVersion: version, MaxVersion: version,
			// Both servers share X25519 (Go would prefer a post-quantum
			// hybrid that HAProxy's OpenSSL lacks); OpenSSL serves an
			// ECDSA certificate over TLS 1.2 only if the client lists its
			// curve.
			CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
			NextProtos:       []string{"http/1.1"},
		}
		if resume {
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
		}
		wg.Go(func() {
			for time.Now().Before(stop) {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				tc := tls.Client(c, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				err = tc.Handshake()
				if err == nil && version == tls.VersionTLS13 && resume {
					// TLS 1.3 tickets arrive after the handshake.
					tc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
					_, _ = tc.Read(make([]byte, 1))
				}
				resumed := err == nil && tc.ConnectionState().DidResume
				c.Close()
				switch {
				case err != nil:
					failed.Add(1)
				case !resume || resumed:
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(tb, pid) - cpu0
	r := hsResult{handshakes: done.Load(), errors: failed.Load()}
	r.perSecond = float64(r.handshakes) / elapsed.Seconds()
	if cpu > 0 {
		r.perCPUSec = float64(r.handshakes) / cpu.Seconds()
	}
	return r
}

// cpuTime is the user plus system CPU time of a process, all threads.
func cpuTime(tb testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// benchTenantQuotas is the quotas line of a serve benchmark's tenant: the
// whole host's CPU. The default budget, a quarter of the CPUs serve
// starts with (500 millicores here), throttles serve to half of the one
// core the benchmark pins it to, and the peer has no such bound.
func benchTenantQuotas() string {
	return fmt.Sprintf("quotas: { cpuMillicores: %d }", 1000*runtime.NumCPU())
}

// bootstrapForBench starts a one-node cluster whose tenants' TLS
// handshakes may use the whole host (serve --tls-cpu-per-tenant; the
// default is a quarter of its CPUs): the CPUs serve starts on, those
// this process may run on now (a benchmark may have pinned itself).
func bootstrapForBench(c *cluster) *node {
	cpus := runtime.NumCPU()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil && set.Count() > 0 {
		cpus = set.Count()
	}
	n := c.newNode()
	c.start(n, "--tls-cpu-per-tenant", strconv.Itoa(cpus))
	c.waitMember(n)
	// Figures taken while a tenant waited for its budget measure the
	// budget, not the proxy.
	c.tb.Cleanup(func() {
		spent, err := scrapeTenantCPU(n)
		if err != nil {
			return
		}
		for tenant, t := range spent {
			if t.throttled > 0 {
				c.tb.Errorf("tenant %s waited %.2fs for its CPU budget (%.2f cores) during the benchmark: its figures measure the budget", tenant, t.throttled, t.cores)
			}
		}
	})
	return n
}

func pin(tb testing.TB, pid int, cpus string) {
	tb.Helper()
	if out, err := exec.Command("taskset", "-a", "-cp", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		tb.Fatalf("taskset %d: %v: %s", pid, err, out)
	}
}

// startHAProxy runs HAProxy with one thread on benchServerCPU,
// terminating TLS on addr with the certificate and answering 200.
func startHAProxy(tb testing.TB, dir, addr, certFile, keyFile string) int {
	tb.Helper()
	certPEM, _ := os.ReadFile(certFile)
	keyPEM, _ := os.ReadFile(keyFile)
	bundle := filepath.Join(dir, "haproxy.pem")
	if err := os.WriteFile(bundle, append(certPEM, keyPEM...), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg := fmt.Sprintf(`global
    nbthread 1
    ssl-default-bind-options ssl-min-ver TLSv1.2
    ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384
    ssl-default-bind-curves X25519:P-256
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tls
    bind %s ssl crt %s alpn h2,http/1.1
    http-request return status 200
`, addr, bundle)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("taskset", "-c", benchServerCPU, "haproxy", "-db", "-f", path)
	log, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	return cmd.Process.Pid
}

// waitHandshake waits until a full, verified handshake with addr works.
func waitHandshake(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d := tls.Dialer{Config: &tls.Config{ServerName: benchTLSHost, InsecureSkipVerify: true}}
		c, err := d.DialContext(ctx, "tcp", addr)
		cancel()
		if err == nil {
			leaf := c.(*tls.Conn).ConnectionState().PeerCertificates[0]
			c.Close()
			if leaf.VerifyHostname(benchTLSHost) != nil {
				return fmt.Errorf("%s served a certificate for %v", addr, leaf.DNSNames)
			}
			if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
				return errors.New(addr + " served a certificate without an ECDSA key")
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no handshake with %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// benchCert writes an ECDSA P-256 certificate for benchTLSHost, signed by
// a throwaway CA, and its key.
func benchCert(tb testing.TB, dir string) (certFile, keyFile string) {
	tb.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: benchTLSHost}, DNSNames: []string{benchTLSHost},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "bench.pem"), filepath.Join(dir, "bench.key")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	if err := os.WriteFile(certFile, chain, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

// freeBenchPort returns a port free on both benchmark addresses.
func freeBenchPort(tb testing.TB) int {
	tb.Helper()
	for range 20 {
		l, err := net.Listen("tcp", benchTeapotVIP+":0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if l2, err := net.Listen("tcp", net.JoinHostPort(benchHAProxyAddr, strconv.Itoa(port))); err == nil {
			l2.Close()
			return port
		}
	}
	tb.Fatal("no free port")
	return 0
}
