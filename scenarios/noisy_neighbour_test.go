package scenarios

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of the noisy-neighbour scenario.
const (
	quietPhase = 10 * time.Second // baseline
	// minPhase: every abuse phase lasts at least this. With a's probes
	// every aProbeInterval and the admin's every adminInterval, a phase
	// of minPhase holds about 500 of a's samples of each kind (the p99 is
	// the fifth slowest) and about 33 admin calls (the p99 is the
	// slowest).
	minPhase = 5 * time.Second
	// routesFor: how long b rewrites its load balancers in the routes
	// phase (less a second). The check of what b sent allows a full
	// bucket and 4 MiB over the rate: only writes that go on well past
	// those can show a budget that tells b to wait but lets its writes
	// through.
	routesFor     = 8 * time.Second
	idleConns     = 8000             // b's idle connections, twice the LB host's descriptors
	idleDialFor   = 20 * time.Second // longest time spent opening them
	idleRate      = 2000             // connections opened per second
	idleHold      = 5 * time.Second
	tarpitChecks  = 600 // b's health-checked members, all tarpits
	ejectBound    = 6 * time.Second
	noHelloCount  = 32
	noHelloBound  = 45 * time.Second // every hello-less stream is closed by then
	replayTries   = 20
	selfDialConns = 3
)

// noisyPhase is one abuse by tenant b. run returns notes for the report and
// reports goal failures through tb.
type noisyPhase struct {
	name string
	run  func(tb testing.TB, l *noisyLab, b *tenantAgent) []string
}

var noisyPhases = []noisyPhase{
	{"listeners, LB quota", phaseListeners},
	{"routes, long paths", phaseRoutes},
	{"idle connections", phaseIdleConns},
	{"tarpit health checks", phaseTarpit},
	{"member is a VIP", phaseSelfDial},
	{"TLS ticket replay", phaseTicketReplay},
	{"streams without hello", phaseNoHello},
}

// adminP99Bound is the admin API's p99 in every phase (the goal).
//
// Each phase is held to its goals plus lateFactor times the p99 of how
// late the probers' own 5 ms timer woke in the same phase: what the
// machine's other work adds, which the host cannot help (on a quiet
// machine, 1-5 ms late at p99). A miss of the goal itself is logged. A
// host that starves a by itself is not excused, since its own work does
// not make the probers' process late: that process (a's members, its
// probers and the admin prober) runs at a higher priority than the
// host, and b's side (the test process's clients and b's attacker
// processes) at a lower one, so that on one machine each party's CPU
// is its own, as on separate machines (noisy_prober_test.go).
//
// Before that split, a's probers and members shared the test process
// with b's clients and the machine with b's attacker processes at the
// host's priority: in "all at once" a's p99 was 75-95 ms (HTTP) and
// 85-110 ms (TCP) and the admin's 199-517 ms as the prober saw them, in
// 5 runs at load 1.4-2.9, while the host served the admin calls within
// 100 ms and the test process's threads waited 8.3-8.8 s for a CPU in
// 13 s; in "expensive checks" the host's threads waited nothing for a CPU
// while the test process waited 3.3 s and its probers saw a's p99 at 88
// ms. Every tenant has one host CPU budget over all it makes the host
// compute (quotas.cpuMillicores, a quarter of the CPUs: half a core
// here); b spends it and is held at its gate, a is never held.
//
// Under the race detector, "all at once" is held to allAtOnceGoalFactor
// times its goals (plus the lateness); a host built without it, as users
// run it, is held to the goals themselves: on a quiet machine, in 5 runs,
// a's p99 there was 12.0-19.8 ms against a goal of 56-58 ms, and the
// admin's 10.7-30.6 ms. Under the detector, the probers' process runs
// above the host, so its lateness does not grow when other work on the
// machine starves the host (in one run, while another test suite ran
// beside it, the host's threads waited 17 s for a CPU in 13 s and a's
// p99 was 133/165 ms, with the probers' timer 3.8 ms late); on a quiet
// machine a's p99 there was 30-71 ms against a goal of 53-56 ms, and the
// admin's 46-159 ms (15 runs).
const (
	adminP99Bound       = 250 * time.Millisecond
	lateFactor          = 16
	allAtOnceGoalFactor = 2
)

// roundTwo names the second round's phases.
var roundTwo = func() map[string]bool {
	m := map[string]bool{}
	for _, ph := range noisyRoundTwo {
		m[ph.name] = true
	}
	return m
}()

// TestNoisyNeighbour runs every abuse of tenant b while tenant a's load
// balancer and the admin API are probed, and holds the goals: every probe
// of a succeeds, a's p99 stays within p99Bound of the quiet baseline, and
// every admin call answers.
func TestNoisyNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs a serve process through about two minutes of abuse")
	}
	// Its phases last as long with either build, and the bounds a host
	// built as users run it is held to were set for probers in a test
	// process without the race detector.
	raceHosts(t)
	rows := runNoisyNeighbour(t)
	t.Logf("tenant a while tenant b misbehaves (one LB host, %d descriptors):\n%s", noisyServeNofile, noisyTable(rows))
	// The race detector's runtime multiplies what every request costs
	// the host: there "all at once" gets its allowance. A host built as
	// users run it is held to the goal itself in every phase.
	allAtOnce := time.Duration(allAtOnceGoalFactor)
	if !raceBuilt(teapotBinary(t)) {
		allAtOnce = 1
		t.Logf("the host was built without the race detector: every phase is held to the goal")
	}
	quiet := rows[0]
	for _, r := range rows[1:] {
		// The host's own time for the admin calls (headers to answer
		// written) is held to the goal in every phase of the second
		// round, plus the machine's lateness as the probes are (the host's
		// threads wait for a CPU like the test process's: in a phase
		// where the machine kept both waiting 92-94 s in 38 s, 3 of
		// 55 calls took over 250 ms on a host 0.02 of a core busy). At
		// load averages 11-16 the host took 62-90 admin calls of that
		// phase with 0-2 over 250 ms and none over 500 ms, while the
		// prober saw a p99 of 0.4-1.5 s.
		bound := adminP99Bound + lateFactor*r.late.p99
		if r.name == "all at once" {
			bound += (allAtOnce - 1) * adminP99Bound
		}
		if a := r.host.admin; roundTwo[r.name] && a.count > 0 && a.p99() > bound.Seconds() {
			t.Errorf("%s: the host answered its admin calls with a p99 over %.0f ms (%.0f of %.0f calls over %.0f ms; the test process's timer was %.1f ms late at p99)",
				r.name, ms(bound), a.over("0.25"), a.count, ms(adminP99Bound), ms(r.late.p99))
		}
	}
	for _, r := range rows {
		for _, p := range []struct {
			what  string
			s, q  probeStat
			bound bool
		}{{"a's HTTP probes", r.http, quiet.http, true}, {"a's TCP probes", r.tcp, quiet.tcp, true}, {"admin API calls", r.admin, quiet.admin, false}} {
			if p.s.total == 0 {
				t.Errorf("%s: no %s ran", r.name, p.what)
				continue
			}
			if p.s.ok != p.s.total {
				t.Errorf("%s: %d of %d %s failed; first: %v", r.name, p.s.total-p.s.ok, p.s.total, p.what, p.s.firstErr)
			}
			goal := adminP99Bound
			if p.bound {
				goal = p99Bound(p.q.p99)
			} else if !roundTwo[r.name] {
				// The first round's phases (b storing objects of
				// megabytes that the admin lists page by page) answer
				// every call without a latency bound.
				if p.s.p99 > goal {
					t.Logf("%s: p99 of %s %.1f ms, over %.1f ms", r.name, p.what, ms(p.s.p99), ms(goal))
				}
				continue
			}
			held := goal + lateFactor*r.late.p99
			if r.name == "all at once" {
				held += (allAtOnce - 1) * goal
			}
			if p.s.p99 > goal {
				t.Logf("%s: p99 of %s %.1f ms, over the goal of %.1f ms (held to %.1f ms: the probers' timer was %.1f ms late at p99)",
					r.name, p.what, ms(p.s.p99), ms(goal), ms(held), ms(r.late.p99))
			}
			if p.s.p99 > held {
				t.Errorf("%s: p99 of %s %.1f ms, want at most %.1f ms (the goal %.1f ms, for all at once %d times it, and %d times the probers' timer p99 of %.1f ms)",
					r.name, p.what, ms(p.s.p99), ms(held), ms(goal), allAtOnce, lateFactor, ms(r.late.p99))
			}
		}
	}
}

// raceBuilt reports whether the binary at path was built with the race
// detector (what it cannot read counts as built with it).
func raceBuilt(path string) bool {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return true
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// BenchmarkNoisyNeighbour runs the scenario once and reports a's p99 and
// the admin API's per phase, next to the quiet baseline.
func BenchmarkNoisyNeighbour(b *testing.B) {
	rows := runNoisyNeighbour(b)
	b.StopTimer()
	fmt.Printf("\ntenant a while tenant b misbehaves (one LB host, %d descriptors)\n%s", noisyServeNofile, noisyTable(rows))
	for _, r := range rows {
		key := strings.NewReplacer(" ", "-", ",", "").Replace(r.name)
		b.ReportMetric(ms(r.http.p99), key+"-http-p99-ms")
		b.ReportMetric(ms(r.tcp.p99), key+"-tcp-p99-ms")
		b.ReportMetric(float64(r.http.total-r.http.ok+r.tcp.total-r.tcp.ok), key+"-failed-probes")
		b.ReportMetric(float64(r.admin.total-r.admin.ok), key+"-failed-admin")
	}
	b.ReportMetric(0, "ns/op")
}

func runNoisyNeighbour(tb testing.TB) []noisyRow {
	began := time.Now()
	l := newNoisyLab(tb)
	// The phases' own durations end each row's notes.
	tb.Logf("the lab set up in %s", time.Since(began).Round(100*time.Millisecond))
	if dir := os.Getenv("TEAPOT_NOISY_PROFILES"); dir != "" {
		// The host's whole log beside the profiles (the failure shows its
		// last lines only).
		tb.Cleanup(func() {
			if data, err := os.ReadFile(l.n.logPath); err == nil {
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, "host.log"), data, 0o644)
			}
		})
	}
	bNice := lowerTestPriority(tb)
	b := dialTenant(tb, "b-agent", l.credsB)
	defer b.close()
	if _, err := b.change(nil); err != nil {
		tb.Fatalf("b's stream: %v", err)
	}

	p := l.aSide.probe(tb)
	names := []string{"quiet"}
	// The quiet baseline includes the ejection of a failing member of a,
	// which the tarpit phase repeats.
	start := time.Now()
	time.Sleep(3 * time.Second)
	pid := l.n.cmd.Process.Pid
	quietSched, _ := readSchedStat(pid)
	notes := [][]string{{l.ejection(tb)}}
	var hosts []hostReads // what the host measured in each phase
	if rest := quietPhase - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	notes[0] = append(notes[0], schedNote(pid, quietSched, time.Since(start)))
	if nice, err := niceOf(p.pid()); err == nil {
		notes[0] = append(notes[0], fmt.Sprintf("a's members, its probers and the admin prober in a process of their own at nice %d", nice))
	}
	notes[0] = append(notes[0], bNice)
	for i, ph := range selectedPhases(tb) {
		p.setPhase(i + 1)
		start := time.Now()
		tb.Logf("phase %q at %s", ph.name, start.UTC().Format("15:04:05.000"))
		profiled := profilePhase(tb, l, ph.name)
		sched, _ := readSchedStat(pid)
		own, _ := readSchedStat(os.Getpid())
		probers, _ := readSchedStat(p.pid())
		reads := scrapeHostReads(l.n)
		n := ph.run(tb, l, b)
		<-profiled
		if rest := minPhase - time.Since(start); rest > 0 {
			time.Sleep(rest)
		}
		// The test process (b's clients) and the probers' process share
		// the machine with the host: what they spent and waited tells
		// the machine's load from the host's.
		host := scrapeHostReads(l.n).since(reads)
		hosts = append(hosts, host)
		n = append(n, schedNote(pid, sched, time.Since(start)), procNote("test process", os.Getpid(), own, time.Since(start)),
			procNote("probers", p.pid(), probers, time.Since(start)), hostReadsNote(host))
		names = append(names, ph.name)
		notes = append(notes, append(n, fmt.Sprintf("%.0fs", time.Since(start).Seconds())))
	}
	p.finish()
	rows := p.rows(names, notes)
	for i, h := range hosts {
		rows[i+1].host = h
	}
	return rows
}

// profilePhase saves an execution trace and a CPU profile of the LB
// host over the first minPhase of a phase into the folder
// TEAPOT_NOISY_PROFILES names (when set), to see what an abuse makes the
// host spend. The channel closes
// when the profile is saved.
func profilePhase(tb testing.TB, l *noisyLab, phase string) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv("TEAPOT_NOISY_PROFILES")
	if dir == "" {
		close(done)
		return done
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Logf("profiles: %v", err)
	}
	base := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "").Replace(phase))
	go func() {
		// The host's goroutines half-way through, to see what waits.
		time.Sleep(minPhase / 2)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", l.n.metricsAddr))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if data, err := io.ReadAll(resp.Body); err == nil {
			os.WriteFile(base+".goroutines.txt", data, 0o644)
		}
	}()
	go func() {
		defer close(done)
		// An execution trace of the phase's first half (b's setup
		// burst), to see what a slow admin call or probe waited on, then
		// a CPU profile of its second half: the host takes one at a time.
		// TEAPOT_NOISY_TRACE_SECONDS traces that long instead and
		// TEAPOT_NOISY_CPU_SECONDS profiles that long instead (one of
		// the two), to see a whole phase.
		half := int(minPhase / 2 / time.Second)
		profiles := []struct{ url, file string }{
			{fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", l.n.metricsAddr, half), base + ".trace"},
			{fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", l.n.metricsAddr, half), base + ".pprof"},
		}
		if n, err := strconv.Atoi(os.Getenv("TEAPOT_NOISY_TRACE_SECONDS")); err == nil && n > 0 {
			profiles[0].url = fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", l.n.metricsAddr, n)
			profiles = profiles[:1]
		} else if n, err := strconv.Atoi(os.Getenv("TEAPOT_NOISY_CPU_SECONDS")); err == nil && n > 0 {
			profiles[1].url = fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", l.n.metricsAddr, n)
			profiles = profiles[1:]
		}
		for _, p := range profiles {
			resp, err := http.Get(p.url)
			if err != nil {
				tb.Logf("profile of %q: %v", phase, err)
				return
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				err = os.WriteFile(p.file, data, 0o644)
			}
			if err != nil {
				tb.Logf("profile of %q: %v", phase, err)
			}
		}
	}()
	return done
}

// selectedPhases is every phase of both rounds, or those named (comma
// separated) in TEAPOT_NOISY_PHASES, to rerun one abuse alone.
func selectedPhases(tb testing.TB) []noisyPhase {
	all := append(append([]noisyPhase(nil), noisyPhases...), noisyRoundTwo...)
	want := os.Getenv("TEAPOT_NOISY_PHASES")
	if want == "" {
		return all
	}
	var out []noisyPhase
	for _, ph := range all {
		// A name with a comma in it ("routes, long paths") is one phase.
		if ph.name == strings.TrimSpace(want) {
			return []noisyPhase{ph}
		}
	}
	for _, name := range strings.Split(want, ",") {
		found := false
		for _, ph := range all {
			if ph.name == strings.TrimSpace(name) {
				out = append(out, ph)
				found = true
			}
		}
		if !found {
			tb.Fatalf("TEAPOT_NOISY_PHASES: no phase %q", name)
		}
	}
	return out
}

// bLB is a load balancer of b's agent: a VIP from the pool, the listeners
// given and one pool "web".
func bLB(name string, listeners []*pb.Listener, routes []*pb.Route, web *pb.BackendPool) *pb.LoadBalancer {
	return &pb.LoadBalancer{Name: name, Vip: &pb.VIPRequest{Pool: "noisy"}, Listeners: listeners, Routes: routes,
		Pools: map[string]*pb.BackendPool{"web": web}}
}

func memberList(addrs ...string) []*pb.Member {
	var out []*pb.Member
	for _, a := range addrs {
		out = append(out, &pb.Member{Address: a})
	}
	return out
}

// upsertEach sends each load balancer in its own change and returns the
// stored names and the refusals (a stream the server ended counts as a
// refusal of what it carried).
func upsertEach(tb testing.TB, b *tenantAgent, lbs ...*pb.LoadBalancer) (stored []string, refused map[string]string) {
	refused = map[string]string{}
	for _, lb := range lbs {
		ack, err := b.change([]*pb.LoadBalancer{lb})
		if err != nil {
			refused[lb.GetName()] = "stream ended: " + err.Error()
			continue
		}
		s, r := verdicts(ack)
		stored = append(stored, s...)
		for k, v := range r {
			refused[k] = v
		}
	}
	return stored, refused
}

// remove deletes b's load balancers named, reporting a failure.
func removeLBs(tb testing.TB, b *tenantAgent, names ...string) {
	if _, err := b.change(nil, names...); err != nil {
		tb.Errorf("remove %v: %v", names, err)
	}
}

// bCount is how many load balancers b has stored.
func bCount(tb testing.TB, l *noisyLab) int {
	ctx, cancel := l.tl.ctx()
	defer cancel()
	objs, err := listAll(ctx, l.tl.conn, api.KindLoadBalancer)
	if err != nil {
		tb.Errorf("list load balancers: %v", err)
		return -1
	}
	n := 0
	for _, o := range objs {
		if o.GetLoadBalancer().GetTenant() == "b" {
			n++
		}
	}
	return n
}

func shorten(s string) string {
	if len(s) > 90 {
		return s[:90] + "..."
	}
	return s
}

// phaseListeners: one load balancer with 24,000 listeners, then twelve
// load balancers against a quota of six.
func phaseListeners(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	web := &pb.BackendPool{Members: memberList(l.bWeb.addr)}
	var ls []*pb.Listener
	for i := range 24000 {
		ls = append(ls, &pb.Listener{Port: uint32(10000 + i), Protocol: "tcp", Pool: "web"})
	}
	_, refused := upsertEach(tb, b, bLB("svc-many-listeners", ls, nil, web))
	why, ok := refused["svc-many-listeners"]
	if !ok {
		tb.Errorf("a load balancer with 24000 listeners was stored")
	}
	var flood []*pb.LoadBalancer
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("svc-flood-%02d", i)
		names = append(names, name)
		flood = append(flood, bLB(name, []*pb.Listener{
			{Port: 20000, Protocol: "tcp", Pool: "web"}, {Port: 20001, Protocol: "tcp", Pool: "web"},
		}, nil, web))
	}
	ack, err := b.change(flood)
	stored := 0
	if err != nil {
		tb.Errorf("b's flood of load balancers: %v", err)
	} else {
		s, _ := verdicts(ack)
		stored = len(s)
	}
	have := bCount(tb, l)
	if have > noisyLBQuota {
		tb.Errorf("b holds %d load balancers with a quota of %d", have, noisyLBQuota)
	}
	removeLBs(tb, b, append(names, "svc-many-listeners")...)
	return []string{fmt.Sprintf("24000 listeners refused: %s", shorten(why)), fmt.Sprintf("12 LBs vs quota %d: %d stored, b holds %d", noisyLBQuota, stored, have)}
}

// phaseRoutes: 60,000 routes, a 3 MiB path, and three load balancers at
// the per-LB route bound with 1000-byte paths, which b then rewrites in
// turn, for routesFor: b's writes are held to its
// write budget (quotas.writeBytesPerSecond) and b is told when they wait.
// A change still waiting then is dropped with its stream: the phase is no
// longer for the budget.
func phaseRoutes(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	start := time.Now()
	until := start.Add(routesFor - time.Second)
	throttled := b.throttled.Load()
	web := &pb.BackendPool{Members: memberList(l.bWeb.addr)}
	http := []*pb.Listener{{Port: noisyHTTPPort, Protocol: "http"}}
	routes := func(n, pathLen, gen int) []*pb.Route {
		var rs []*pb.Route
		for i := range n {
			p := fmt.Sprintf("/r/%05d/%d/", i, gen)
			rs = append(rs, &pb.Route{Host: "r.b.example", Path: p + strings.Repeat("x", max(0, pathLen-len(p))), Pool: "web"})
		}
		return rs
	}
	written := 0   // encoded bytes b sent to be written
	lateBytes := 0 // the change whose answer did not come in time
	stored := map[string]bool{}
	refused := map[string]string{}
	late := false
	upsert := func(lbs ...*pb.LoadBalancer) {
		for _, lb := range lbs {
			if late {
				return
			}
			size := proto.Size(lb)
			written += size
			ack, err := b.changeBy(until, []*pb.LoadBalancer{lb})
			if errors.Is(err, errNoAckInTime) {
				late, lateBytes = true, size
				return
			}
			if err != nil {
				refused[lb.GetName()] = "stream ended: " + err.Error()
				continue
			}
			s, r := verdicts(ack)
			for _, name := range s {
				stored[name] = true
			}
			for k, v := range r {
				refused[k] = v
			}
		}
	}
	upsert(bLB("svc-routes-60k", http, routes(60000, 0, 0), web),
		bLB("svc-long-path", http, []*pb.Route{{Host: "r.b.example", Path: "/" + strings.Repeat("p", 3<<20), Pool: "web"}}, web))
	var notes []string
	for _, name := range []string{"svc-routes-60k", "svc-long-path"} {
		if stored[name] {
			tb.Errorf("%s was stored", name)
		} else if why, ok := refused[name]; ok {
			notes = append(notes, fmt.Sprintf("%s refused: %s", name, shorten(why)))
		}
	}
	var names []string
	big := func(gen int) []*pb.LoadBalancer {
		var lbs []*pb.LoadBalancer
		for i := range 3 {
			name := fmt.Sprintf("svc-routes-%d", i)
			if gen == 0 {
				names = append(names, name)
			}
			lbs = append(lbs, bLB(name, http, routes(int(api.DefaultQuotas().RoutesPerLb), 1000, gen), web))
		}
		return lbs
	}
	upsert(big(0)...)
	n := 0
	for _, name := range names {
		if stored[name] {
			n++
		}
	}
	notes = append(notes, fmt.Sprintf("3 LBs x %d routes of 1000 B: %d stored", api.DefaultQuotas().RoutesPerLb, n))
	rewrites := 0
	for gen := 1; !late && time.Now().Before(until); gen++ {
		for _, lb := range big(gen) {
			if upsert(lb); !late {
				rewrites++
			}
		}
	}
	took := time.Since(start)
	// The stream charges a change before it is written: what b sent is at
	// most its burst, its rate over the phase, and one change more (at
	// most a gRPC message, 4 MiB), which waits when it is over.
	q := api.DefaultQuotas()
	burst := max(8*q.GetWriteBytesPerSecond(), q.GetStoredBytes())
	allowed := int(burst) + int(took.Seconds()*float64(q.GetWriteBytesPerSecond())) + 4<<20
	if written > allowed {
		tb.Errorf("b sent %d bytes to be written in %s, over its write budget (%d bytes)", written, took.Round(time.Millisecond), allowed)
	}
	// b must have been told it waits once what it was surely charged for
	// (every change answered; the late one may not have been read yet) is
	// more than a full bucket and what refilled it over the phase. On a
	// slow host b may not get that far: then nothing had to wait.
	told := b.throttled.Load() - throttled
	refilled := int(burst) + int(took.Seconds()*float64(q.GetWriteBytesPerSecond()))
	if charged := written - lateBytes; charged > refilled && told == 0 {
		tb.Errorf("b was charged %d bytes in %s, past its burst of %d and the %d bytes its rate refilled, and was never told it waits", charged, took.Round(time.Millisecond), burst, refilled-int(burst))
	}
	reason, _ := b.throttleReason.Load().(string)
	notes = append(notes, fmt.Sprintf("%d rewrites: %.1f MB sent in %.1fs, %d changes throttled (%s)", rewrites, float64(written)/1e6, took.Seconds(), told, shorten(reason)))
	removeLBs(tb, b, append(names, "svc-routes-60k", "svc-long-path")...)
	return notes
}

// phaseSelfDial: members that are VIPs of the cluster (b's own listener,
// and a's), then connections to the looping listener.
func phaseSelfDial(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	loop := bLB("svc-loop", []*pb.Listener{{Port: 9100, Protocol: "tcp", Pool: "web"}}, nil,
		&pb.BackendPool{Members: memberList(net.JoinHostPort(noisyVIPLoop, "9100"))})
	loop.Vip.Address = noisyVIPLoop
	viaA := bLB("svc-via-a", []*pb.Listener{{Port: 9101, Protocol: "tcp", Pool: "web"}}, nil,
		&pb.BackendPool{Members: memberList(net.JoinHostPort(noisyVIPA, fmt.Sprint(noisyTCPPort)))})
	_, refused := upsertEach(tb, b, loop, viaA)
	notes := []string{fmt.Sprintf("b's networks overlap the pool: %t", l.overlaps)}
	for _, name := range []string{"svc-loop", "svc-via-a"} {
		if why, ok := refused[name]; !ok {
			tb.Errorf("%s, whose member is a VIP, was stored", name)
		} else {
			notes = append(notes, fmt.Sprintf("%s refused: %s", name, shorten(why)))
		}
	}
	var conns []net.Conn
	for range selfDialConns {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(noisyVIPLoop, "9100"), time.Second); err == nil {
			fmt.Fprintln(c, "loop")
			conns = append(conns, c)
		}
	}
	time.Sleep(4 * time.Second)
	for _, c := range conns {
		c.Close()
	}
	removeLBs(tb, b, "svc-loop", "svc-via-a")
	return append(notes, fmt.Sprintf("%d of %d connections to the loop opened", len(conns), selfDialConns))
}

// healthCheck is b's check of the tarpits: as long a timeout as its
// interval allows.
func healthCheck(interval, timeout time.Duration) *pb.HealthCheck {
	return &pb.HealthCheck{Http: &pb.HTTPCheck{Path: "/"}, Interval: durationpb.New(interval), Timeout: durationpb.New(timeout), Fall: 1, Rise: 1}
}
