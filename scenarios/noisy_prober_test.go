package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/client"
	"golang.org/x/sys/unix"
)

// Tenant a's side of the lab runs in a process of its own, the test
// binary started again in the role "tenant-a", at a higher priority than
// the rest of the machine (aSideNice): a's two members and its probers,
// with the admin prober. A client of a and a's members are other machines
// with their own CPU; so are b's. On one 2-core machine the test process
// (b's clients) and b's attacker processes took the CPU a's probers and
// members needed: in "expensive checks" the test process waited 3.3 s for
// a CPU in 10 s and its probers saw a p99 of 88 ms while the host served
// a's requests within 50 ms. Probers and members that wait only for the LB
// host measure the host. They use a small part of a core, so their
// priority takes little from the host.
const (
	aSideConfEnv  = "TEAPOT_NOISY_PROBER_CONF"
	aSideAddrsEnv = "TEAPOT_NOISY_PROBER_ADDRS"
	// aSideNice is the process's niceness (it needs root or
	// CAP_SYS_NICE; without, it runs at the default and the quiet phase's
	// notes say so).
	aSideNice = -10
)

// aSideAddrs are a's members' addresses, the process's first message.
type aSideAddrs struct{ A1, A2 string }

// proberSample is a probeSample on the wire.
type proberSample struct {
	Phase int           `json:"p"`
	At    int64         `json:"a"` // unix ns
	What  string        `json:"w,omitempty"`
	Took  time.Duration `json:"t"`
	Err   string        `json:"e,omitempty"`
}

// proberResult is what the prober sends back when told to finish.
type proberResult struct {
	HTTP, TCP, Admin, Late []proberSample
}

// attackTenantA is tenant a's process. It starts a's members and says
// where they listen, then follows its commands (one a line on stdin):
// "probe" starts the probes (answered "probing"), "phase N" tags the
// samples from then on, "fail on" and "fail off" make a2's health check
// fail or pass, "lasthit" answers when a2 last served a request (unix
// ns), "finish" stops the probes and answers every sample.
func attackTenantA(in *bufio.Scanner, out *json.Encoder) error {
	a1, stop1, err := serveNoisyBackend("a1", "127.0.50.2")
	if err != nil {
		return err
	}
	defer stop1()
	a2, stop2, err := serveNoisyBackend("a2", "127.0.50.3")
	if err != nil {
		return err
	}
	defer stop2()
	if err := out.Encode(aSideAddrs{A1: a1.addr, A2: a2.addr}); err != nil {
		return err
	}
	var p *noisyProbes
	for in.Scan() {
		line := in.Text()
		switch cmd, arg, _ := strings.Cut(line, " "); cmd {
		case "probe":
			cfg, err := client.LoadConfig(os.Getenv(aSideConfEnv))
			if err != nil {
				return err
			}
			conn, err := client.Dial(context.Background(), cfg, os.Getenv(aSideAddrsEnv))
			if err != nil {
				return err
			}
			defer conn.Close()
			p = probeLocally(conn)
			err = out.Encode("probing")
		case "phase":
			i, err := strconv.Atoi(arg)
			if err != nil || p == nil {
				return fmt.Errorf("bad command %q", line)
			}
			p.phase.Store(int64(i))
		case "fail":
			a2.failing.Store(arg == "on")
		case "lasthit":
			err = out.Encode(a2.lastHit.Load())
		case "finish":
			if p == nil {
				return fmt.Errorf("finish before probe")
			}
			p.finishLocal()
			err = out.Encode(p.result())
		default:
			return fmt.Errorf("bad command %q", line)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// result is every sample, on the wire.
func (p *noisyProbes) result() proberResult {
	wire := func(ss []probeSample) []proberSample {
		out := make([]proberSample, 0, len(ss))
		for _, s := range ss {
			w := proberSample{Phase: s.phase, At: s.at.UnixNano(), What: s.what, Took: s.took}
			if s.err != nil {
				w.Err = s.err.Error()
			}
			out = append(out, w)
		}
		return out
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return proberResult{HTTP: wire(p.http), TCP: wire(p.tcp), Admin: wire(p.admin), Late: wire(p.late)}
}

// aSide is the test's handle of tenant a's process.
type aSide struct {
	*attacker
	addrs aSideAddrs
	mu    sync.Mutex // one command (and its answer) at a time
}

// startASide starts tenant a's process for the lab's admin API.
func startASide(tb testing.TB, l *noisyLab) *aSide {
	tb.Helper()
	var addrs []string
	for _, n := range l.c.nodes {
		addrs = append(addrs, n.apiAddr)
	}
	a := &aSide{attacker: startAttackerCmd(tb, "tenant-a", niceCommand(aSideNice, os.Args[0]),
		aSideConfEnv+"="+l.c.adminConf(), aSideAddrsEnv+"="+strings.Join(addrs, ","))}
	if err := a.recv(&a.addrs); err != nil {
		tb.Fatalf("tenant a's members: %v", err)
	}
	return a
}

// call sends a command and, with answer set, decodes its answer.
func (a *aSide) call(tb testing.TB, cmd string, answer any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.send(cmd); err != nil {
		tb.Errorf("tenant a's process: %s: %v", cmd, err)
		return
	}
	if answer != nil {
		if err := a.recv(answer); err != nil {
			tb.Errorf("tenant a's process: %s: %v", cmd, err)
		}
	}
}

// setFailing makes a2's health check fail or pass.
func (a *aSide) setFailing(tb testing.TB, on bool) {
	cmd := "fail off"
	if on {
		cmd = "fail on"
	}
	a.call(tb, cmd, nil)
}

// lastHit is when a2 last served a request (unix ns).
func (a *aSide) lastHit(tb testing.TB) int64 {
	var at int64
	a.call(tb, "lasthit", &at)
	return at
}

// probe starts a's probers and the admin prober.
func (a *aSide) probe(tb testing.TB) *noisyProbes {
	var ok string
	a.call(tb, "probe", &ok)
	if ok != "probing" {
		tb.Fatalf("tenant a's probers did not start")
	}
	return &noisyProbes{remote: a}
}

// niceCommand is the command that runs name at niceness n, through
// nice(1) (it warns and runs the command anyway when it may not).
func niceCommand(n int, name string) *exec.Cmd {
	if path, err := exec.LookPath("nice"); err == nil {
		return exec.Command(path, "-n", strconv.Itoa(n), name)
	}
	return exec.Command(name)
}

// setPhase tags the samples from now on with phase i.
func (p *noisyProbes) setPhase(i int) {
	if p.remote != nil {
		p.remote.call(p.remote.tb, fmt.Sprintf("phase %d", i), nil)
		return
	}
	p.phase.Store(int64(i))
}

// finish stops the probes and gathers their samples.
func (p *noisyProbes) finish() {
	if p.remote == nil {
		p.finishLocal()
		return
	}
	var r proberResult
	p.remote.call(p.remote.tb, "finish", &r)
	local := func(ws []proberSample) []probeSample {
		out := make([]probeSample, 0, len(ws))
		for _, w := range ws {
			s := probeSample{phase: w.Phase, at: time.Unix(0, w.At), what: w.What, took: w.Took}
			if w.Err != "" {
				s.err = errors.New(w.Err)
			}
			out = append(out, s)
		}
		return out
	}
	p.mu.Lock()
	p.http, p.tcp, p.admin, p.late = local(r.HTTP), local(r.TCP), local(r.Admin), local(r.Late)
	p.mu.Unlock()
}

// pid is the process the probes run in.
func (p *noisyProbes) pid() int {
	if p.remote != nil {
		return p.remote.cmd.Process.Pid
	}
	return os.Getpid()
}

// niceOf reads a process's niceness (/proc/PID/stat field 19).
func niceOf(pid int) (int, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 17 {
		return 0, io.ErrUnexpectedEOF
	}
	return strconv.Atoi(f[16])
}

// bSideNice is the niceness of b's side of the lab: the test process
// (b's clients) and b's attacker processes (started from it after
// lowerTestPriority). The LB host runs at the default niceness and a's
// process above it, so that on one machine each party's CPU is its own
// as it would be on separate machines: what the host does with its CPU
// is what the probes measure. At 10, b's TLS members (about a core of
// handshakes for 1,000 checks a second) still took a slice of the CPU
// the host's threads woke for: a's p99 in "expensive checks" was 36-56
// ms against a goal of 54 in 4 quiet runs, while the host measured its
// own requests within 25 ms.
const bSideNice = 19

// lowerTestPriority puts every thread of the test process at bSideNice
// until the test ends (then back at the default): the Go runtime makes
// its new threads from these, and processes started meanwhile (b's
// attackers) inherit it. Only as root, which can raise it again; without,
// it says so and leaves it.
func lowerTestPriority(tb testing.TB) string {
	if os.Geteuid() != 0 {
		return "b's side at the default niceness (not root: it could not be raised again)"
	}
	setAll := func(n int) error {
		var last error
		for range 2 { // a thread made while the first pass ran
			tasks, err := os.ReadDir("/proc/self/task")
			if err != nil {
				return err
			}
			for _, t := range tasks {
				tid, err := strconv.Atoi(t.Name())
				if err != nil {
					continue
				}
				if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, unix.ESRCH) {
					last = err
				}
			}
		}
		return last
	}
	if err := setAll(bSideNice); err != nil {
		tb.Logf("lower the test process's priority: %v", err)
	}
	tb.Cleanup(func() {
		if err := setAll(0); err != nil {
			tb.Errorf("restore the test process's priority: %v", err)
		}
	})
	return fmt.Sprintf("b's clients (the test process) and attacker processes at nice %d", bSideNice)
}
