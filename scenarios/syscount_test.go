package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// System calls per request in the L7 benchmark: perf stat counts the
// syscalls tracepoints of all of a proxy's threads while a load
// generator runs. /proc/PID/io's syscr and syscw do not count recv(2)
// and send(2), which HAProxy, nginx and serve's HTTP/1.1 fast path use
// on sockets.

// sysGroups are the columns of the count, each the sum of its
// tracepoints: all calls, then the ones worth reading apart.
var sysGroups = []struct {
	name   string
	events []string
}{
	{"calls", []string{"raw_syscalls:sys_enter"}},
	{"reads", []string{"syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_readv", "syscalls:sys_enter_recvmsg"}},
	{"writes", []string{"syscalls:sys_enter_write", "syscalls:sys_enter_sendto", "syscalls:sys_enter_writev", "syscalls:sys_enter_sendmsg"}},
	{"waits", []string{"syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait", "syscalls:sys_enter_epoll_pwait2"}},
	{"futex", []string{"syscalls:sys_enter_futex"}},
	{"uring", []string{"syscalls:sys_enter_io_uring_enter"}},
}

// sysCalls is one count per sysGroups entry, in its order.
type sysCalls []float64

// sysCounter counts a process's system calls with perf stat.
type sysCounter struct {
	perf    string   // perf's path
	dir     string   // where perf writes its counts
	events  []string // the tracepoints of sysGroups this kernel has
	missing []string // the ones it does not have, counted as 0
	err     error    // why system calls cannot be counted, or nil
}

// newSysCounter finds perf and asks it which of sysGroups' tracepoints
// the kernel has. raw_syscalls:sys_enter and syscalls:sys_enter_read
// exist wherever system calls can be traced: if perf does not list them,
// it cannot see the tracepoints (no tracefs), and nothing is counted.
func newSysCounter(dir string) *sysCounter {
	c := &sysCounter{dir: dir}
	path, err := exec.LookPath("perf")
	if err != nil {
		c.err = errors.New("perf is not installed (Debian package linux-perf)")
		return c
	}
	c.perf = path
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "list", "raw_syscalls:*", "syscalls:*").CombinedOutput()
	if err != nil {
		c.err = fmt.Errorf("perf list: %v: %s", err, bytes.TrimSpace(out))
		return c
	}
	listed := perfTracepoints(out)
	for _, e := range []string{"raw_syscalls:sys_enter", "syscalls:sys_enter_read"} {
		if !listed[e] {
			c.err = fmt.Errorf("perf list shows no %s tracepoint: is tracefs mounted at /sys/kernel/tracing?", e)
			return c
		}
	}
	for _, g := range sysGroups {
		for _, e := range g.events {
			if listed[e] {
				c.events = append(c.events, e)
			} else {
				c.missing = append(c.missing, e)
			}
		}
	}
	return c
}

// perfTracepoints returns the tracepoints in perf list's output, a line
// each: the name, then "[Tracepoint event]".
func perfTracepoints(out []byte) map[string]bool {
	listed := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "[Tracepoint event]") {
			listed[f[0]] = true
		}
	}
	return listed
}

// perfStat is a perf stat attached to a process.
type perfStat struct {
	c       *sysCounter
	cmd     *exec.Cmd
	out     string   // the file perf writes its counts to
	stderr  *os.File // perf's messages
	ctl     *os.File // where perf reads enable and disable
	ack     *os.File // where it answers ack to each
	done    chan error
	exited  error // cmd.Wait's error once done is drained
	stopped bool
}

// perfAck is how long perf may take to attach to a process or to act on a
// command on its control pipe.
const perfAck = 10 * time.Second

// start attaches perf stat to every thread of process pid (threads it
// starts later are counted too) with its events off (-D -1), then turns
// them on through perf's control pipe and waits for perf's ack: once
// start returns, perf is attached and counting. The test's cleanup kills
// a perf that stop did not end.
func (c *sysCounter) start(tb testing.TB, pid int) (*perfStat, error) {
	tb.Helper()
	out, err := os.CreateTemp(c.dir, fmt.Sprintf("perf-%d-*.csv", pid))
	if err != nil {
		return nil, err
	}
	out.Close()
	stderr, err := os.CreateTemp(c.dir, fmt.Sprintf("perf-%d-*.stderr", pid))
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		stderr.Close()
		return nil, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		stderr.Close()
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	// ExtraFiles become perf's descriptors 3 and 4.
	cmd := exec.Command(c.perf, "stat", "-x,", "-o", out.Name(), "-D", "-1", "--control", "fd:3,4",
		"-e", strings.Join(c.events, ","), "-p", strconv.Itoa(pid))
	cmd.ExtraFiles = []*os.File{ctlR, ackW}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	// perf holds its own copies; with the parent's closed, perf's exit
	// ends a read of ackR.
	ctlR.Close()
	ackW.Close()
	if err != nil {
		stderr.Close()
		ctlW.Close()
		ackR.Close()
		return nil, err
	}
	s := &perfStat{c: c, cmd: cmd, out: out.Name(), stderr: stderr, ctl: ctlW, ack: ackR, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	tb.Cleanup(s.kill)
	if err := s.command("enable"); err != nil {
		s.kill()
		return nil, s.failed(err)
	}
	return s, nil
}

// command writes cmd to perf's control pipe and waits for its ack.
// perf 6.1 writes the ack as "ack\n" and its terminating NUL.
func (s *perfStat) command(cmd string) error {
	if _, err := s.ctl.WriteString(cmd + "\n"); err != nil {
		return fmt.Errorf("%s: %v", cmd, err)
	}
	_ = s.ack.SetReadDeadline(time.Now().Add(perfAck))
	var got []byte
	buf := make([]byte, 64)
	for {
		n, err := s.ack.Read(buf)
		got = append(got, bytes.ReplaceAll(buf[:n], []byte{0}, nil)...)
		switch {
		case string(got) == "ack\n":
			return nil
		case !strings.HasPrefix("ack\n", string(got)):
			return fmt.Errorf("%s: perf answered %q, want ack", cmd, got)
		case err != nil:
			return fmt.Errorf("%s: no ack: %v", cmd, err)
		}
	}
}

// failed adds perf's exit status and messages to err, leaving out the
// lines that say its events were turned on and off.
func (s *perfStat) failed(err error) error {
	data, _ := os.ReadFile(s.stderr.Name())
	var msg []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && line != "Events enabled" && line != "Events disabled" {
			msg = append(msg, line)
		}
	}
	if s.exited != nil {
		err = fmt.Errorf("%v (perf: %v)", err, s.exited)
	}
	if len(msg) == 0 {
		return fmt.Errorf("perf stat: %v", err)
	}
	return fmt.Errorf("perf stat: %v: %s", err, strings.Join(msg, "\n"))
}

// stop turns perf's events off, ends perf with SIGINT (on which it
// writes its counts) and returns the counts of sysGroups, divided by
// requests.
func (s *perfStat) stop(requests int64) (sysCalls, error) {
	err := s.command("disable")
	if err != nil {
		s.kill()
		return nil, s.failed(err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case s.exited = <-s.done:
		s.stopped = true
	case <-time.After(perfAck):
		s.kill()
		return nil, s.failed(fmt.Errorf("still running %v after SIGINT, killed", perfAck))
	}
	s.closeFiles()
	// perf stat ends with status 0 on SIGINT, or dies of the signal it
	// passes on to itself; either way it has written its counts.
	var exit *exec.ExitError
	if errors.As(s.exited, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT {
		s.exited = nil
	}
	if s.exited != nil {
		return nil, s.failed(errors.New("exited"))
	}
	data, err := os.ReadFile(s.out)
	if err != nil {
		return nil, err
	}
	counts, err := parsePerfStat(data, s.c.events)
	if err != nil {
		return nil, s.failed(err)
	}
	if requests <= 0 {
		return nil, fmt.Errorf("%d requests to divide the counts by", requests)
	}
	return sysPerRequest(counts, requests), nil
}

// kill ends a perf still running and waits for it.
func (s *perfStat) kill() {
	if !s.stopped {
		_ = s.cmd.Process.Kill()
		s.exited = <-s.done
		s.stopped = true
	}
	s.closeFiles()
}

func (s *perfStat) closeFiles() {
	s.ctl.Close()
	s.ack.Close()
	s.stderr.Close()
}

// parsePerfStat reads perf stat's -x, output: a line per event, its count
// first and its name third; blank lines and lines starting with # are
// perf's comments. Every event of want must have a count. perf writes
// "<not counted>" for an event that never ran (the process was never
// scheduled while perf counted) and "<not supported>" for one it could
// not open: those are errors, not zeros.
func parsePerfStat(out []byte, want []string) (map[string]int64, error) {
	counts := map[string]int64{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 3 {
			return nil, fmt.Errorf("perf stat line %q: want count,unit,event,...", line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: count %q", f[2], f[0])
		}
		counts[f[2]] += n
	}
	for _, e := range want {
		if _, ok := counts[e]; !ok {
			return nil, fmt.Errorf("no count of %s in perf's output", e)
		}
	}
	return counts, nil
}

// sysPerRequest sums counts into sysGroups and divides each sum by
// requests. An event without a count adds nothing: the counter leaves out
// only the tracepoints the kernel does not have.
func sysPerRequest(counts map[string]int64, requests int64) sysCalls {
	per := make(sysCalls, len(sysGroups))
	for i, g := range sysGroups {
		var sum int64
		for _, e := range g.events {
			sum += counts[e]
		}
		per[i] = float64(sum) / float64(requests)
	}
	return per
}

func TestParsePerfStat(t *testing.T) {
	t.Parallel()
	// What perf 6.1 writes with -x, -o: a comment, a blank line, then the
	// counts.
	out := "# started on Wed Dec  2 00:31:30 2026\n\n" +
		"6182,,raw_syscalls:sys_enter,149099223,100.00,,\n" +
		"1188,,syscalls:sys_enter_read,149099223,100.00,,\n" +
		"12,,syscalls:sys_enter_recvfrom,149099223,100.00,,\n" +
		"600,,syscalls:sys_enter_sendto,149099223,100.00,,\n" +
		"0,,syscalls:sys_enter_io_uring_enter,149099223,100.00,,\n"
	want := []string{"raw_syscalls:sys_enter", "syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom",
		"syscalls:sys_enter_sendto", "syscalls:sys_enter_io_uring_enter"}
	counts, err := parsePerfStat([]byte(out), want)
	if err != nil {
		t.Fatal(err)
	}
	if counts["raw_syscalls:sys_enter"] != 6182 || counts["syscalls:sys_enter_read"] != 1188 || counts["syscalls:sys_enter_io_uring_enter"] != 0 {
		t.Errorf("counts %v", counts)
	}
	per := sysPerRequest(counts, 100)
	if wantPer := (sysCalls{61.82, 12, 6, 0, 0, 0}); fmt.Sprint(per) != fmt.Sprint(wantPer) {
		t.Errorf("per request %v, want %v (calls, reads, writes, waits, futex, uring)", per, wantPer)
	}

	for name, tc := range map[string]struct {
		out  string
		want []string
	}{
		"not counted":   {"<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n", want[:1]},
		"not supported": {"<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n", want[:1]},
		"missing event": {"6182,,raw_syscalls:sys_enter,149099223,100.00,,\n", want[:2]},
		"no output":     {"", want[:1]},
		"not CSV":       {"Error: no permission\n", want[:1]},
	} {
		if counts, err := parsePerfStat([]byte(tc.out), tc.want); err == nil {
			t.Errorf("%s: counts %v, want an error", name, counts)
		}
	}
}

func TestPerfTracepoints(t *testing.T) {
	t.Parallel()
	out := "  syscalls:sys_enter_read                            [Tracepoint event]\n" +
		"  syscalls:sys_enter_readv                           [Tracepoint event]\n" +
		"  raw_syscalls:sys_enter                             [Tracepoint event]\n"
	got := perfTracepoints([]byte(out))
	if len(got) != 3 || !got["syscalls:sys_enter_read"] || !got["raw_syscalls:sys_enter"] || got["syscalls:sys_enter_recvfrom"] {
		t.Errorf("perfTracepoints = %v", got)
	}
}
