package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a process started under taskset.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// running holds the processes started and not yet stopped.
var running = struct {
	sync.Mutex
	m map[*proc]bool
}{m: map[*proc]bool{}}

// start runs bin on cpu with its output in dir/name.log; it dies with
// this process.
func start(dir, name, cpu, bin string, args ...string) (*proc, error) {
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
	p := &proc{name: name, cmd: cmd, log: logPath}
	running.Lock()
	running.m[p] = true
	running.Unlock()
	return p, nil
}

func stopAll() {
	running.Lock()
	ps := make([]*proc, 0, len(running.m))
	for p := range running.m {
		ps = append(ps, p)
	}
	running.Unlock()
	for _, p := range ps {
		p.stop()
	}
}

// stop ends the process (taskset execs it, so the pid is the program's).
func (p *proc) stop() {
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

// output is the end of what the process wrote.
func (p *proc) output() string {
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

// cpuTime is the CPU time the process used so far.
func (p *proc) cpuTime() time.Duration {
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

// freePort is a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until a socket listens on addr (an IPv4 host:port),
// reading /proc/net/tcp so that no probe connection reaches the iperf3
// server and no probe bind races the proxy's.
func waitListening(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("%q is not an IPv4 address and port", addr)
	}
	a := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New(addr + " did not listen within 10s")
}
