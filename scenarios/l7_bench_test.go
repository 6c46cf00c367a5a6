package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
)

// The L7 product benchmark: `teapot-lb serve` configured through the CLI,
// HAProxy (one thread) and nginx (one worker) proxy to the same nginx
// member (and gRPC calls to the same h2c member in this process), each
// pinned to core 0; the members and the load generators run on core 1. Each round runs every workload against every proxy in turn
// (interleaved, so that all see the same machine); medians are reported.
// The generator's core saturates near the member's own speed on a 2-core
// machine, so requests per second of proxy CPU (from /proc) are the
// headline; req/s are reported beside them. System calls per request are
// counted after the measured rounds, in one l7CountRun round per workload
// and proxy with perf stat attached (see sysCounter): counting slows the
// proxy, so that round's rates are not reported.
const (
	l7BenchRun     = 5 * time.Second
	l7CountRun     = 3 * time.Second
	l7BenchRounds  = 3
	l7BenchTeapot  = "127.0.0.83"
	l7BenchHAProxy = "127.0.0.84"
	l7BenchNginx   = "127.0.0.85"
)

// l7Workload is one load generator run.
type l7Workload struct {
	name string
	run  func(tb testing.TB, host string, port, tlsPort int, d time.Duration) (requests int64, err error)
}

var l7Workloads = []l7Workload{
	{"http1", func(tb testing.TB, host string, port, _ int, d time.Duration) (int64, error) {
		return runWrk(d, fmt.Sprintf("http://%s:%d/", host, port))
	}},
	{"https1", func(tb testing.TB, host string, _, tlsPort int, d time.Duration) (int64, error) {
		return runWrk(d, fmt.Sprintf("https://%s:%d/", host, tlsPort))
	}},
	{"h2-tls", func(tb testing.TB, host string, _, tlsPort int, d time.Duration) (int64, error) {
		return runH2load(d, fmt.Sprintf("https://%s:%d/", host, tlsPort))
	}},
	{"grpc-unary", func(tb testing.TB, host string, _, tlsPort int, d time.Duration) (int64, error) {
		return runH2load(d, fmt.Sprintf("https://%s:%d%s", host, tlsPort, l7GRPCPath), "-d", l7GRPCRequest,
			"-H", "content-type: application/grpc", "-H", "te: trailers")
	}},
	{"grpc-stream", func(tb testing.TB, host string, _, tlsPort int, d time.Duration) (int64, error) {
		return runH2load(d, fmt.Sprintf("https://%s:%d%s", host, tlsPort, l7GRPCStreamPath), "-d", l7GRPCRequest,
			"-H", "content-type: application/grpc", "-H", "te: trailers")
	}},
}

// l7GRPCPrefix routes the benchmark's gRPC methods to an h2c member:
// l7GRPCPath is a unary call, l7GRPCStreamPath a server-streaming call
// answered with l7GRPCStreamMessages messages, each sent in its own DATA
// frame. l7GRPCRequest is the file holding one gRPC request message.
const (
	l7GRPCPrefix         = "/bench.Echo/"
	l7GRPCPath           = l7GRPCPrefix + "Unary"
	l7GRPCStreamPath     = l7GRPCPrefix + "Stream"
	l7GRPCStreamMessages = 16
)

var l7GRPCRequest string

// startGRPCMember serves l7GRPCPath and l7GRPCStreamPath over h2c in
// this process: each call's message is read and answered with a 13-byte
// message (l7GRPCStreamMessages of them, each flushed, for the stream)
// and grpc-status 0.
func startGRPCMember(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	reply := append([]byte{0, 0, 0, 0, 13}, "hello, world\n"...)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		n := 1
		if r.URL.Path == l7GRPCStreamPath {
			n = l7GRPCStreamMessages
		}
		f, _ := w.(http.Flusher)
		for range n {
			_, _ = w.Write(reply)
			if n > 1 && f != nil {
				f.Flush()
			}
		}
		w.Header().Set("Grpc-Status", "0")
	})
	srv := &http.Server{Handler: h2c.NewHandler(h, &http2.Server{MaxConcurrentStreams: 1000})}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkErrors   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	h2Requests  = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed`)
)

// runBounded runs a load generator for a run of d and returns its
// output. A generator still running a minute after its run should have
// ended waits for answers that do not come (a stalled stream or
// connection): it is killed and that is the error, so a stall fails the
// benchmark instead of hanging it.
func runBounded(d time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running %v after its %v run, killed: answers stalled", d+time.Minute, d)
	}
	return out, err
}

// runWrk runs wrk with 64 connections on core 1 for d and returns the
// requests answered with 2xx.
func runWrk(d time.Duration, url string) (int64, error) {
	out, err := runBounded(d, "taskset", "-c", "1", "wrk", "-t1", "-c64", "-d"+strconv.Itoa(int(d.Seconds()))+"s", url)
	if err != nil {
		return 0, fmt.Errorf("wrk %s: %v\n%s", url, err, out)
	}
	m := wrkRequests.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk %s: no request count\n%s", url, out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	if n == 0 {
		return 0, fmt.Errorf("wrk %s: no request answered\n%s", url, out)
	}
	if e := wrkErrors.FindSubmatch(out); e != nil {
		bad, _ := strconv.ParseInt(string(e[1]), 10, 64)
		if bad > n/100 {
			return 0, fmt.Errorf("wrk %s: %d of %d responses not 2xx/3xx", url, bad, n)
		}
		n -= bad
	}
	return n, nil
}

// runH2load runs h2load over TLS with 32 connections of 10 streams each on
// core 1 for d and returns the requests that succeeded.
func runH2load(d time.Duration, url string, extra ...string) (int64, error) {
	args := append([]string{"-c", "1", "h2load", "-c32", "-m10", "-D", strconv.Itoa(int(d.Seconds()))}, extra...)
	out, err := runBounded(d, "taskset", append(args, url)...)
	if err != nil {
		return 0, fmt.Errorf("h2load %s: %v\n%s", url, err, out)
	}
	m := h2Requests.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("h2load %s: no request count\n%s", url, out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	failed, _ := strconv.ParseInt(string(m[2]), 10, 64)
	if n == 0 || failed > n/100 {
		return 0, fmt.Errorf("h2load %s: %d requests failed, %d succeeded", url, failed, n)
	}
	return n, nil
}

// l7Proxy is one proxy under test.
type l7Proxy struct {
	name          string
	host          string
	port, tlsPort int
	pid           int
}

type l7Sample struct{ perSec, perCPU float64 }

func BenchmarkL7Serve(b *testing.B) {
	for _, tool := range []string{"haproxy", "nginx", "taskset", "wrk", "h2load"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(b, "%s is not installed (Debian packages haproxy, nginx, util-linux, wrk, nghttp2-client)", tool)
		}
	}
	dir := b.TempDir()
	counter := newSysCounter(dir)
	certFile, keyFile := benchCert(b, dir)
	port, tlsPort := freeL7Ports(b)
	member := startNginxMember(b, dir)
	pin(b, os.Getpid(), "1") // the gRPC member runs in this process
	b.Cleanup(func() { _ = exec.Command("taskset", "-a", "-cp", "0-1023", strconv.Itoa(os.Getpid())).Run() })
	grpcMember := startGRPCMember(b)
	l7GRPCRequest = writeConf(b, dir, "grpc-request.bin", string(append([]byte{0, 0, 0, 0, 10}, "0123456789"...)))

	c := newCluster(b)
	n := bootstrapForBench(c)
	tenant := fmt.Sprintf(`
kind: VIPPool
name: l7bench
cidrs: [%[1]s/32]
mode: static
---
kind: Tenant
name: acme
domains: [acme.example]
networks: [127.0.0.1/32]
pools: [l7bench]
%[2]s
`, l7BenchTeapot, benchTenantQuotas())
	lb := fmt.Sprintf(`
kind: LoadBalancer
name: l7bench
tenant: acme
vip: { pool: l7bench, address: "%[1]s" }
listeners:
  - { port: %[2]d, protocol: http }
  - { port: %[3]d, protocol: https, tls: { certificates: [l7bench] } }
routes: [{ path: %[6]s, pool: grpc }, { path: /, pool: web }]
pools:
  web: { members: ["%[4]s"] }
  grpc: { backendProtocol: h2c, members: ["%[5]s"] }
`, l7BenchTeapot, port, tlsPort, member, grpcMember, l7GRPCPrefix)
	for i, doc := range []string{tenant, lb} {
		p := filepath.Join(dir, fmt.Sprintf("l7-%d.yaml", i))
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			b.Fatal(err)
		}
		if i == 1 {
			if _, err := c.cli(n, "cert", "upload", "l7bench", "--tenant", "acme", "--cert", certFile, "--key", keyFile); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := c.cli(n, "apply", "-f", p); err != nil {
			b.Fatal(err)
		}
	}
	if err := waitHandshake(net.JoinHostPort(l7BenchTeapot, strconv.Itoa(tlsPort)), 30*time.Second); err != nil {
		b.Fatal(err)
	}
	n.mu.Lock()
	teapotPid := n.cmd.Process.Pid
	n.mu.Unlock()
	// serve sized its processors from the CPU set it started with (this
	// process's core 1, inherited): one CPU and the spare processor serve
	// adds (GOMAXPROCS 2), as for a user who gives it one core.
	startCPUs := cpusAllowed(b, teapotPid)
	pin(b, teapotPid, "0")

	proxies := []*l7Proxy{
		{name: "teapot-lb", host: l7BenchTeapot, port: port, tlsPort: tlsPort, pid: teapotPid},
		{name: "haproxy", host: l7BenchHAProxy, port: port, tlsPort: tlsPort},
		{name: "nginx", host: l7BenchNginx, port: port, tlsPort: tlsPort},
	}
	proxies[1].pid = startL7Peer(b, dir, "haproxy", l7HAProxyConf(dir, port, tlsPort, member, grpcMember, certFile, keyFile))
	proxies[2].pid = startL7Peer(b, dir, "nginx", l7NginxConf(dir, port, tlsPort, member, grpcMember, certFile, keyFile))
	for _, p := range proxies[1:] {
		if err := waitHandshake(net.JoinHostPort(p.host, strconv.Itoa(p.tlsPort)), 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	workloads := l7Workloads
	if only := os.Getenv("L7_BENCH_WORKLOADS"); only != "" {
		// A diagnostic subset, e.g. L7_BENCH_WORKLOADS=grpc-unary,grpc-stream.
		workloads = slices.DeleteFunc(slices.Clone(workloads), func(w l7Workload) bool {
			return !slices.Contains(strings.Split(only, ","), w.name)
		})
	}
	// L7_BENCH_PROFILE=dir saves a CPU profile of serve for each
	// workload's first round (from /debug/pprof/ on its loopback metrics
	// address) as dir/<workload>.pprof.
	profileDir := os.Getenv("L7_BENCH_PROFILE")
	samples := map[string][]l7Sample{}
	b.ResetTimer()
	for round := range l7BenchRounds {
		for _, w := range workloads {
			for _, p := range proxies {
				var profiled chan error
				if profileDir != "" && round == 0 && p.pid == teapotPid {
					profiled = make(chan error, 1)
					go func() {
						profiled <- saveProfile(n.metricsAddr, l7BenchRun-time.Second, filepath.Join(profileDir, w.name+".pprof"))
					}()
				}
				cpu0, t0 := cpuTime(b, p.pid), time.Now()
				reqs, err := w.run(b, p.host, p.port, p.tlsPort, l7BenchRun)
				if profiled != nil {
					if err := <-profiled; err != nil {
						b.Fatalf("profile of %s: %v", w.name, err)
					}
				}
				if err != nil {
					b.Fatalf("round %d, %s through %s: %v", round+1, w.name, p.name, err)
				}
				el, cpu := time.Since(t0), cpuTime(b, p.pid)-cpu0
				s := l7Sample{perSec: float64(reqs) / el.Seconds()}
				if cpu > 0 {
					s.perCPU = float64(reqs) / cpu.Seconds()
				}
				k := w.name + "/" + p.name
				samples[k] = append(samples[k], s)
			}
		}
	}
	b.StopTimer()
	calls := countL7Calls(b, counter, workloads, proxies)
	med := func(k string, f func(l7Sample) float64) float64 {
		v := slices.SortedFunc(slices.Values(samples[k]), func(x, y l7Sample) int { return cmp.Compare(f(x), f(y)) })
		return f(v[len(v)/2])
	}
	perSec := func(s l7Sample) float64 { return s.perSec }
	perCPU := func(s l7Sample) float64 { return s.perCPU }
	var out strings.Builder
	fmt.Fprintf(&out, "\nL7 through `teapot-lb serve` (started on CPUs %s), proxies on core 0, member and generators on core 1, %d interleaved rounds of %v, medians\n", startCPUs, l7BenchRounds, l7BenchRun)
	out.WriteString("| workload | proxy | req/s | req per proxy CPU-s | req/s vs haproxy | per CPU-s vs haproxy |")
	if counter.err == nil {
		for _, g := range sysGroups {
			fmt.Fprintf(&out, " %s/req |", g.name)
		}
	}
	out.WriteString("\n|---|---|---:|---:|---:|---:|")
	if counter.err == nil {
		out.WriteString(strings.Repeat("---:|", len(sysGroups)))
	}
	out.WriteString("\n")
	for _, w := range workloads {
		hs, hc := med(w.name+"/haproxy", perSec), med(w.name+"/haproxy", perCPU)
		for _, p := range proxies {
			k := w.name + "/" + p.name
			s, c := med(k, perSec), med(k, perCPU)
			fmt.Fprintf(&out, "| %s | %s | %.0f | %.0f | %.2f× | %.2f× |", w.name, p.name, s, c, s/hs, c/hc)
			if counter.err == nil {
				for _, n := range calls[k] {
					fmt.Fprintf(&out, " %.2f |", n)
				}
			}
			out.WriteString("\n")
			b.ReportMetric(s, k+"-req/s")
			b.ReportMetric(c, k+"-req/cpu-s")
		}
	}
	out.WriteString(l7CallsLegend(counter))
	fmt.Print(out.String())
	b.ReportMetric(0, "ns/op")
}

// countL7Calls runs each workload through each proxy once more, for
// l7CountRun, with perf stat counting the proxy's system calls, and
// returns them per request by workload/proxy. The first failure of perf
// sets counter.err and ends the counting: the table then has no system
// call columns and says why. A load generator's failure fails the
// benchmark, as in the measured rounds.
func countL7Calls(b *testing.B, counter *sysCounter, workloads []l7Workload, proxies []*l7Proxy) map[string]sysCalls {
	calls := map[string]sysCalls{}
	if counter.err != nil {
		return calls
	}
	for _, w := range workloads {
		for _, p := range proxies {
			perf, err := counter.start(b, p.pid)
			if err != nil {
				counter.err = fmt.Errorf("%s through %s: %w", w.name, p.name, err)
				return calls
			}
			reqs, err := w.run(b, p.host, p.port, p.tlsPort, l7CountRun)
			if err != nil {
				perf.kill()
				b.Fatalf("counting round, %s through %s: %v", w.name, p.name, err)
			}
			n, err := perf.stop(reqs)
			if err != nil {
				counter.err = fmt.Errorf("%s through %s: %w", w.name, p.name, err)
				return calls
			}
			calls[w.name+"/"+p.name] = n
		}
	}
	return calls
}

// l7CallsLegend says how the system call columns were counted, or why
// there are none.
func l7CallsLegend(c *sysCounter) string {
	if c.err != nil {
		return fmt.Sprintf("system calls not counted: %v\n", c.err)
	}
	var groups []string
	for _, g := range sysGroups {
		var names []string
		for _, e := range g.events {
			names = append(names, strings.TrimPrefix(e, "syscalls:sys_enter_"))
		}
		groups = append(groups, g.name+": "+strings.Join(names, ", "))
	}
	s := fmt.Sprintf("System calls per request by all the proxy's threads, counted by perf stat on the kernel's tracepoints (%s) "+
		"in one unmeasured %v round per workload and proxy after the measured rounds, and divided by the requests that round completed; "+
		"counting costs the proxy CPU, so req/s and per CPU-s come from the measured rounds only\n", strings.Join(groups, "; "), l7CountRun)
	if len(c.missing) > 0 {
		s += fmt.Sprintf("This kernel has no tracepoint for %s: counted as 0\n", strings.Join(c.missing, ", "))
	}
	return s
}

// saveProfile writes a CPU profile of the serve process listening for
// metrics on addr, taken over d, to path.
func saveProfile(addr string, d time.Duration, path string) error {
	resp, err := (&http.Client{Timeout: d + time.Minute}).Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return os.WriteFile(path, body, 0o644)
}

// freeL7Ports returns a port pair free on the three proxies' addresses.
func freeL7Ports(tb testing.TB) (int, int) {
	tb.Helper()
	free := func(port int) bool {
		for _, h := range []string{l7BenchTeapot, l7BenchHAProxy, l7BenchNginx} {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				return false
			}
			l.Close()
		}
		return true
	}
	for range 50 {
		l, err := net.Listen("tcp", l7BenchTeapot+":0")
		if err != nil {
			tb.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p < 65000 && free(p) && free(p+1) {
			return p, p + 1
		}
	}
	tb.Fatal("no free ports")
	return 0, 0
}

// startNginxMember runs the member: nginx, one worker on core 1, a
// 13-byte body. It returns its address.
func startNginxMember(tb testing.TB, dir string) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := fmt.Sprintf(`worker_processes 1;
master_process off;
daemon off;
pid %[1]s/member.pid;
error_log %[1]s/member.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/m-body; proxy_temp_path %[1]s/m-proxy; fastcgi_temp_path %[1]s/m-fcgi;
  uwsgi_temp_path %[1]s/m-uwsgi; scgi_temp_path %[1]s/m-scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {
    listen %[2]s backlog=8192;
    location / { default_type text/plain; return 200 "hello, world\n"; }
  }
}
`, dir, addr)
	startProcess(tb, dir, "member", "1", "nginx", "-e", filepath.Join(dir, "member.stderr"), "-c", writeConf(tb, dir, "member.conf", conf))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nginx member on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// l7HAProxyConf is HAProxy with one thread, adding the forwarding fields
// teapot-lb adds (X-Forwarded-For/-Proto/-Host, Forwarded, X-Request-Id).
func l7HAProxyConf(dir string, port, tlsPort int, member, grpcMember, certFile, keyFile string) string {
	certPEM, _ := os.ReadFile(certFile)
	keyPEM, _ := os.ReadFile(keyFile)
	bundle := filepath.Join(dir, "l7-haproxy.pem")
	_ = os.WriteFile(bundle, append(certPEM, keyPEM...), 0o600)
	return fmt.Sprintf(`global
  nbthread 1
  maxconn 9000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-request 10s
  timeout http-keep-alive 60s
frontend fe
  bind %[1]s:%[2]d
  bind %[1]s:%[3]d ssl crt %[4]s alpn h2,http/1.1
  option forwardfor
  http-request set-header X-Forwarded-Proto %%[ssl_fc,iif(https,http)]
  http-request set-header X-Forwarded-Host %%[req.hdr(host)]
  http-request set-header Forwarded "for=%%[src];host=%%[req.hdr(host)];proto=%%[ssl_fc,iif(https,http)]"
  unique-id-format %%{+X}o\ %%ci:%%cp_%%fi:%%fp_%%Ts_%%rt:%%pid
  unique-id-header X-Request-Id
  use_backend grpc if { path_beg %[7]s }
  default_backend be
backend be
  server s1 %[5]s
backend grpc
  server g1 %[6]s proto h2
`, l7BenchHAProxy, port, tlsPort, bundle, member, grpcMember, l7GRPCPrefix)
}

// l7NginxConf is nginx with one worker, upstream keep-alive and the same
// forwarding fields.
func l7NginxConf(dir string, port, tlsPort int, member, grpcMember, certFile, keyFile string) string {
	return fmt.Sprintf(`worker_processes 1;
master_process off;
daemon off;
pid %[1]s/l7-nginx.pid;
error_log %[1]s/l7-nginx.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/p-body; proxy_temp_path %[1]s/p-proxy; fastcgi_temp_path %[1]s/p-fcgi;
  uwsgi_temp_path %[1]s/p-uwsgi; scgi_temp_path %[1]s/p-scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  http2_max_requests 100000000;
  upstream be { server %[6]s; keepalive 256; keepalive_requests 100000000; }
  server {
    listen %[2]s:%[3]d backlog=8192;
    listen %[2]s:%[4]d ssl http2 backlog=8192;
    ssl_certificate %[7]s;
    ssl_certificate_key %[8]s;
    location / {
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header Forwarded "for=$remote_addr;host=$host;proto=$scheme";
      proxy_set_header X-Request-Id $request_id;
    }
    location %[9]s {
      grpc_pass grpc://%[10]s;
      grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`, dir, l7BenchNginx, port, tlsPort, "", member, certFile, keyFile, l7GRPCPrefix, grpcMember)
}

// startL7Peer starts a peer proxy on core 0 and returns its pid.
func startL7Peer(tb testing.TB, dir, name, conf string) int {
	tb.Helper()
	path := writeConf(tb, dir, "l7-"+name+".conf", conf)
	if name == "haproxy" {
		return startProcess(tb, dir, name, "0", "haproxy", "-db", "-f", path)
	}
	return startProcess(tb, dir, name, "0", "nginx", "-e", filepath.Join(dir, "l7-nginx.stderr"), "-c", path)
}

func writeConf(tb testing.TB, dir, name, content string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// startProcess runs a command pinned to cpu, killed at the end of the
// test, and returns its pid.
func startProcess(tb testing.TB, dir, name, cpu string, args ...string) int {
	tb.Helper()
	cmd := exec.Command("taskset", append([]string{"-c", cpu}, args...)...)
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	return cmd.Process.Pid
}

// cpusAllowed returns the CPUs process pid may run on, as
// /proc/PID/status lists them (Cpus_allowed_list).
func cpusAllowed(tb testing.TB, pid int) string {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	tb.Fatalf("no Cpus_allowed_list in /proc/%d/status", pid)
	return ""
}
