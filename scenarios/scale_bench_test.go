package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Sizes of the scale report.
const (
	scaleChanges   = 120 // member changes timed per size
	scaleQuiet     = 100 // writes that touch no load balancer
	scaleScrapes   = 6   // scrapes of each host's /metrics, for the RSS while scraped
	scaleAllocOps  = 40  // changes, then writes touching no LB, whose allocation is read
	scalePerTenant = 100 // load balancers per tenant (and per write while loading)
	scaleMembers   = 10
	scaleLoadLimit = 30 * time.Minute
)

// BenchmarkScaleMemberChange is the scale report. For each size (load
// balancers of one tcp listener and ten members; TEAPOT_SCALE_SIZES,
// default 1000,10000,100000) it forms a three-host cluster in network namespaces
// (the VIP lab), loads the load balancers through the admin API (a tenant
// and its 100 load balancers per write), and reports:
//
//   - the load: from the first write to the last revision served by every
//     host's data plane;
//   - then the time until the hosts are at rest (a second in which they
//     used under a quarter of a core each): the load leaves them
//     collecting its garbage, and the changes below are timed after;
//   - one member of a random load balancer changed through the admin API,
//     from the write to the revision live in every host's data plane (the
//     hosts' "configuration applied" lines), p50/p99 over 120 changes;
//   - the CPU the three hosts spent per change, less what they spend idle
//     (heartbeats, Raft) in the same time;
//   - 100 writes that touch no load balancer (join tokens): how many
//     times a data plane applied a configuration for them (want 0) and the
//     CPU per write;
//   - the CPU the three hosts spend idle (heartbeats, VIP decisions, Raft),
//     in per cent of one core per host;
//   - the resident set of each host, at rest and the most over six
//     scrapes of every host's /metrics (a scrape leaves garbage, as
//     Prometheus's would, and the heap grows towards its goal between
//     collections; the goal is printed too);
//   - where a change's time goes, on the host that served it last: from
//     the write to the first host's commit (the leader), from there to
//     this host's commit, then waiting for the data plane, compiling and
//     serving (the stage times of the "configuration applied" line).
//
// TEAPOT_SCALE_LOGS=dir keeps the hosts' logs there (GODEBUG=gctrace=1
// reaches the hosts and writes their collections in them).
//
// The LB hosts run with listen-sockets: tenant (TEAPOT_SCALE_LISTEN), a
// socket per tenant, and no memory limit (TEAPOT_SCALE_MEMORY_LIMIT sets
// their --memory-limit). With listen-sockets: listener, each host listens
// on one socket per load balancer: a size that does not fit the
// descriptor limit (the hard RLIMIT_NOFILE, which only a process with
// CAP_SYS_RESOURCE may raise) runs at the largest that fits, and the
// report says so.
func BenchmarkScaleMemberChange(b *testing.B) {
	sizes := []int{1000, 10000, 100000}
	listen := cmp.Or(os.Getenv("TEAPOT_SCALE_LISTEN"), "tenant")
	if env := os.Getenv("TEAPOT_SCALE_SIZES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < scalePerTenant || n%scalePerTenant != 0 || n > 120000 {
				b.Fatalf("TEAPOT_SCALE_SIZES: %q is not a multiple of %d up to 120000", f, scalePerTenant)
			}
			sizes = append(sizes, n)
		}
	}
	needTools(b)
	var rows []scaleRow
	var capped []string
	fits := 120000
	if listen == "listener" {
		fits = maxScaleSize(b)
	}
	for _, n := range sizes {
		if n > fits {
			capped = append(capped, fmt.Sprintf("%d load balancers need %d descriptors per host; the hard limit is %d and cannot be raised here: ran %d",
				n, n+scaleSpareFDs, fits+scaleSpareFDs, fits))
			n = fits
		}
		if slices.ContainsFunc(rows, func(r scaleRow) bool { return r.lbs == n }) {
			continue
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			rows = append(rows, scaleRun(b, n, listen))
		})
	}
	b.StopTimer()
	fmt.Printf("\nscale: one member change through the admin API, live in the data plane of 3 hosts (network namespaces, one machine; listen-sockets: %s, memory-limit: %s)\n",
		listen, cmp.Or(os.Getenv("TEAPOT_SCALE_MEMORY_LIMIT"), "none"))
	fmt.Printf("| LBs x %d members | load (first write to last revision on every host) | then to hosts at rest | change p50 | change p99 | max | host CPU per change (above idle) | data-plane applies for %d writes touching no LB | host CPU per such write | idle CPU per host | RSS per host | RSS per host over %d scrapes of /metrics (most) |\n", scaleMembers, scaleQuiet, scaleScrapes)
	fmt.Printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %.1f ms | %.1f ms | %.1f ms | %.2f ms | %d | %.2f ms | %.1f%% | %s | %s |\n", r.lbs, r.load.Round(time.Millisecond), r.settle.Round(100*time.Millisecond),
			ms(r.lat.percentile(50)), ms(r.lat.percentile(99)), ms(r.lat.percentile(100)), ms(r.cpuPerChange),
			r.quietApplies, ms(r.cpuPerQuiet), r.idlePercent, r.rss, r.scraped)
	}
	for _, c := range capped {
		fmt.Printf("note: %s\n", c)
	}
	fmt.Printf("\nscale: Go heap allocated per host (the most of the hosts; what sets how often the collector runs)\n")
	fmt.Printf("| LBs | per second at rest | per change | per write touching no LB | per scrape of /metrics |\n")
	fmt.Printf("|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %d | %.2f MiB | %.0f KiB | %.0f KiB | %.1f MiB |\n", r.lbs, r.allocIdle/(1<<20), r.allocChange/1024, r.allocQuiet/1024, r.allocScrape/(1<<20))
	}
	fmt.Printf("\nscale: where a change's time goes, on the host that served it last (p50 / p99 / max over %d changes)\n", scaleChanges)
	fmt.Printf("| LBs | write to first commit | first to this host's commit | commit to data plane | compile | serve |\n")
	fmt.Printf("|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %d |", r.lbs)
		for _, l := range r.stages {
			fmt.Printf(" %.1f / %.1f / %.1f ms |", ms(l.percentile(50)), ms(l.percentile(99)), ms(l.percentile(100)))
		}
		fmt.Printf("\n")
	}
	b.ReportMetric(0, "ns/op")
}

type scaleRow struct {
	lbs          int
	load         time.Duration
	settle       time.Duration // from the load to hosts at rest
	lat          latencies
	cpuPerChange time.Duration
	quietApplies int
	cpuPerQuiet  time.Duration
	idlePercent  float64 // of one core, per host
	rss          string
	scraped      string // the most RSS per host over scaleScrapes scrapes
	// Go heap allocated per host (the most of the hosts): per second at
	// rest, per change, per write touching no load balancer, per scrape.
	allocIdle, allocChange, allocQuiet, allocScrape float64
	// stages of each change on the host that served it last: write to
	// the first commit, to this host's commit, to the data plane,
	// compile, serve.
	stages [5]latencies
}

// scaleSpareFDs are the descriptors an LB host needs besides one per
// load balancer.
const scaleSpareFDs = 2000

// maxScaleSize is the most load balancers, a multiple of scalePerTenant,
// whose listeners fit the hard descriptor limit.
func maxScaleSize(tb testing.TB) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if lim.Max > 1<<30 {
		return 120000
	}
	return max(scalePerTenant, (int(lim.Max)-scaleSpareFDs)/scalePerTenant*scalePerTenant)
}

func scaleRun(b *testing.B, n int, listen string) scaleRow {
	need := uint64(scaleSpareFDs)
	if listen == "listener" {
		need += uint64(n)
	}
	raiseNoFile(b, need)
	args := []string{"--listen-sockets", listen}
	if limit := os.Getenv("TEAPOT_SCALE_MEMORY_LIMIT"); limit != "" {
		args = append(args, "--memory-limit", limit)
	}
	l := newVIPLab(b, labOptions{teapot: true, args: args})
	admin := l.adminClient()
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	apply := func(objs ...*pb.Object) uint64 {
		b.Helper()
		c, cancel := ctx()
		defer cancel()
		resp, err := admin.Apply(c, &pb.ApplyRequest{Objects: objs})
		if err != nil {
			b.Fatalf("apply: %v", err)
		}
		var rev uint64
		for _, o := range resp.GetObjects() {
			rev = max(rev, api.MetaOf(o).GetRevision())
		}
		return rev
	}
	var logs []*planeLog
	for _, h := range l.lbs {
		logs = append(logs, &planeLog{path: h.logPath})
	}

	row := scaleRow{lbs: n}
	apply(api.Wrap(&pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: "static"}))
	lbs := make([]*pb.LoadBalancer, n)
	start := time.Now()
	var rev uint64
	for t := range n / scalePerTenant {
		objs := []*pb.Object{api.Wrap(scaleTenant(t, "bulk"))}
		for j := range scalePerTenant {
			i := t*scalePerTenant + j
			lbs[i] = scaleLB(i)
			objs = append(objs, api.Wrap(lbs[i]))
		}
		rev = apply(objs...)
		if time.Since(start) > scaleLoadLimit {
			b.Fatalf("loading %d load balancers took over %s", n, scaleLoadLimit)
		}
	}
	everyPlaneWithin(b, logs, rev, scaleLoadLimit)
	row.load = time.Since(start)
	b.Logf("%d load balancers live on every host %s after the first write", n, row.load.Round(time.Millisecond))
	// The changes are timed on hosts at rest: the load leaves them
	// collecting its garbage for a while (at 100,000 a collection marks
	// about 1 GiB).
	row.settle = settleHosts(b, l)
	b.Logf("the hosts came to rest %s after the load", row.settle.Round(time.Millisecond))

	// What the hosts spend doing nothing (heartbeats, Raft), per second,
	// to take from the figures below.
	idle0 := hostCPU(b, l)
	time.Sleep(3 * time.Second)
	idle := float64(hostCPU(b, l)-idle0) / 3
	row.idlePercent = idle / float64(time.Second) / float64(len(l.lbs)) * 100
	busy := func(cpu time.Duration, took time.Duration) time.Duration {
		return max(0, cpu-time.Duration(idle*took.Seconds()))
	}

	rng := rand.New(rand.NewPCG(17, uint64(n)))
	// change moves one member of a random load balancer and returns the
	// revision written.
	change := func(c int) uint64 {
		i := rng.IntN(n)
		lb := proto.Clone(lbs[i]).(*pb.LoadBalancer)
		lb.Meta = nil
		lb.Pools["app"].Members[rng.IntN(scaleMembers)].Address = fmt.Sprintf("10.%d.%d.%d:%d", 200+c%50, rng.IntN(256), rng.IntN(256), 1+rng.IntN(60000))
		lbs[i] = lb
		return apply(api.Wrap(lb))
	}
	quiet := func() {
		c, cancel := ctx()
		defer cancel()
		if _, err := admin.CreateJoinToken(c, &pb.CreateJoinTokenRequest{TtlSeconds: 60}); err != nil {
			b.Fatalf("join token: %v", err)
		}
	}
	cpu0, t0 := hostCPU(b, l), time.Now()
	for c := range scaleChanges {
		start := time.Now()
		rev := change(c)
		lat := everyPlaneWithin(b, logs, rev, syncTimeout).Sub(start)
		row.lat = append(row.lat, lat)
		st := changeStages(logs, rev, start)
		for k, d := range st {
			row.stages[k] = append(row.stages[k], d)
		}
		if lat > 20*time.Millisecond {
			b.Logf("change %d (revision %d) took %.1f ms: write to first commit %.1f, to the last host's commit %.1f, waited %.1f, compile %.1f, serve %.1f ms",
				c, rev, ms(lat), ms(st[0]), ms(st[1]), ms(st[2]), ms(st[3]), ms(st[4]))
		}
	}
	row.cpuPerChange = busy(hostCPU(b, l)-cpu0, time.Since(t0)) / scaleChanges

	applied := countApplied(b, logs)
	cpu0, t0 = hostCPU(b, l), time.Now()
	for range scaleQuiet {
		quiet()
	}
	row.cpuPerQuiet = busy(hostCPU(b, l)-cpu0, time.Since(t0)) / scaleQuiet
	// The last writes had time to reach every host: wait for one more
	// load balancer change to be served, then count.
	lb := proto.Clone(lbs[0]).(*pb.LoadBalancer)
	lb.Meta = nil
	lb.Pools["app"].Members[0].Address = "10.250.0.1:1"
	everyPlaneWithin(b, logs, apply(api.Wrap(lb)), syncTimeout)
	row.quietApplies = countApplied(b, logs) - applied - len(logs)

	// What the hosts allocate drives their collections. It is read from
	// /metrics, and a scrape at 100,000 allocates more than a hundred
	// changes, so it is measured here, after the timed phases: a scrape's
	// own allocation, from two scrapes one after the other (after one
	// more: a first scrape allocates what the next ones reuse), is taken
	// from what the counter reads around each phase.
	allocated(b, l)
	a0 := allocated(b, l)
	a1 := allocated(b, l)
	scrapeAlloc := diff(a1, a0)
	row.allocScrape = most(scrapeAlloc)
	time.Sleep(3 * time.Second)
	a2 := allocated(b, l)
	idleAlloc := scaled(minus(diff(a2, a1), scrapeAlloc), 1.0/3)
	row.allocIdle = most(idleAlloc)
	t0 = time.Now()
	for c := range scaleAllocOps {
		everyPlaneWithin(b, logs, change(scaleChanges+c), syncTimeout)
	}
	a3 := allocated(b, l)
	row.allocChange = most(minus(minus(diff(a3, a2), scrapeAlloc), scaled(idleAlloc, time.Since(t0).Seconds()))) / scaleAllocOps
	t0 = time.Now()
	for range scaleAllocOps {
		quiet()
	}
	row.allocQuiet = most(minus(minus(diff(allocated(b, l), a3), scrapeAlloc), scaled(idleAlloc, time.Since(t0).Seconds()))) / scaleAllocOps

	var rss []string
	for _, h := range l.lbs {
		rss = append(rss, fmt.Sprintf("%s %.0f MiB", h.id, float64(procKiB(b, h.proc.Pid(), "VmRSS"))/1024))
		// Where the resident set goes: the Go heap, the goroutines'
		// stacks (one accept loop per listener) and the rest.
		if s, err := l.scrape(h); err != nil {
			fmt.Printf("memory: %s: metrics: %v\n", h.id, err)
		} else {
			first := func(name string) float64 {
				if v := s[name]; len(v) > 0 {
					return v[0].value
				}
				return 0
			}
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", h.proc.Pid()))
			pid := h.proc.Pid()
			fmt.Printf("memory: %s at %d LBs: RSS %.0f MiB (anonymous %.0f, files %.0f), Go heap in use %.0f MiB, stacks %.0f MiB, %0.f goroutines, %d descriptors\n", h.id, n,
				float64(procKiB(b, pid, "VmRSS"))/1024, float64(procKiB(b, pid, "RssAnon"))/1024, float64(procKiB(b, pid, "RssFile"))/1024,
				first("go_memstats_heap_inuse_bytes")/(1<<20),
				first("go_memstats_stack_inuse_bytes")/(1<<20), first("go_goroutines"), len(fds))
		}
	}
	row.rss = strings.Join(rss, ", ")
	// A host's resident set while it is scraped, as Prometheus would:
	// each scrape leaves garbage, and the heap grows towards its goal
	// between collections.
	peak := make([]int64, len(l.lbs))
	goal := make([]float64, len(l.lbs))
	gogc := make([]float64, len(l.lbs))
	for range scaleScrapes {
		for i, h := range l.lbs {
			s, err := l.scrape(h)
			if err != nil {
				b.Fatalf("scrape %s: %v", h.id, err)
			}
			if v := s["go_memstats_next_gc_bytes"]; len(v) > 0 {
				goal[i] = v[0].value
			}
			if v := s["go_gc_gogc_percent"]; len(v) > 0 {
				gogc[i] = v[0].value
			}
			peak[i] = max(peak[i], procKiB(b, h.proc.Pid(), "VmRSS"))
		}
	}
	var scraped []string
	for i, h := range l.lbs {
		scraped = append(scraped, fmt.Sprintf("%s %.0f MiB (heap goal %.0f MiB, GOGC %.0f)", h.id, float64(peak[i])/1024, goal[i]/(1<<20), gogc[i]))
	}
	row.scraped = strings.Join(scraped, ", ")
	if dir := os.Getenv("TEAPOT_SCALE_LOGS"); dir != "" {
		for _, h := range l.lbs {
			data, err := os.ReadFile(h.logPath)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.log", h.id, n)), data, 0o644)
			}
			if err != nil {
				b.Errorf("TEAPOT_SCALE_LOGS: %v", err)
			}
		}
	}
	b.Logf("%d LBs: change p50 %.1f ms p99 %.1f ms; host CPU per change %v; %d data-plane applies for %d writes touching no LB; %s",
		n, ms(row.lat.percentile(50)), ms(row.lat.percentile(99)), row.cpuPerChange, row.quietApplies, scaleQuiet, row.rss)
	return row
}

// changeStages splits the time from start to revision rev served by
// every host, on the host that served it last: the write to the first
// host's commit, from there to that host's commit, then its data plane's
// wait, compile and serve.
func changeStages(logs []*planeLog, rev uint64, start time.Time) [5]time.Duration {
	var last planeEntry
	var first time.Time
	for _, l := range logs {
		e, ok := l.servedEntry(rev)
		if !ok {
			continue
		}
		if e.at.After(last.at) {
			last = e
		}
		if c := e.committed(); first.IsZero() || c.Before(first) {
			first = c
		}
	}
	return [5]time.Duration{first.Sub(start), last.committed().Sub(first), last.waited, last.compile, last.serve}
}

// scaleTenant is tenant tn of the scale report: its networks are the
// member addresses of its load balancers (scaleLB), one /32 each, so
// that no two tenants share an address.
func scaleTenant(tn int, pools ...string) *pb.Tenant {
	nets := make([]string, scalePerTenant)
	for j := range nets {
		i := tn*scalePerTenant + j
		nets[j] = fmt.Sprintf("10.%d.%d.%d/32", i/65536%200, i/256%256, i%256)
	}
	return &pb.Tenant{Name: fmt.Sprintf("t%04d", tn), Networks: nets, Pools: pools}
}

// scaleLB is load balancer i of the scale report: tenant i/100, one tcp
// listener on its own VIP, ten members.
func scaleLB(i int) *pb.LoadBalancer {
	ms := make([]*pb.Member, scaleMembers)
	for j := range ms {
		ms[j] = &pb.Member{Address: fmt.Sprintf("10.%d.%d.%d:%d", i/65536%200, i/256%256, i%256, 30000+j)}
	}
	a := i + 1 // 198.18.0.0 is the network address
	vip := fmt.Sprintf("198.%d.%d.%d", 18+a/65536, a/256%256, a%256)
	return &pb.LoadBalancer{
		Name:      fmt.Sprintf("lb-%d", i),
		Tenant:    fmt.Sprintf("t%04d", i/scalePerTenant),
		Vip:       &pb.VIPRequest{Pool: "bulk", Address: vip},
		Listeners: []*pb.Listener{{Port: 5432, Protocol: "tcp", Pool: "app"}},
		Pools:     map[string]*pb.BackendPool{"app": {Members: ms}},
	}
}

// adminClient is an admin API client that dials from the lab's client
// host to every LB host.
func (l *vipLab) adminClient() pb.AdminClient {
	l.tb.Helper()
	cfg, err := client.LoadConfig(filepath.Join(l.lbs[0].dir, "admin.conf"))
	if err != nil {
		l.tb.Fatal(err)
	}
	tlsCfg, err := pki.ClientTLS([]byte(cfg.CA), []byte(cfg.Cert), []byte(cfg.Key))
	if err != nil {
		l.tb.Fatal(err)
	}
	var addrs []string
	for _, h := range l.lbs {
		addrs = append(addrs, h.apiAddr())
	}
	cc, err := grpc.NewClient("passthrough:///"+addrs[0],
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return l.client.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		l.tb.Fatal(err)
	}
	l.tb.Cleanup(func() { cc.Close() })
	return pb.NewAdminClient(cc)
}

// everyPlaneWithin is everyPlane with its own deadline.
func everyPlaneWithin(tb testing.TB, logs []*planeLog, rev uint64, timeout time.Duration) time.Time {
	tb.Helper()
	var last time.Time
	waitFor(tb, timeout, fmt.Sprintf("revision %d live in every data plane", rev), func() error {
		last = time.Time{}
		for _, l := range logs {
			if err := l.read(); err != nil {
				return err
			}
			at, ok := l.servedAt(rev)
			if !ok {
				return fmt.Errorf("%s does not serve it yet", l.path)
			}
			if at.After(last) {
				last = at
			}
		}
		return nil
	})
	return last
}

// countApplied counts the configurations the hosts' data planes applied.
func countApplied(tb testing.TB, logs []*planeLog) int {
	n := 0
	for _, l := range logs {
		if err := l.read(); err != nil {
			tb.Fatal(err)
		}
		n += len(l.applied)
	}
	return n
}

// hostCPU is the CPU time the LB hosts' processes have used.
// Hosts at rest: a second in which the hosts together used less than
// scaleRestCPU of a core each on average (idle, they use 6-15%).
const (
	scaleRestCPU   = 0.25
	scaleRestLimit = 2 * time.Minute
)

// settleHosts waits for a second in which the hosts are at rest, for at
// most scaleRestLimit, and returns how long it waited.
func settleHosts(b *testing.B, l *vipLab) time.Duration {
	b.Helper()
	start := time.Now()
	for time.Since(start) < scaleRestLimit {
		c0, t0 := hostCPU(b, l), time.Now()
		time.Sleep(time.Second)
		if used := float64(hostCPU(b, l)-c0) / float64(time.Since(t0)); used < scaleRestCPU*float64(len(l.lbs)) {
			return time.Since(start)
		}
	}
	b.Fatalf("the hosts were still busy %s after the load", scaleRestLimit)
	return 0
}

func hostCPU(tb testing.TB, l *vipLab) time.Duration {
	tb.Helper()
	var total time.Duration
	for _, h := range l.lbs {
		total += procCPU(tb, h.proc.Pid())
	}
	return total
}

// procCPU is the user and system CPU time process pid has used.
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 per second).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var total time.Duration
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		total += time.Duration(v) * 10 * time.Millisecond
	}
	return total
}

// allocated reads each host's Go heap allocated since it started
// (go_memstats_alloc_bytes_total).
func allocated(b *testing.B, l *vipLab) []float64 {
	out := make([]float64, len(l.lbs))
	for i, h := range l.lbs {
		s, err := l.scrape(h)
		if err != nil {
			b.Fatalf("scrape %s: %v", h.id, err)
		}
		if v := s["go_memstats_alloc_bytes_total"]; len(v) > 0 {
			out[i] = v[0].value
		}
	}
	return out
}

// diff is after-before, host by host.
func diff(after, before []float64) []float64 {
	out := make([]float64, len(after))
	for i := range after {
		out[i] = after[i] - before[i]
	}
	return out
}

// minus is a-b, host by host, at least 0.
func minus(a, b []float64) []float64 {
	out := diff(a, b)
	for i := range out {
		out[i] = max(out[i], 0)
	}
	return out
}

// scaled is a times f, host by host.
func scaled(a []float64, f float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] * f
	}
	return out
}

// most is the largest of the hosts' values.
func most(a []float64) float64 {
	var m float64
	for _, v := range a {
		m = max(m, v)
	}
	return m
}

// procKiB reads a kB field of /proc/PID/status.
func procKiB(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// raiseNoFile raises this process's soft descriptor limit to its hard
// one (the LB hosts inherit it: every listener is a socket) and skips when
// n descriptors still do not fit.
func raiseNoFile(tb testing.TB, n uint64) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			tb.Fatal(err)
		}
	}
	if lim.Cur < n {
		unavailable(tb, "scale report: each LB host needs %d descriptors and the hard limit is %d (raise ulimit -Hn)", n, lim.Max)
	}
}
