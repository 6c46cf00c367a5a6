// Package benchproc runs the processes of the benchmark commands: each one
// pinned to a set of cores with taskset, its output in a log file, stopped
// with SIGTERM and killed if it is still there 5 seconds later. It also
// holds the entry point and the working-directory handling those commands
// share.
package benchproc

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process started under taskset.
type Proc struct {
	cmd *exec.Cmd
	log string
}

// running holds the processes started and not yet stopped.
var running = struct {
	sync.Mutex
	m map[*Proc]bool
}{m: map[*Proc]bool{}}

// Start runs bin with args on the cores cpu (a taskset -c list) with its
// output in dir/name.log; the process dies with this one.
func Start(dir, name, cpu, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("taskset", append([]string{"-c", cpu, bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{cmd: cmd, log: logPath}
	running.Lock()
	running.m[p] = true
	running.Unlock()
	return p, nil
}

// StopAll stops every process started and not yet stopped.
func StopAll() {
	running.Lock()
	ps := make([]*Proc, 0, len(running.m))
	for p := range running.m {
		ps = append(ps, p)
	}
	running.Unlock()
	for _, p := range ps {
		p.Stop()
	}
}

// Stop sends the process SIGTERM (taskset execs it, so the pid is the
// program's), kills it if it has not exited 5 seconds later, and waits for
// it. Stop on a nil Proc does nothing.
func (p *Proc) Stop() {
	if p == nil {
		return
	}
	running.Lock()
	delete(running.m, p)
	running.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// Output is the end (at most 2000 bytes) of what the process wrote, or
// "(nothing)".
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.log)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	if s == "" {
		return "(nothing)"
	}
	return s
}

// CPUTime is the CPU time (user and system) the process used so far; 0 for
// a nil Proc or when /proc cannot tell.
func (p *Proc) CPUTime() time.Duration {
	if p == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// Main is the entry point of a benchmark command named prog: when the first
// argument names one of subcommands it runs that with the arguments after
// it, otherwise run with all the arguments. On an error it prints
// "prog: error" to standard error and exits with status 1.
func Main(prog string, run func(args []string) error, subcommands map[string]func(args []string) error) {
	var err error
	if len(os.Args) > 1 && subcommands[os.Args[1]] != nil {
		err = subcommands[os.Args[1]](os.Args[2:])
	} else {
		err = run(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+":", err)
		os.Exit(1)
	}
}

// WorkDir makes a temporary directory named after prefix for the logs and
// files of a run. Until cleanup is called, SIGINT or SIGTERM stops every
// process started, removes the directory and exits with status 130;
// cleanup ends that and removes the directory.
func WorkDir(prefix string) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			StopAll()
			os.RemoveAll(dir)
			os.Exit(130)
		}
	}()
	return dir, func() {
		signal.Stop(sigs)
		os.RemoveAll(dir)
	}, nil
}

// Pid is the process's id (taskset execs the program, so it is the
// program's); 0 for a nil Proc.
func (p *Proc) Pid() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
