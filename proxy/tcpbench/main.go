// Command tcpbench compares the bulk TCP throughput of teapot-lb's L4
// path, on each data path (epoll: splice(2) on Go's netpoller; io_uring:
// the ring relay), with HAProxy in mode tcp (one thread; as configured by
// default and with option splice-auto) and the kernel path with no proxy
// (iperf3 client to server directly: the limit), measured with iperf3.
// The proxy under test runs alone on one core (taskset); the iperf3
// client and server share another. With perf installed it also counts
// the proxy's system calls per MiB relayed, and, in a second phase of
// short connections to an echo member, per connection. A third phase
// echoes small messages on kept-alive connections (-exchange-conns,
// -exchange-bytes), the pattern of HTTP/1.1 keep-alive traffic, and gives
// exchanges per proxy CPU-second and system calls per exchange.
//
//	go run ./proxy/tcpbench -duration 10s -streams 1,4 -data-path epoll,io_uring
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
	paths    []string
	conns    int
	// exchangeConns kept-alive connections echo exchangeBytes at a time
	// in the exchange phase (exchangePhase); 0 skips it.
	exchangeConns, exchangeBytes int
}

// target is one way to reach the iperf3 server.
type target struct {
	name string
	addr string // host:port the client connects to
	// start starts the proxy forwarding addr to backend.
	start func(backend string) (*benchproc.Proc, error)
}

// sample is one measured iperf3 run.
type sample struct {
	gbps     float64
	cpu      float64 // share of the proxy core used
	syscalls int64   // the proxy's system calls in the measured window; -1: not counted
	mib      float64 // MiB received in the measured window
	load     string  // 1-minute load average after the run
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("tcpbench", flag.ContinueOnError)
	var o options
	var streams, only string
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured iperf3 run")
	fs.StringVar(&streams, "streams", "1,4", "comma-separated parallel stream counts (iperf3 -P)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per target and stream count, interleaved; the median is reported")
	fs.StringVar(&only, "only", "", "comma-separated targets to run (direct,teapot-epoll,teapot-io_uring,haproxy,haproxy-splice; teapot is both teapot targets)")
	var paths string
	fs.StringVar(&paths, "data-path", "epoll,io_uring", "comma-separated data paths of teapot-lb to measure (epoll, io_uring)")
	fs.IntVar(&o.conns, "conns", 1000, "short connections per proxy in the per-connection phase (0 skips it)")
	fs.IntVar(&o.exchangeConns, "exchange-conns", 64, "kept-alive connections per target in the exchange phase, each echoing -exchange-bytes at a time (0 skips it)")
	fs.IntVar(&o.exchangeBytes, "exchange-bytes", 256, "bytes of each exchange in the exchange phase")
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
	if o.exchangeConns < 0 || o.exchangeConns > 1000 {
		return o, errors.New("-exchange-conns must be in [0, 1000]")
	}
	if o.exchangeBytes < 1 || o.exchangeBytes > 64<<10 {
		return o, errors.New("-exchange-bytes must be in [1, 65536]")
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
			n = strings.TrimSpace(n)
			o.only[n] = true
			if n == "teapot" {
				o.only["teapot-epoll"], o.only["teapot-io_uring"] = true, true
			}
		}
	}
	for _, p := range strings.Split(paths, ",") {
		switch p = strings.TrimSpace(p); p {
		case "epoll", "io_uring":
			o.paths = append(o.paths, p)
		default:
			return o, fmt.Errorf("-data-path: %q is not epoll or io_uring", p)
		}
	}
	if o.conns < 0 || o.conns > 100000 {
		return o, errors.New("-conns must be in [0, 100000]")
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
	haAddr := "127.0.0.3:" + strconv.Itoa(port)
	haSpliceAddr := "127.0.0.4:" + strconv.Itoa(port)
	haproxy := func(name, listen string, splice bool) func(string) (*benchproc.Proc, error) {
		return func(backend string) (*benchproc.Proc, error) {
			conf := filepath.Join(dir, name+".cfg")
			if err := os.WriteFile(conf, []byte(haproxyConf(listen, backend, splice)), 0o600); err != nil {
				return nil, err
			}
			return benchproc.Start(dir, name, o.proxyCPU, "haproxy", "-db", "-f", conf)
		}
	}
	targets := []target{{name: "direct", addr: server}}
	for i, path := range o.paths {
		name, addr := "teapot-"+path, fmt.Sprintf("127.0.0.%d:%d", 5+i, port)
		targets = append(targets, target{name: name, addr: addr, start: func(backend string) (*benchproc.Proc, error) {
			return benchproc.Start(dir, name, o.proxyCPU, self, "engine", "-listen", addr, "-backend", backend, "-data-path", path)
		}})
	}
	targets = append(targets,
		target{name: "haproxy", addr: haAddr, start: haproxy("haproxy", haAddr, false)},
		target{name: "haproxy-splice", addr: haSpliceAddr, start: haproxy("haproxy-splice", haSpliceAddr, true)},
	)
	if o.only != nil {
		var ts []target
		for _, t := range targets {
			if o.only[t.name] {
				ts = append(ts, t)
			}
		}
		targets = ts
	}

	fmt.Printf("teapot-lb TCP bench: iperf3 %s per run, streams %v, %d round(s), proxy on cpu %s, iperf3 client and server on cpu %s, load average %s\n",
		o.duration, o.streams, o.rounds, o.proxyCPU, o.loadCPU, loadAvg())
	// samples[target][streams] holds every round.
	samples := map[string]map[int][]sample{}
	for _, t := range targets {
		samples[t.name] = map[int][]sample{}
	}
	for round := 1; round <= o.rounds; round++ {
		fmt.Printf("round %d/%d\n", round, o.rounds)
		for _, n := range o.streams {
			for _, t := range targets {
				s, err := measure(dir, t, o, n, server)
				if err != nil {
					return fmt.Errorf("%s, %d stream(s): %w", t.name, n, err)
				}
				samples[t.name][n] = append(samples[t.name][n], s)
				cpu := "-"
				if t.start != nil {
					cpu = fmt.Sprintf("%.0f%%", 100*s.cpu)
				}
				fmt.Printf("  %-16s -P %-3d %7.2f Gbit/s  proxy cpu %-5s syscalls/MiB %-6s load %s\n", t.name, n, s.gbps, cpu, perMiB(s), s.load)
			}
		}
	}
	printTable(targets, o.streams, samples)
	if o.conns > 0 {
		if err := connPhase(dir, targets, o); err != nil {
			return err
		}
	}
	if o.exchangeConns > 0 {
		return exchangePhase(dir, targets, o)
	}
	return nil
}

// connPhase measures what short connections cost each proxy: o.conns
// connections, one after another, each sending 1 KiB to an echo member,
// ending its half and reading the echo to the end.
func connPhase(dir string, targets []target, o options) error {
	ln, err := sink()
	if err != nil {
		return err
	}
	defer ln.Close()
	msg := make([]byte, 1<<10)
	fmt.Printf("\n%d short connections (1 KiB echoed, half-close) per proxy:\n\n", o.conns)
	fmt.Println("| target | syscalls / connection | proxy CPU ms / connection | load |")
	fmt.Println("|---|---:|---:|---:|")
	for _, t := range targets {
		if t.start == nil {
			continue
		}
		p, err := t.start(ln.Addr().String())
		if err != nil {
			return err
		}
		if err := waitListening(t.addr); err != nil {
			p.Stop()
			return fmt.Errorf("%s: %w; its output: %s", t.name, err, p.Output())
		}
		s, err := shortConns(dir, p, t.addr, o.conns, msg)
		p.Stop()
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		per := "-"
		if s.syscalls >= 0 {
			per = fmt.Sprintf("%.1f", float64(s.syscalls)/float64(s.conns))
		}
		fmt.Printf("| %s | %s | %.3f | %s |\n", t.name, per, 1000*s.cpu/float64(s.conns), loadAvg())
	}
	return nil
}

// perMiB is a sample's system calls per MiB relayed ("-" when not
// counted).
func perMiB(s sample) string {
	if s.syscalls < 0 || s.mib <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(s.syscalls)/s.mib)
}

// measure starts the target's proxy, runs iperf3 through it and stops it.
func measure(dir string, t target, o options, streams int, server string) (sample, error) {
	var p *benchproc.Proc
	if t.start != nil {
		var err error
		if p, err = t.start(server); err != nil {
			return sample{}, err
		}
		defer p.Stop()
		if err := waitListening(t.addr); err != nil {
			return sample{}, fmt.Errorf("%w; its output: %s", err, p.Output())
		}
	}
	// The system calls are counted over the measured seconds, after
	// iperf3's omitted first one.
	counted := make(chan *syscallCounter, 1)
	go func() {
		time.Sleep(time.Second)
		counted <- countSyscalls(dir, p.Pid())
	}()
	cpu0, w0 := p.CPUTime(), time.Now()
	gbps, bytes, err := iperf(o.loadCPU, t.addr, streams, o.duration)
	calls := (<-counted).stop()
	if err != nil {
		return sample{}, err
	}
	s := sample{gbps: gbps, syscalls: calls, mib: bytes / (1 << 20), load: loadAvg()}
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
			Bytes         float64 `json:"bytes"`
		} `json:"sum_received"`
	} `json:"end"`
}

// iperf runs an iperf3 client to addr and returns the received rate in
// Gbit/s and the bytes received, the first second left out as warm-up.
func iperf(cpu, addr string, streams int, d time.Duration) (float64, float64, error) {
	host, port, _ := strings.Cut(addr, ":")
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.Command("taskset", "-c", cpu, "iperf3", "-c", host, "-p", port,
		"-t", strconv.Itoa(secs), "-O", "1", "-P", strconv.Itoa(streams), "-J")
	b, err := cmd.Output()
	var out iperfOut
	if jerr := json.Unmarshal(b, &out); jerr != nil {
		if err != nil {
			return 0, 0, fmt.Errorf("iperf3: %w", err)
		}
		return 0, 0, fmt.Errorf("iperf3 output: %w", jerr)
	}
	if out.Error != "" {
		return 0, 0, fmt.Errorf("iperf3: %s", out.Error)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("iperf3: %w", err)
	}
	if out.End.SumReceived.BitsPerSecond <= 0 {
		return 0, 0, errors.New("iperf3 reported no bytes received")
	}
	return out.End.SumReceived.BitsPerSecond / 1e9, out.End.SumReceived.Bytes, nil
}

func medianOf(s []sample) sample {
	s = append([]sample(nil), s...)
	sort.Slice(s, func(i, j int) bool { return s[i].gbps < s[j].gbps })
	return s[len(s)/2]
}

func printTable(targets []target, streams []int, samples map[string]map[int][]sample) {
	fmt.Println()
	fmt.Println("| target | streams | Gbit/s (median) | proxy cpu | Gbit per proxy CPU-second | syscalls/MiB | vs haproxy | vs haproxy-splice | vs direct | load |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
			cpu, perCPU := "-", "-"
			if t.start != nil {
				cpu = fmt.Sprintf("%.0f%%", 100*m.cpu)
				if m.cpu > 0 {
					perCPU = fmt.Sprintf("%.2f", m.gbps/m.cpu)
				}
			}
			fmt.Printf("| %s | %d | %.2f | %s | %s | %s | %s | %s | %s | %s |\n", t.name, n, m.gbps, cpu, perCPU, perMiB(m),
				ratio(s, samples["haproxy"][n]), ratio(s, samples["haproxy-splice"][n]), ratio(s, samples["direct"][n]), m.load)
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
