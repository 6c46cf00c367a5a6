package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/internal/benchproc"
)

// syscallCounter counts the system calls of a process and all its
// threads (those it starts later included: perf's counters are
// inherited) over a window, with perf stat and the raw_syscalls:sys_enter
// tracepoint, which costs the counted process next to nothing (strace
// -c would stop it at every call).
type syscallCounter struct {
	cmd *exec.Cmd
	out string
}

// countSyscalls starts counting pid's system calls; nil when perf is not
// installed or cannot count (the figures then show "-").
func countSyscalls(dir string, pid int) *syscallCounter {
	if pid == 0 {
		return nil
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil
	}
	out := filepath.Join(dir, fmt.Sprintf("perf-%d-%d.csv", pid, time.Now().UnixNano()))
	cmd := exec.Command(perf, "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", strconv.Itoa(pid), "-o", out)
	if err := cmd.Start(); err != nil {
		return nil
	}
	// perf attaches within a few milliseconds; its output file says so.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(out); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return &syscallCounter{cmd: cmd, out: out}
}

// stop ends the window and returns the system calls counted; -1 when
// they could not be.
func (c *syscallCounter) stop() int64 {
	if c == nil {
		return -1
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	_ = c.cmd.Wait()
	b, err := os.ReadFile(c.out)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ",")
		if len(f) > 2 && strings.Contains(l, "raw_syscalls:sys_enter") {
			if n, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// sink accepts connections on 127.0.0.1 and answers each with what it
// read, up to the client's end, then ends: the member of the
// per-connection phase.
func sink() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln, nil
}

// connSample is what a run of short connections through a proxy cost it.
type connSample struct {
	conns    int
	syscalls int64   // -1: not counted
	cpu      float64 // proxy CPU seconds
}

// shortConns opens n connections one after another through addr, each
// sending msg, ending its half and reading the echo to the end, and
// counts what the proxy process p spent on them.
func shortConns(dir string, p *benchproc.Proc, addr string, n int, msg []byte) (connSample, error) {
	buf := make([]byte, 64<<10)
	one := func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		got := 0
		for {
			k, err := c.Read(buf)
			got += k
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
		}
		if got != len(msg) {
			return fmt.Errorf("echo of %d bytes, sent %d", got, len(msg))
		}
		return nil
	}
	// A warm-up connection: the proxy's first one starts its goroutines
	// and rings.
	if err := one(); err != nil {
		return connSample{}, err
	}
	counter := countSyscalls(dir, p.Pid())
	cpu0 := p.CPUTime()
	for i := range n {
		if err := one(); err != nil {
			counter.stop()
			return connSample{}, fmt.Errorf("connection %d: %w", i, err)
		}
	}
	s := connSample{conns: n, syscalls: counter.stop()}
	s.cpu = (p.CPUTime() - cpu0).Seconds()
	return s, nil
}

// loadAvg is the 1-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
