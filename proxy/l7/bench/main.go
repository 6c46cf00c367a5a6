// Command bench compares teapot-lb's L7 engine with HAProxy, nginx and a
// direct connection on this machine: HTTP/1.1 keep-alive throughput and
// latency with wrk, p99 latency at half of HAProxy's maximum rate with a
// rate-limited generator, and HTTP/2 over TLS with h2load. The proxy under
// test runs alone on one core (taskset); the backend (nginx, one worker)
// and the load generators share another.
//
//	go run ./proxy/l7/bench -duration 10s -connections 50
//
// It needs taskset, wrk, haproxy, nginx and h2load (Debian packages
// util-linux, wrk, haproxy, nginx, nghttp2-client).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/benchproc"
)

func main() {
	benchproc.Main("bench", run, map[string]func([]string) error{"engine": serveEngine, "loadgen": runLoadgen})
}

// options of a run.
type options struct {
	duration    time.Duration
	warmup      time.Duration
	connections int
	proxyCPU    string
	loadCPU     string
	h2          bool
	profile     string
	only        string
	rounds      int
	quietWait   time.Duration
}

// result of one target.
type result struct {
	name        string
	rps         float64
	p50, p99    time.Duration
	non2xx      int
	cpu         float64   // share of the proxy core used
	perCore     []float64 // req/s per proxy core second, every round
	half        *loadResult
	h2rps       float64
	h2mean      time.Duration
	h2failed    int
	h2attempted bool
}

func run(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var o options
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured load run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "load before each measured run")
	fs.IntVar(&o.connections, "connections", 50, "client connections")
	fs.StringVar(&o.proxyCPU, "proxy-cpu", "0", "core of the proxy under test")
	fs.StringVar(&o.loadCPU, "load-cpu", "1", "core of the backend and the load generators")
	fs.BoolVar(&o.h2, "h2", true, "also run HTTP/2 over TLS with h2load")
	fs.StringVar(&o.profile, "cpuprofile", "", "write the teapot engine's CPU profile here")
	fs.StringVar(&o.only, "only", "", "comma-separated targets to run (direct,teapot,teapot+obs,haproxy,haproxy-min,nginx; teapot+obs records metrics, scraped every second)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per target, interleaved; the median is reported")
	fs.DurationVar(&o.quietWait, "quiet-wait", 60*time.Second, "how long to wait for other processes to leave the CPUs before each run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.duration <= 0 || o.duration > 5*time.Minute || o.connections <= 0 || o.connections > 10000 || o.rounds < 1 || o.rounds > 10 {
		return errors.New("-duration must be in (0, 5m], -connections in (0, 10000] and -rounds in [1, 10]")
	}
	for _, tool := range []string{"taskset", "wrk", "haproxy", "nginx"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: apt-get install -y haproxy nginx wrk nghttp2-client", tool)
		}
	}
	if _, err := exec.LookPath("h2load"); err != nil && o.h2 {
		fmt.Println("h2load not found: skipping HTTP/2")
		o.h2 = false
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// On SIGINT or SIGTERM: stop what runs, remove the files, exit.
	dir, cleanup, err := benchproc.WorkDir("teapot-bench-")
	if err != nil {
		return err
	}
	defer cleanup()
	cert, key, pem, err := writeCert(dir)
	if err != nil {
		return err
	}

	ports, err := freePorts(11)
	if err != nil {
		return err
	}
	bport := ports[0]
	bconf, err := writeFile(dir, "nginx-backend.conf", nginxBackendConf(dir, bport))
	if err != nil {
		return err
	}
	backend, err := benchproc.Start(dir, "backend", o.loadCPU, "nginx", "-e", filepath.Join(dir, "nginx-backend.stderr"), "-c", bconf)
	if err != nil {
		return err
	}
	defer backend.Stop()
	if err := waitPort(bport); err != nil {
		return fmt.Errorf("backend nginx: %w", err)
	}

	type target struct {
		name     string
		port     int
		tlsPort  int
		startCmd func() (*benchproc.Proc, error)
	}
	engineArgs := []string{"engine", "-listen", addr(ports[1]), "-tls-listen", addr(ports[2]), "-cert", cert, "-key", key, "-backend", addr(bport)}
	if o.profile != "" {
		engineArgs = append(engineArgs, "-cpuprofile", o.profile)
	}
	haConf, err := writeFile(dir, "haproxy.cfg", haproxyConf(ports[3], ports[4], bport, pem, true))
	if err != nil {
		return err
	}
	haMinConf, err := writeFile(dir, "haproxy-min.cfg", haproxyConf(ports[5], ports[6], bport, pem, false))
	if err != nil {
		return err
	}
	ngConf, err := writeFile(dir, "nginx-proxy.conf", nginxProxyConf(dir, ports[7], bport))
	if err != nil {
		return err
	}
	targets := []target{
		{name: "direct", port: bport},
		{name: "teapot", port: ports[1], tlsPort: ports[2], startCmd: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "teapot", o.proxyCPU, self, engineArgs...)
		}},
		{name: "teapot+obs", port: ports[9], tlsPort: ports[10], startCmd: func() (*benchproc.Proc, error) {
			args := []string{"engine", "-listen", addr(ports[9]), "-tls-listen", addr(ports[10]), "-cert", cert, "-key", key, "-backend", addr(bport), "-metrics"}
			return benchproc.Start(dir, "teapot-obs", o.proxyCPU, self, args...)
		}},
		{name: "haproxy", port: ports[3], tlsPort: ports[4], startCmd: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "haproxy", o.proxyCPU, "haproxy", "-db", "-f", haConf)
		}},
		{name: "haproxy-min", port: ports[5], tlsPort: ports[6], startCmd: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "haproxy-min", o.proxyCPU, "haproxy", "-db", "-f", haMinConf)
		}},
		{name: "nginx", port: ports[7], startCmd: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "nginx-proxy", o.proxyCPU, "nginx", "-e", filepath.Join(dir, "nginx-proxy.stderr"), "-c", ngConf)
		}},
	}
	if o.only != "" {
		keep := map[string]bool{}
		for _, n := range strings.Split(o.only, ",") {
			keep[strings.TrimSpace(n)] = true
		}
		var ts []target
		for _, t := range targets {
			if keep[t.name] {
				ts = append(ts, t)
			}
		}
		targets = ts
	}

	fmt.Printf("teapot-lb L7 bench: %d connections, %s per run, proxy on cpu %s, backend and load on cpu %s\n",
		o.connections, o.duration, o.proxyCPU, o.loadCPU)
	results := make([]*result, len(targets))
	runs := make([][]wrkRun, len(targets))
	noisy := 0
	for i, t := range targets {
		results[i] = &result{name: t.name}
	}
	startTarget := func(t target) (*benchproc.Proc, error) {
		if t.startCmd == nil {
			return nil, nil
		}
		p, err := t.startCmd()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		if err := waitPort(t.port); err != nil {
			p.Stop()
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		return p, nil
	}
	for round := 1; round <= o.rounds; round++ {
		fmt.Printf("round %d/%d (wrk -t1 -c%d -d%s, keep-alive)\n", round, o.rounds, o.connections, o.duration)
		for i, t := range targets {
			p, err := startTarget(t)
			if err != nil {
				return err
			}
			url := fmt.Sprintf("http://127.0.0.1:%d/", t.port)
			quiet := waitQuiet(o.quietWait)
			if _, err := wrk(o.loadCPU, url, o.connections, o.warmup); err != nil {
				p.Stop()
				return fmt.Errorf("%s warm-up: %w", t.name, err)
			}
			cpu0 := p.CPUTime()
			w0 := time.Now()
			out, err := wrk(o.loadCPU, url, o.connections, o.duration)
			cpu := 0.0
			if p != nil {
				cpu = (p.CPUTime() - cpu0).Seconds() / time.Since(w0).Seconds()
			}
			p.Stop()
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			runs[i] = append(runs[i], wrkRun{out: out, cpu: cpu, noisy: !quiet})
			if !quiet {
				noisy++
			}
			fmt.Printf("  %-12s %10.0f req/s  p50 %8s  p99 %8s  proxy cpu %3.0f%%\n", t.name, out.rps, out.p50, out.p99, 100*cpu)
		}
	}
	for i := range targets {
		m := median(runs[i])
		r := results[i]
		r.rps, r.p50, r.p99, r.cpu = m.out.rps, m.out.p50, m.out.p99, m.cpu
		for _, run := range runs[i] {
			if run.cpu > 0 {
				r.perCore = append(r.perCore, run.out.rps/run.cpu)
			}
		}
	}
	if o.h2 {
		fmt.Printf("HTTP/2 over TLS (h2load -c%d -m10 -D%s) to an HTTP/1.1 member:\n", o.connections, o.duration)
		for i, t := range targets {
			if t.tlsPort == 0 {
				continue
			}
			p, err := startTarget(t)
			if err != nil {
				return err
			}
			r := results[i]
			r.h2attempted = true
			if !waitQuiet(o.quietWait) {
				noisy++
			}
			h, err := h2load(o.loadCPU, fmt.Sprintf("https://127.0.0.1:%d/", t.tlsPort), o.connections, o.duration)
			p.Stop()
			if err != nil {
				fmt.Printf("  %-12s h2load: %v\n", t.name, err)
				continue
			}
			r.h2rps, r.h2mean, r.h2failed = h.rps, h.mean, h.failed
			fmt.Printf("  %-12s %10.0f req/s  mean %8s  failed %d\n", t.name, h.rps, h.mean, h.failed)
		}
	}

	// p99 at half of HAProxy's maximum rate, every target at the same rate.
	var ha *result
	for _, r := range results {
		if r.name == "haproxy" {
			ha = r
		}
	}
	if ha != nil && ha.rps > 0 {
		rate := ha.rps / 2
		fmt.Printf("p99 at %.0f req/s (half of HAProxy's median maximum), %d connections, latency from each request's scheduled start:\n", rate, o.connections)
		halves := make([][]*loadResult, len(targets))
		for round := 1; round <= o.rounds; round++ {
			for i, t := range targets {
				p, err := startTarget(t)
				if err != nil {
					return err
				}
				if !waitQuiet(o.quietWait) {
					noisy++
				}
				half, err := loadgen(self, o.loadCPU, addr(t.port), rate, o.connections, o.duration)
				p.Stop()
				if err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				halves[i] = append(halves[i], half)
				fmt.Printf("  %-12s p50 %6.0fµs  p99 %6.0fµs  p99.9 %6.0fµs  errors %d %s\n", t.name, half.P50us, half.P99us, half.P999us, half.Errors, half.FirstError)
			}
		}
		for i := range targets {
			h := halves[i]
			sort.Slice(h, func(a, b int) bool { return h[a].P99us < h[b].P99us })
			results[i].half = h[len(h)/2]
		}
	}
	printTable(results)
	printObservability(results)
	if noisy > 0 {
		fmt.Printf("\n%d runs had other processes using more than %.0f%% of the CPUs: treat the figures with care.\n", noisy, 100*quietThreshold)
	}
	return nil
}

// wrkRun is one measured wrk run.
type wrkRun struct {
	out   wrkOut
	cpu   float64
	noisy bool
}

// median returns the run with the median req/s.
func median(runs []wrkRun) wrkRun {
	s := append([]wrkRun(nil), runs...)
	sort.Slice(s, func(i, j int) bool { return s[i].out.rps < s[j].out.rps })
	return s[len(s)/2]
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func printTable(results []*result) {
	var ha *result
	for _, r := range results {
		if r.name == "haproxy" {
			ha = r
		}
	}
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	fmt.Println()
	fmt.Println("| target | req/s (median) | p50 | p99 | proxy cpu | req/s per proxy core | req/s vs haproxy | per core vs haproxy | p99 @ half haproxy max | p99@half vs haproxy | h2 req/s | h2 vs haproxy |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		halfP99, halfRatio, h2, h2ratio, cpu, perCore, perCoreRatio, rpsRatio := "-", "-", "-", "-", "-", "-", "-", "-"
		pc := medianOf(r.perCore)
		if ha != nil {
			rpsRatio = ratio(r.rps, ha.rps)
			perCoreRatio = ratio(pc, medianOf(ha.perCore))
		}
		if r.cpu > 0 {
			cpu = fmt.Sprintf("%.0f%%", 100*r.cpu)
			perCore = fmt.Sprintf("%.0f", pc)
		}
		if r.half != nil {
			halfP99 = fmt.Sprintf("%.0fµs", r.half.P99us)
			if ha != nil && ha.half != nil {
				halfRatio = ratio(r.half.P99us, ha.half.P99us)
			}
		}
		if r.h2attempted {
			h2 = fmt.Sprintf("%.0f", r.h2rps)
			if ha != nil {
				h2ratio = ratio(r.h2rps, ha.h2rps)
			}
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.name, r.rps, r.p50, r.p99, cpu, perCore, rpsRatio, perCoreRatio, halfP99, halfRatio, h2, h2ratio)
	}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitPort(port int) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("port %d did not open within 10s", port)
}

type wrkOut struct {
	rps      float64
	p50, p99 time.Duration
	non2xx   int
}

var (
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	reP50    = regexp.MustCompile(`\s50%\s+([\d.]+)(us|ms|s)`)
	reP99    = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s)`)
	reNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	reSockE  = regexp.MustCompile(`Socket errors: (.*)`)
)

func wrk(cpu, url string, conns int, d time.Duration) (wrkOut, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.Command("taskset", "-c", cpu, "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(secs)+"s", "--latency", url)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		return wrkOut{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	var w wrkOut
	m := reRPS.FindStringSubmatch(out)
	if m == nil {
		return w, fmt.Errorf("wrk output without Requests/sec: %s", out)
	}
	w.rps, _ = strconv.ParseFloat(m[1], 64)
	w.p50 = wrkDuration(reP50.FindStringSubmatch(out))
	w.p99 = wrkDuration(reP99.FindStringSubmatch(out))
	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		w.non2xx, _ = strconv.Atoi(m[1])
		return w, fmt.Errorf("%d responses were not 2xx or 3xx", w.non2xx)
	}
	if m := reSockE.FindStringSubmatch(out); m != nil {
		return w, fmt.Errorf("socket errors: %s", m[1])
	}
	return w, nil
}

func wrkDuration(m []string) time.Duration {
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[m[2]]
	return time.Duration(v * float64(unit)).Round(time.Microsecond)
}

type h2Out struct {
	rps    float64
	mean   time.Duration
	failed int
}

var (
	reH2RPS  = regexp.MustCompile(`finished in [^,]+, ([\d.]+) req/s`)
	reH2Req  = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed`)
	reH2Time = regexp.MustCompile(`time for request:\s+\S+\s+\S+\s+(\S+)`)
)

func h2load(cpu, url string, conns int, d time.Duration) (h2Out, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.Command("taskset", "-c", cpu, "h2load", "-c", strconv.Itoa(conns), "-m", "10", "-D", strconv.Itoa(secs), "--warm-up-time=1", url)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		return h2Out{}, fmt.Errorf("%w: %s", err, out)
	}
	var h h2Out
	m := reH2RPS.FindStringSubmatch(out)
	if m == nil {
		return h, fmt.Errorf("h2load output without req/s: %s", out)
	}
	h.rps, _ = strconv.ParseFloat(m[1], 64)
	if m := reH2Req.FindStringSubmatch(out); m != nil {
		h.failed, _ = strconv.Atoi(m[1])
	}
	if m := reH2Time.FindStringSubmatch(out); m != nil {
		h.mean, _ = time.ParseDuration(strings.Replace(m[1], "us", "µs", 1))
	}
	return h, nil
}

func loadgen(self, cpu, target string, rate float64, conns int, d time.Duration) (*loadResult, error) {
	cmd := exec.Command("taskset", "-c", cpu, self, "loadgen", "-addr", target,
		"-rate", strconv.FormatFloat(rate, 'f', 0, 64), "-connections", strconv.Itoa(conns), "-duration", d.String())
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	var r loadResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("loadgen output: %w", err)
	}
	return &r, nil
}

// printObservability compares the engine with metrics on and off.
func printObservability(results []*result) {
	var off, on *result
	for _, r := range results {
		switch r.name {
		case "teapot":
			off = r
		case "teapot+obs":
			on = r
		}
	}
	if off == nil || on == nil || off.rps == 0 {
		return
	}
	fmt.Printf("\nmetrics on vs off (HTTP/1.1 keep-alive, median): %.0f vs %.0f req/s (%+.1f%%); per proxy core second %.0f vs %.0f\n",
		on.rps, off.rps, 100*(on.rps/off.rps-1), medianOf(on.perCore), medianOf(off.perCore))
}
