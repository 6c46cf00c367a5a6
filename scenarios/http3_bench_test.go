package scenarios

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// The HTTP/3 benchmark's addresses: serve's VIP and Caddy's.
const (
	benchH3TeapotVIP = "127.0.0.73"
	benchH3CaddyAddr = "127.0.0.74"
)

// h3Result is one measurement of requests over HTTP/3.
type h3Result struct {
	requests  int64
	perSecond float64
	perCPUSec float64 // per second of the proxy's CPU time
	errors    int64
}

// BenchmarkHTTP3 compares HTTP/3 through serve (an https listener with
// http3, a route to a member) with Caddy (Debian's 2.6, quic-go too)
// reverse-proxying the same member: requests per second of the proxy's
// CPU, the proxies pinned to one core and the clients and the member to
// the other, interleaved rounds, medians reported.
func BenchmarkHTTP3(b *testing.B) {
	for _, tool := range []string{"caddy", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s is not installed", tool)
		}
	}
	body := []byte(strings.Repeat("x", 1024))
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	member := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})}
	go func() { _ = member.Serve(ml) }()
	b.Cleanup(func() { _ = member.Close() })

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
%[2]s
`, benchH3TeapotVIP, benchTenantQuotas())
	lb := fmt.Sprintf(`
kind: LoadBalancer
name: bench
tenant: acme
vip: { pool: bench, address: "%[1]s" }
listeners: [{ port: %[2]d, protocol: https, http3: true, tls: { certificates: [bench] } }]
routes: [{ host: %[3]s, path: /, pool: web }]
pools: { web: { members: ["%[4]s"] } }
`, benchH3TeapotVIP, port, benchTLSHost, ml.Addr().String())
	for i, doc := range []string{manifest, lb} {
		p := filepath.Join(dir, fmt.Sprintf("m%d.yaml", i))
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			b.Fatal(err)
		}
		if i == 1 {
			if _, err := c.cli(n, "cert", "upload", "bench", "--tenant", "acme", "--cert", certFile, "--key", keyFile); err != nil {
				b.Fatal(err)
			}
		}
		if out, err := c.cli(n, "apply", "-f", p); err != nil {
			b.Fatalf("apply: %v\n%s", err, out)
		}
	}
	teapotAddr := net.JoinHostPort(benchH3TeapotVIP, strconv.Itoa(port))
	caddyAddr := net.JoinHostPort(benchH3CaddyAddr, strconv.Itoa(port))
	caddyPid := startCaddy(b, dir, caddyAddr, certFile, keyFile, ml.Addr().String())
	for _, a := range []string{teapotAddr, caddyAddr} {
		if err := waitH3(a, 30*time.Second); err != nil {
			b.Fatalf("%s: %v", a, err)
		}
	}
	n.mu.Lock()
	teapotPid := n.cmd.Process.Pid
	n.mu.Unlock()
	pin(b, teapotPid, benchServerCPU)
	pin(b, os.Getpid(), benchClientCPU)
	b.Cleanup(func() { _ = exec.Command("taskset", "-a", "-cp", "0-1023", strconv.Itoa(os.Getpid())).Run() })

	b.ResetTimer()
	var tps, cps []h3Result
	for range 3 {
		tps = append(tps, measureH3(b, teapotAddr, teapotPid))
		cps = append(cps, measureH3(b, caddyAddr, caddyPid))
	}
	b.StopTimer()
	t, cd := medianH3(tps), medianH3(cps)
	b.ReportMetric(t.perCPUSec, "teapot-req/cpu-s")
	b.ReportMetric(cd.perCPUSec, "caddy-req/cpu-s")
	if cd.perCPUSec > 0 {
		b.ReportMetric(t.perCPUSec/cd.perCPUSec, "teapot/caddy")
	}
	b.Logf("HTTP/3, 1 KiB answers, 4 connections x 16 streams: teapot-lb %.0f req/s, %.0f req/cpu-s (%d errors); caddy %.0f req/s, %.0f req/cpu-s (%d errors)",
		t.perSecond, t.perCPUSec, t.errors, cd.perSecond, cd.perCPUSec, cd.errors)
	if t.errors > 0 || cd.errors > 0 {
		b.Errorf("errors: teapot-lb %d, caddy %d", t.errors, cd.errors)
	}
}

// measureH3 sends requests over 4 HTTP/3 connections with 16 streams
// each for 3 seconds and counts them per second of pid's CPU time.
func measureH3(tb testing.TB, addr string, pid int) h3Result {
	const conns, streams = 4, 16
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	cpu0, start := cpuTime(tb, pid), time.Now()
	for range conns {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost},
			Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				return quic.DialAddr(ctx, addr, tc, qc)
			},
		}
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		url := "https://" + benchTLSHost + "/"
		var cw sync.WaitGroup
		for range streams {
			cw.Go(func() {
				for time.Now().Before(stop) {
					resp, err := cl.Get(url)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					if err != nil {
						failed.Add(1)
						continue
					}
					done.Add(1)
				}
			})
		}
		wg.Go(func() { cw.Wait(); tr.Close() })
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(tb, pid) - cpu0
	r := h3Result{requests: done.Load(), errors: failed.Load()}
	r.perSecond = float64(r.requests) / elapsed.Seconds()
	if cpu > 0 {
		r.perCPUSec = float64(r.requests) / cpu.Seconds()
	}
	return r
}

func medianH3(rs []h3Result) h3Result {
	s := append([]h3Result(nil), rs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j].perCPUSec < s[i].perCPUSec {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// waitH3 waits until a request over HTTP/3 to addr is answered 200.
func waitH3(addr string, timeout time.Duration) error {
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: benchTLSHost},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, addr, tc, qc)
		},
	}
	defer tr.Close()
	cl := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := cl.Get("https://" + benchTLSHost + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startCaddy runs Caddy on benchServerCPU (GOMAXPROCS 1), terminating
// TLS and HTTP/3 on addr with the certificate and proxying to member.
func startCaddy(tb testing.TB, dir, addr, certFile, keyFile, member string) int {
	tb.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cfg := fmt.Sprintf(`{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h3
	}
}
https://%[1]s:%[2]s {
	bind %[3]s
	tls %[4]s %[5]s
	reverse_proxy %[6]s
}
`, benchTLSHost, port, host, certFile, keyFile, member)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("taskset", "-c", benchServerCPU, "caddy", "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	log, err := os.Create(filepath.Join(dir, "caddy.log"))
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
