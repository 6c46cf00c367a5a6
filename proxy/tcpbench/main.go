// Command tcpbench compares the bulk TCP throughput of teapot-lb's L4
// path with HAProxy in mode tcp (one thread; as configured by default and
// with option splice-auto, since teapot-lb's copies use splice(2)) and a
// direct connection, measured with iperf3. The proxy under test runs alone on one core
// (taskset); the iperf3 client and server share another.
//
//	go run ./proxy/tcpbench -duration 10s -streams 1,4
//
// It needs taskset, iperf3 and haproxy (Debian packages util-linux,
// iperf3, haproxy). teapot-lb's proxy runs in a child process: this
// program started again as "tcpbench engine".
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/benchproc"
)

func main() {
	benchproc.Main("tcpbench", run, map[string]func([]string) error{"engine": serveEngine})
}

// options of a run.
type options struct {
	duration time.Duration
	streams  []int
	rounds   int
	only     map[string]bool
	proxyCPU string
	loadCPU  string
}

// target is one way to reach the iperf3 server.
type target struct {
	name  string
	addr  string // host:port the client connects to
	start func() (*benchproc.Proc, error)
}

// sample is one measured iperf3 run.
type sample struct {
	gbps float64
	cpu  float64 // share of the proxy core used
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("tcpbench", flag.ContinueOnError)
	var o options
	var streams, only string
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured iperf3 run")
	fs.StringVar(&streams, "streams", "1,4", "comma-separated parallel stream counts (iperf3 -P)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per target and stream count, interleaved; the median is reported")
	fs.StringVar(&only, "only", "", "comma-separated targets to run (direct,teapot,haproxy,haproxy-splice)")
	fs.StringVar(&o.proxyCPU, "proxy-cpu", "0", "core of the proxy under test")
	fs.StringVar(&o.loadCPU, "load-cpu", "1", "core of the iperf3 client and server")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.duration < 2*time.Second || o.duration > 5*time.Minute {
		return o, errors.New("-duration must be in [2s, 5m]")
	}
	if o.rounds < 1 || o.rounds > 10 {
		return o, errors.New("-rounds must be in [1, 10]")
	}
	for _, s := range strings.Split(streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 128 {
			return o, fmt.Errorf("-streams: %q is not a count in [1, 128]", s)
		}
		o.streams = append(o.streams, n)
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(n)] = true
		}
	}
	return o, nil
}

func run(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	for _, tool := range []string{"taskset", "iperf3", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: apt-get install -y iperf3 haproxy util-linux", tool)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, cleanup, err := benchproc.WorkDir("teapot-tcpbench-")
	if err != nil {
		return err
	}
	defer cleanup()

	port, err := freePort()
	if err != nil {
		return err
	}
	server := "127.0.0.1:" + strconv.Itoa(port)
	srv, err := benchproc.Start(dir, "iperf3-server", o.loadCPU, "iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(port))
	if err != nil {
		return err
	}
	defer srv.Stop()
	if err := waitListening(server); err != nil {
		return fmt.Errorf("iperf3 server: %w", err)
	}
	teapotAddr := "127.0.0.2:" + strconv.Itoa(port)
	haAddr := "127.0.0.3:" + strconv.Itoa(port)
	haSpliceAddr := "127.0.0.4:" + strconv.Itoa(port)
	haConf := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(haConf, []byte(haproxyConf(haAddr, server, false)), 0o600); err != nil {
		return err
	}
	haSpliceConf := filepath.Join(dir, "haproxy-splice.cfg")
	if err := os.WriteFile(haSpliceConf, []byte(haproxyConf(haSpliceAddr, server, true)), 0o600); err != nil {
		return err
	}
	targets := []target{
		{name: "direct", addr: server},
		{name: "teapot", addr: teapotAddr, start: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "teapot", o.proxyCPU, self, "engine", "-listen", teapotAddr, "-backend", server)
		}},
		{name: "haproxy", addr: haAddr, start: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "haproxy", o.proxyCPU, "haproxy", "-db", "-f", haConf)
		}},
		{name: "haproxy-splice", addr: haSpliceAddr, start: func() (*benchproc.Proc, error) {
			return benchproc.Start(dir, "haproxy-splice", o.proxyCPU, "haproxy", "-db", "-f", haSpliceConf)
		}},
	}
	if o.only != nil {
		var ts []target
		for _, t := range targets {
			if o.only[t.name] {
				ts = append(ts, t)
			}
		}
		targets = ts
	}

	fmt.Printf("teapot-lb TCP bench: iperf3 %s per run, streams %v, %d round(s), proxy on cpu %s, iperf3 client and server on cpu %s\n",
		o.duration, o.streams, o.rounds, o.proxyCPU, o.loadCPU)
	// samples[target][streams] holds every round.
	samples := map[string]map[int][]sample{}
	for _, t := range targets {
		samples[t.name] = map[int][]sample{}
	}
	for round := 1; round <= o.rounds; round++ {
		fmt.Printf("round %d/%d\n", round, o.rounds)
		for _, n := range o.streams {
			for _, t := range targets {
				s, err := measure(t, o, n)
				if err != nil {
					return fmt.Errorf("%s, %d stream(s): %w", t.name, n, err)
				}
				samples[t.name][n] = append(samples[t.name][n], s)
				cpu := "-"
				if t.start != nil {
					cpu = fmt.Sprintf("%.0f%%", 100*s.cpu)
				}
				fmt.Printf("  %-14s -P %-3d %7.2f Gbit/s  proxy cpu %s\n", t.name, n, s.gbps, cpu)
			}
		}
	}
	printTable(targets, o.streams, samples)
	return nil
}

// measure starts the target's proxy, runs iperf3 through it and stops it.
func measure(t target, o options, streams int) (sample, error) {
	var p *benchproc.Proc
	if t.start != nil {
		var err error
		if p, err = t.start(); err != nil {
			return sample{}, err
		}
		defer p.Stop()
		if err := waitListening(t.addr); err != nil {
			return sample{}, fmt.Errorf("%w; its output: %s", err, p.Output())
		}
	}
	cpu0, w0 := p.CPUTime(), time.Now()
	gbps, err := iperf(o.loadCPU, t.addr, streams, o.duration)
	if err != nil {
		return sample{}, err
	}
	s := sample{gbps: gbps}
	if p != nil {
		s.cpu = (p.CPUTime() - cpu0).Seconds() / time.Since(w0).Seconds()
	}
	return s, nil
}

// iperfOut is the part of iperf3's JSON report read here.
type iperfOut struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}

// iperf runs an iperf3 client to addr and returns the received rate in
// Gbit/s, the first second left out as warm-up.
func iperf(cpu, addr string, streams int, d time.Duration) (float64, error) {
	host, port, _ := strings.Cut(addr, ":")
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.Command("taskset", "-c", cpu, "iperf3", "-c", host, "-p", port,
		"-t", strconv.Itoa(secs), "-O", "1", "-P", strconv.Itoa(streams), "-J")
	b, err := cmd.Output()
	var out iperfOut
	if jerr := json.Unmarshal(b, &out); jerr != nil {
		if err != nil {
			return 0, fmt.Errorf("iperf3: %w", err)
		}
		return 0, fmt.Errorf("iperf3 output: %w", jerr)
	}
	if out.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", out.Error)
	}
	if err != nil {
		return 0, fmt.Errorf("iperf3: %w", err)
	}
	if out.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3 reported no bytes received")
	}
	return out.End.SumReceived.BitsPerSecond / 1e9, nil
}

func medianOf(s []sample) sample {
	s = append([]sample(nil), s...)
	sort.Slice(s, func(i, j int) bool { return s[i].gbps < s[j].gbps })
	return s[len(s)/2]
}

func printTable(targets []target, streams []int, samples map[string]map[int][]sample) {
	fmt.Println()
	fmt.Println("| target | streams | Gbit/s (median) | proxy cpu | vs haproxy | vs haproxy-splice | vs direct |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	ratio := func(a, b []sample) string {
		if len(a) == 0 || len(b) == 0 || medianOf(b).gbps <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", medianOf(a).gbps/medianOf(b).gbps)
	}
	for _, n := range streams {
		for _, t := range targets {
			s := samples[t.name][n]
			m := medianOf(s)
			cpu := "-"
			if t.start != nil {
				cpu = fmt.Sprintf("%.0f%%", 100*m.cpu)
			}
			fmt.Printf("| %s | %d | %.2f | %s | %s | %s | %s |\n", t.name, n, m.gbps, cpu,
				ratio(s, samples["haproxy"][n]), ratio(s, samples["haproxy-splice"][n]), ratio(s, samples["direct"][n]))
		}
	}
}

// haproxyConf is HAProxy forwarding TCP from listen to backend with one
// thread, with option splice-auto when splice is set.
func haproxyConf(listen, backend string, splice bool) string {
	opt := ""
	if splice {
		opt = "  option splice-auto\n"
	}
	return fmt.Sprintf(`global
  nbthread 1
  maxconn 2000
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
%sfrontend fe
  bind %s
  default_backend be
backend be
  server s1 %s
`, opt, listen, backend)
}
