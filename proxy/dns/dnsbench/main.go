// Command dnsbench compares teapot-lb's authoritative DNS with BIND 9
// serving the same zone: queries answered per CPU-second of the server,
// under the same closed-loop UDP load (a fixed number of queries in
// flight, for a fixed time). The server under test runs alone on one core
// (taskset; BIND with one worker thread, teapot-lb's Go runtime sees one
// CPU); the load generator runs on another.
//
//	go run ./proxy/dns/dnsbench -duration 5s -rounds 2
//
// It needs taskset and named (Debian packages util-linux, bind9).
// teapot-lb's server runs in a child process: this program started again
// as "dnsbench engine". The zone is -names A records h0..hN-1.bench.example
// with their NS and glue; the queries are 80% names that exist, 10% AAAA
// of them (NODATA), 10% names that do not (NXDOMAIN). Response-rate
// limiting is off in both servers: it would measure the limit.
// "teapot-dnssec" is teapot-lb serving the zone signed (--dns-dnssec),
// every query with DO: the first answer of each name is signed, the
// rest come from the signature cache.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mdns "github.com/miekg/dns"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/dns"
	"github.com/teapot-lb/teapot-lb/proxy/internal/benchproc"
)

const zone = "bench.example."

func main() {
	benchproc.Main("dnsbench", run, map[string]func([]string) error{"engine": serveEngine})
}

type options struct {
	duration          time.Duration
	rounds, names     int
	inflight          int
	serverCPU, genCPU string
	only              map[string]bool
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("dnsbench", flag.ContinueOnError)
	var o options
	var only string
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured run")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds per server, interleaved; the median is reported")
	fs.IntVar(&o.names, "names", 1000, "A records in the zone")
	fs.IntVar(&o.inflight, "inflight", 32, "queries in flight at once (one UDP socket each)")
	fs.StringVar(&o.serverCPU, "server-cpu", "0", "core of the server under test")
	fs.StringVar(&o.genCPU, "load-cpu", "1", "cores of the load generator (this process)")
	fs.StringVar(&only, "only", "", "comma-separated servers to run (teapot,teapot-dnssec,bind)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.duration < time.Second || o.duration > 5*time.Minute:
		return o, errors.New("-duration must be in [1s, 5m]")
	case o.rounds < 1 || o.rounds > 10:
		return o, errors.New("-rounds must be in [1, 10]")
	case o.names < 1 || o.names > 1_000_000:
		return o, errors.New("-names must be in [1, 1000000]")
	case o.inflight < 1 || o.inflight > 1024:
		return o, errors.New("-inflight must be in [1, 1024]")
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	return o, nil
}

// addrOf is the address of name i, the same in both servers.
func addrOf(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// serveEngine runs teapot-lb's DNS server for the bench zone on -addr
// until SIGTERM or SIGINT.
func serveEngine(args []string) error {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:5300", "IP:port to answer on")
	names := fs.Int("names", 1000, "A records")
	signed := fs.Bool("dnssec", false, "sign the zone (DNSSEC, a key in memory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	objs := []*pb.Object{{Kind: &pb.Object_Tenant{Tenant: &pb.Tenant{Name: "bench", Domains: []string{"bench.example"}}}}}
	ready := map[string]string{}
	for i := range *names {
		lb := &pb.LoadBalancer{Tenant: "bench", Name: fmt.Sprintf("lb%d", i), Hostnames: []string{fmt.Sprintf("h%d.bench.example", i)},
			Status: &pb.LoadBalancerStatus{Address: addrOf(i).String()}}
		objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
		ready["bench/"+lb.Name] = ""
	}
	cfg := dns.Config{Addrs: []string{*addr}, Zones: []string{zone},
		NameServers:        []dns.NameServer{{Name: "ns1." + zone, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.53")}}},
		ResponsesPerSecond: -1, QueriesPerTenant: 1 << 30}
	if *signed {
		cfg.DNSSEC, cfg.Keys, cfg.SignaturesPerTenant = []string{zone}, &memKeys{m: map[string][]byte{}}, 1<<30
	}
	srv, err := dns.New(cfg)
	if err != nil {
		return err
	}
	srv.HeldHere()
	srv.Update(objs, 1)
	srv.SetReady(ready)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return srv.Run(ctx)
}

// memKeys keeps the bench zone's key in memory.
type memKeys struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *memKeys) Lock(context.Context, string) error   { return nil }
func (k *memKeys) Unlock(context.Context, string) error { return nil }
func (k *memKeys) Load(_ context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.m[key]; ok {
		return b, nil
	}
	return nil, iofs.ErrNotExist
}
func (k *memKeys) Store(_ context.Context, key string, v []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = v
	return nil
}
func (k *memKeys) Delete(_ context.Context, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
	return nil
}

// bindConfig writes named.conf and the zone file for BIND on port.
func bindConfig(dir string, port, names int) (string, error) {
	var z strings.Builder
	fmt.Fprintf(&z, "$TTL 30\n@ 3600 IN SOA ns1.%[1]s hostmaster.%[1]s 1 3600 600 604800 30\n@ 3600 IN NS ns1.%[1]s\nns1 3600 IN A 192.0.2.53\n", zone)
	for i := range names {
		fmt.Fprintf(&z, "h%d IN A %s\n", i, addrOf(i))
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.zone"), []byte(z.String()), 0o644); err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	managed-keys-directory "%[1]s";
	listen-on port %[2]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
	minimal-responses yes;
	querylog no;
};
controls { };
zone "%[3]s" { type primary; file "%[1]s/bench.zone"; };
`, dir, port, strings.TrimSuffix(zone, "."))
	p := filepath.Join(dir, "named.conf")
	return p, os.WriteFile(p, []byte(conf), 0o644)
}

func freePort() (int, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer pc.Close()
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		return 0, err
	}
	ln.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port, nil
}

// waitAnswer waits until addr answers h0 with its address.
func waitAnswer(addr string, p *benchproc.Proc) error {
	c := &mdns.Client{Timeout: 200 * time.Millisecond}
	q := new(mdns.Msg)
	q.SetQuestion("h0."+zone, mdns.TypeA)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m, _, err := c.Exchange(q, addr); err == nil && len(m.Answer) == 1 {
			if a, ok := m.Answer[0].(*mdns.A); ok && a.A.String() == addrOf(0).String() {
				return nil
			}
		}
	}
	return fmt.Errorf("%s never answered h0.%s: %s", addr, zone, p.Output())
}

type sample struct {
	qps, cpu, perCPU float64
	lost             int64
}

// query is one packed query and the rcode its answer has.
type query struct {
	wire  []byte
	rcode int
}

// makeQueries packs the query mix once, so that the load generator
// spends its CPU on sending.
// With do, each asks for DNSSEC (EDNS0 DO) and a name that does not exist
// gets NOERROR with a minimal NSEC.
func makeQueries(names int, do bool) []query {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]query, 4096)
	for k := range out {
		i := rng.IntN(names)
		qtype, name, want := mdns.TypeA, fmt.Sprintf("h%d.%s", i, zone), mdns.RcodeSuccess
		switch r := rng.IntN(10); {
		case r == 0:
			qtype = mdns.TypeAAAA
		case r == 1:
			name, want = fmt.Sprintf("x%d.%s", i, zone), mdns.RcodeNameError
			if do {
				want = mdns.RcodeSuccess
			}
		}
		q := new(mdns.Msg)
		q.SetQuestion(name, qtype)
		if do {
			q.SetEdns0(1232, true)
		}
		wire, err := q.Pack()
		if err != nil {
			panic(err)
		}
		out[k] = query{wire, want}
	}
	return out
}

// load sends queries to addr from o.inflight sockets, each waiting for
// its answer (1 s at most), for o.duration.
func load(o options, addr string, p *benchproc.Proc, do bool) (sample, error) {
	queries := makeQueries(o.names, do)
	var answered, lost, bad atomic.Int64
	stop := time.Now().Add(o.duration)
	cpu0 := p.CPUTime()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, o.inflight)
	for w := range o.inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("udp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			buf := make([]byte, 1232)
			for id := uint16(w); time.Now().Before(stop); id++ {
				q := queries[rng.IntN(len(queries))]
				out := append(buf[:0:0], q.wire...)
				out[0], out[1] = byte(id>>8), byte(id)
				if _, err := conn.Write(out); err != nil {
					errs <- err
					return
				}
				_ = conn.SetReadDeadline(time.Now().Add(time.Second))
				n, err := conn.Read(buf)
				if err != nil {
					lost.Add(1)
					continue
				}
				// The header is enough: the id, and the rcode expected.
				if n < 12 || buf[0] != byte(id>>8) || buf[1] != byte(id) || int(buf[3]&0xf) != q.rcode {
					bad.Add(1)
					continue
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := (p.CPUTime() - cpu0).Seconds()
	select {
	case err := <-errs:
		return sample{}, err
	default:
	}
	if bad.Load() > 0 {
		return sample{}, fmt.Errorf("%d wrong answers", bad.Load())
	}
	s := sample{qps: float64(answered.Load()) / elapsed, cpu: cpu / elapsed, lost: lost.Load()}
	if cpu > 0 {
		s.perCPU = float64(answered.Load()) / cpu
	}
	return s, nil
}

func run(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	for _, tool := range []string{"taskset", "named"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (Debian packages util-linux and bind9): %w", tool, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, cleanup, err := benchproc.WorkDir("dnsbench")
	if err != nil {
		return err
	}
	defer cleanup()
	defer benchproc.StopAll()
	// This process (the load) keeps off the server's core.
	if out, err := exec.Command("taskset", "-a", "-p", "-c", o.genCPU, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset the load generator: %v: %s", err, out)
	}
	type server struct {
		name  string
		start func(port int) (*benchproc.Proc, error)
		do    bool
	}
	servers := []server{
		{name: "teapot", start: func(port int) (*benchproc.Proc, error) {
			return benchproc.Start(dir, "teapot", o.serverCPU, self, "engine", "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-names", strconv.Itoa(o.names))
		}},
		// The same zone signed, every query with DO (signatures cached
		// after the first answer of each name).
		{name: "teapot-dnssec", do: true, start: func(port int) (*benchproc.Proc, error) {
			return benchproc.Start(dir, "teapot-dnssec", o.serverCPU, self, "engine", "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-names", strconv.Itoa(o.names), "-dnssec")
		}},
		{name: "bind", start: func(port int) (*benchproc.Proc, error) {
			conf, err := bindConfig(dir, port, o.names)
			if err != nil {
				return nil, err
			}
			return benchproc.Start(dir, "named", o.serverCPU, "named", "-g", "-n", "1", "-c", conf)
		}},
	}
	results := map[string][]sample{}
	for round := range o.rounds {
		for _, s := range servers {
			if o.only != nil && !o.only[s.name] {
				continue
			}
			port, err := freePort()
			if err != nil {
				return err
			}
			p, err := s.start(port)
			if err != nil {
				return err
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			if err := waitAnswer(addr, p); err != nil {
				p.Stop()
				return fmt.Errorf("%s: %w", s.name, err)
			}
			smp, err := load(o, addr, p, s.do)
			p.Stop()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			fmt.Printf("round %d %-7s %9.0f queries/s  %5.2f cores  %9.0f queries per CPU-second  (%d unanswered)\n",
				round+1, s.name, smp.qps, smp.cpu, smp.perCPU, smp.lost)
			results[s.name] = append(results[s.name], smp)
		}
	}
	fmt.Printf("\nDNS, %d names, %d queries in flight, server on core %s (median of %d rounds)\n", o.names, o.inflight, o.serverCPU, o.rounds)
	fmt.Printf("%-8s %12s %8s %22s\n", "server", "queries/s", "cores", "queries per CPU-second")
	for _, s := range servers {
		r := results[s.name]
		if len(r) == 0 {
			continue
		}
		sort.Slice(r, func(i, j int) bool { return r[i].perCPU < r[j].perCPU })
		m := r[len(r)/2]
		fmt.Printf("%-8s %12.0f %8.2f %22.0f\n", s.name, m.qps, m.cpu, m.perCPU)
	}
	return nil
}
