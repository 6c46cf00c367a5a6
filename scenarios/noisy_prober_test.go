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
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/client"
)

// a's probers and the admin prober run in a process of their own, the
// test binary started again in the role "prober", at a higher priority
// than the rest of the machine (proberNice). A client of a is another
// machine with its own CPU; so is b. On one 2-core machine the test
// process (b's clients, beside a's probers) and b's attacker processes
// took the CPU a's probers needed: in "expensive checks" the LB host's
// threads waited 0.00 s for a CPU in 10 s and the host served a's
// requests within 50 ms, while the test process waited 3.3 s and its
// probers saw a p99 of 88 ms. A prober that waits only for the LB host
// measures the host. It uses a small part of a core, so its priority
// takes little from the host.
const (
	proberConfEnv  = "TEAPOT_NOISY_PROBER_CONF"
	proberAddrsEnv = "TEAPOT_NOISY_PROBER_ADDRS"
	// proberNice is the prober's niceness (it needs root or CAP_SYS_NICE;
	// without, it runs at the default and its notes say so).
	proberNice = -10
)

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

// attackProber is the prober process: it probes as startProbes does,
// tagging each sample with the phase last named on stdin ("phase N"),
// until stdin says "finish" (or closes); then it writes every sample.
func attackProber(in *bufio.Scanner, out *json.Encoder) error {
	cfg, err := client.LoadConfig(os.Getenv(proberConfEnv))
	if err != nil {
		return err
	}
	conn, err := client.Dial(context.Background(), cfg, os.Getenv(proberAddrsEnv))
	if err != nil {
		return err
	}
	defer conn.Close()
	p := probeLocally(conn)
	if err := out.Encode("ready"); err != nil {
		return err
	}
	for in.Scan() {
		line := in.Text()
		if n, ok := strings.CutPrefix(line, "phase "); ok {
			i, err := strconv.Atoi(n)
			if err != nil {
				return fmt.Errorf("bad command %q", line)
			}
			p.phase.Store(int64(i))
			continue
		}
		if line == "finish" {
			break
		}
		return fmt.Errorf("bad command %q", line)
	}
	p.finishLocal()
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
	return out.Encode(proberResult{HTTP: wire(p.http), TCP: wire(p.tcp), Admin: wire(p.admin), Late: wire(p.late)})
}

// startProberProcess starts the prober process for the lab's admin API
// and tenant a's VIP; it runs until finish.
func startProberProcess(tb testing.TB, l *noisyLab) *noisyProbes {
	tb.Helper()
	var addrs []string
	for _, n := range l.c.nodes {
		addrs = append(addrs, n.apiAddr)
	}
	a := startAttackerCmd(tb, "prober", niceCommand(proberNice, os.Args[0]),
		proberConfEnv+"="+l.c.adminConf(), proberAddrsEnv+"="+strings.Join(addrs, ","))
	var ready string
	if err := a.recv(&ready); err != nil || ready != "ready" {
		tb.Fatalf("prober: %q %v", ready, err)
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
		if err := p.remote.send(fmt.Sprintf("phase %d", i)); err != nil {
			p.remote.tb.Errorf("prober: %v", err)
		}
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
	a := p.remote
	if err := a.send("finish"); err != nil {
		a.tb.Errorf("prober: %v", err)
	}
	var r proberResult
	if err := a.recv(&r); err != nil {
		a.tb.Errorf("prober's samples: %v", err)
	}
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
	a.in.Close()
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
