package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// floodChildEnv names the URL a child process of the test binary floods
// (TestCheapRequestFloodSlowsOnlyItsTenant's tenant b).
const floodChildEnv = "TEAPOT_TEST_FLOOD_URL"

// floodConns is how many keep-alive connections the flood uses.
const floodConns = 48

// TestCheapRequestFloodSlowsOnlyItsTenant: tenant b floods its listener
// with cheap requests (a route to a member, nothing a sub-budget
// charges) from 48 keep-alive connections, as fast as they are
// answered: without a host CPU budget that takes every core the process
// gets and a's latency with it. The accountant bills the process's CPU
// to b by its requests, b waits at its gate once in debt, and a's median
// and p90 stay near their quiet baseline.
//
// The flood's clients run in a child process, as clients do, so that
// they compete with the proxy for the machine's CPUs but not for the
// proxy's own scheduler. a's quiet baseline is measured in rounds
// between the rounds under the flood (the child's connections held,
// then let go), so that both see the same load of the rest of the
// machine. The p99 is logged, not held: on a 2-core machine at a load of
// 14-23 it rose from 4-29 ms to 22-309 ms under b's flood held to a
// budget of 100 millicores, and to 120-313 ms without a budget, while
// the median rose 3-10 times without a budget and not with it. A
// measurement that fails is made once more, and the test fails when both
// do.
func TestCheapRequestFloodSlowsOnlyItsTenant(t *testing.T) {
	if url := os.Getenv(floodChildEnv); url != "" {
		floodChild(url)
		return
	}
	if testing.Short() {
		t.Skip("a flood: make test runs it; -short (make test-quick) skips it")
	}
	const bMillicores = 25
	member := startHTTPMember(t)
	// a may use a core (the host's default here); b a fortieth of one
	// (its quotas.cpuMillicores). A loaded 2-core machine gives the
	// test's process about a fifth of a core: at 100 millicores b's
	// flood, held to its budget, took half of that and a's p90 rose from
	// 2-5 ms to 26-55 ms; at 25 it rose to 6-7 ms.
	cpu := cpubudget.New(cpubudget.Options{HostMillicores: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cpu.Run(ctx)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil), CPU: cpu})
	port := freePort(t)
	objs := twoTenants(httpLB("a", "plain", "127.0.0.2", port, member), httpLB("b", "flood", "127.0.0.3", port, member))
	for _, o := range objs {
		if tn := o.GetTenant(); tn.GetName() == "b" {
			tn.Quotas = &pb.Quotas{CpuMillicores: bMillicores}
		}
	}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	urlA := "http://" + vipAddr("127.0.0.2", port) + "/a"
	urlB := "http://" + vipAddr("127.0.0.3", port) + "/b"

	latencies(t, client, urlA, 50) // warm up
	flood := startFlood(t, urlB)
	b := cpu.Tenant("b")
	// b's flood runs until b is held at its budget (or, were it never,
	// for 1,000 requests).
	eventually(t, "tenant b's flood to run", func() bool { return b.HostStat().Throttles > 0 || flood.served.Load() > 1000 })

	// The bounds: a's median at most twice its quiet median and half a
	// millisecond, its p90 at most twice its quiet p90 or that and the
	// slack.
	slack := 10 * time.Millisecond
	if raceEnabled {
		slack = 25 * time.Millisecond
	}
	limits := []struct {
		p     int
		limit func(quiet time.Duration) time.Duration
	}{
		{50, func(q time.Duration) time.Duration { return 2*q + 500*time.Microsecond }},
		{90, func(q time.Duration) time.Duration { return max(2*q, q+slack) }},
	}
	for attempt := 1; ; attempt++ {
		m := measureFlood(t, client, urlA, flood)
		sb, sa := b.HostStat(), cpu.Tenant("a").HostStat()
		t.Logf("measurement %d: tenant a quiet p50 %v p90 %v p99 %v; with b's flood p50 %v p90 %v p99 %v; b served %.0f requests a second, charged %v (%d throttles, held %v); a charged %v (%d throttles); the process used %.2f cores in the quiet rounds, %.2f in the flood's",
			attempt, pct(m.quiet, 50), pct(m.quiet, 90), pct(m.quiet, 99), pct(m.abused, 50), pct(m.abused, 90), pct(m.abused, 99),
			m.rate, sb.Spent, sb.Throttles, sb.Throttled, sa.Spent, sa.Throttles, m.quietCores, m.floodCores)
		var fails []string
		for _, l := range limits {
			qp, ap := pct(m.quiet, l.p), pct(m.abused, l.p)
			if limit := l.limit(qp); ap > limit {
				fails = append(fails, fmt.Sprintf("tenant a's p%d went from %v to %v (limit %v)", l.p, qp, ap, limit))
			}
		}
		if len(fails) == 0 {
			break
		}
		if attempt == 2 {
			for _, f := range fails {
				t.Error(f)
			}
			break
		}
		t.Logf("measurement %d: %s; measuring once more", attempt, strings.Join(fails, "; "))
	}
	running := flood.stop(t)

	sb, sa := b.HostStat(), cpu.Tenant("a").HostStat()
	if sb.Throttles == 0 {
		t.Errorf("tenant b was never held at its budget")
	}
	if sa.Throttles != 0 {
		t.Errorf("tenant a was throttled %d times", sa.Throttles)
	}
	if sb.Millicores != bMillicores || sa.Millicores != 1000 {
		t.Errorf("budgets of b %d and a %d millicores, want %d (its quota) and 1000 (the host's default)", sb.Millicores, sa.Millicores, bMillicores)
	}
	// Held at its budget while its flood ran, b spent about its budget
	// then: the flood's CPU was billed to b.
	if want := time.Duration(float64(running) * bMillicores / 1000 / 4); sb.Spent < want {
		t.Errorf("b charged %v in the %v its flood ran, want at least %v (a quarter of its budget): b's flood billed to b", sb.Spent, running.Round(time.Millisecond), want)
	}
}

// floodMeasurement is tenant a's latencies with b's flood held and
// running, b's requests answered a second while it ran, and the cores the
// process used in each.
type floodMeasurement struct {
	quiet, abused          []time.Duration
	rate                   float64
	quietCores, floodCores float64
}

// measureFlood measures a's latencies in four rounds of 100 requests with
// the flood held, each followed by one with the flood running.
func measureFlood(t *testing.T, client *http.Client, urlA string, f *flood) floodMeasurement {
	t.Helper()
	const rounds, perRound = 4, 100
	var m floodMeasurement
	var quietTime, floodTime, quietCPU, floodCPU time.Duration
	var served int64
	for range rounds {
		// The flood's requests in progress are answered (b's gate holds
		// each about MaxDebt at most) before a's quiet round starts.
		f.tell(t, "pause", "paused")
		start, cpu0 := time.Now(), processCPUTime()
		m.quiet = append(m.quiet, latencies(t, client, urlA, perRound)...)
		quietTime += time.Since(start)
		quietCPU += processCPUTime() - cpu0
		f.tell(t, "run", "running")
		before := f.served.Load()
		eventually(t, "tenant b's flood to run again", func() bool { return f.served.Load() > before+floodConns })
		start, cpu0, before = time.Now(), processCPUTime(), f.served.Load()
		m.abused = append(m.abused, latencies(t, client, urlA, perRound)...)
		floodTime += time.Since(start)
		floodCPU += processCPUTime() - cpu0
		served += f.served.Load() - before
	}
	slices.Sort(m.quiet)
	slices.Sort(m.abused)
	m.rate = float64(served) / floodTime.Seconds()
	m.quietCores, m.floodCores = quietCPU.Seconds()/quietTime.Seconds(), floodCPU.Seconds()/floodTime.Seconds()
	return m
}

// processCPUTime is the CPU time the test's process spent so far, user
// and system.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// flood is a child process of the test binary that floods a URL
// (floodChild), the count of its answered requests and its answers to
// pause and run.
type flood struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	served atomic.Int64
	acks   chan string
	done   chan struct{}
	// running is how long the flood ran before it was last held, since
	// when it runs again (zero while it is held).
	running time.Duration
	since   time.Time
}

// startFlood starts a child process that sends requests to url from
// floodConns connections as fast as they are answered, until stop.
func startFlood(t *testing.T, url string) *flood {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCheapRequestFloodSlowsOnlyItsTenant$", "-test.count=1")
	cmd.Env = append(os.Environ(), floodChildEnv+"="+url)
	cmd.Stderr = os.Stderr
	f := &flood{cmd: cmd, acks: make(chan string, 1), done: make(chan struct{})}
	var err error
	if f.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.since = time.Now()
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "served "):
				if v, err := strconv.ParseInt(strings.TrimPrefix(line, "served "), 10, 64); err == nil {
					f.served.Store(v)
				}
			case line == "paused" || line == "running":
				f.acks <- line
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-f.done
		cmd.Wait()
	})
	return f
}

// tell sends the child a command (pause, run) and waits for its answer:
// paused once none of its requests is in progress, running at once.
func (f *flood) tell(t *testing.T, cmd, ack string) {
	t.Helper()
	if _, err := io.WriteString(f.stdin, cmd+"\n"); err != nil {
		t.Fatalf("flood: %v", err)
	}
	select {
	case got := <-f.acks:
		if got != ack {
			t.Fatalf("flood answered %q to %s", got, cmd)
		}
		switch cmd {
		case "pause":
			f.running += time.Since(f.since)
			f.since = time.Time{}
		case "run":
			f.since = time.Now()
		}
	case <-f.done:
		t.Fatalf("flood: the child exited")
	case <-time.After(20 * time.Second):
		t.Fatalf("flood: no answer to %s in 20 s", cmd)
	}
}

// stop ends the flood (the child exits when its standard input closes)
// and returns how long it ran.
func (f *flood) stop(t *testing.T) time.Duration {
	t.Helper()
	if !f.since.IsZero() {
		f.running += time.Since(f.since)
	}
	f.stdin.Close()
	<-f.done
	if err := f.cmd.Wait(); err != nil {
		t.Errorf("flood: %v", err)
	}
	return f.running
}

// floodChild sends requests to url from floodConns keep-alive
// connections as fast as they are answered and prints how many were
// answered every 10 ms, until its standard input closes. A line "pause"
// on its standard input holds its connections once their requests are
// answered and is answered "paused" then; "run" lets them go on.
func floodChild(url string) {
	var (
		mu             sync.Mutex
		cond           = sync.NewCond(&mu)
		paused, closed bool
		active         int
		served         atomic.Int64
		outMu          sync.Mutex
	)
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	for range floodConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for {
				mu.Lock()
				for paused && !closed {
					cond.Wait()
				}
				if closed {
					mu.Unlock()
					return
				}
				active++
				mu.Unlock()
				if resp, err := c.Get(url); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					served.Add(1)
				}
				mu.Lock()
				active--
				cond.Broadcast()
				mu.Unlock()
			}
		}()
	}
	go func() {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for range tk.C {
			say("served %d", served.Load())
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		mu.Lock()
		switch sc.Text() {
		case "pause":
			paused = true
			for active > 0 {
				cond.Wait()
			}
			mu.Unlock()
			say("paused")
		case "run":
			paused = false
			cond.Broadcast()
			mu.Unlock()
			say("running")
		default:
			mu.Unlock()
		}
	}
	mu.Lock()
	closed = true
	cond.Broadcast()
	mu.Unlock()
	wg.Wait()
	say("served %d", served.Load())
}
