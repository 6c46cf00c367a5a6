package netlab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a program running inside a host.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

// Start runs a program inside the host, with its output appended to
// logPath (or discarded when logPath is ""). The program runs in a
// process group of its own, dies with the process that started it, and
// is killed by Lab.Close. Do not call Start from inside Host.Do.
func (h *Host) Start(logPath string, env []string, name string, args ...string) (*Process, error) {
	var out io.Writer = io.Discard
	var logFile *os.File
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		logFile, out = f, f
		fmt.Fprintf(f, "==== %s %v in %s at %s ====\n", name, args, h.Name, time.Now().Format(time.RFC3339Nano))
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{name: h.Name + ":" + name, cmd: cmd, done: make(chan struct{})}
	h.lab.mu.Lock()
	if h.lab.closed {
		h.lab.mu.Unlock()
		if logFile != nil {
			logFile.Close()
		}
		return nil, errors.New("lab is closed")
	}
	// `ip netns exec` replaces itself with the program: the pid is the
	// program's.
	err := cmd.Start()
	if err == nil {
		h.lab.procs = append(h.lab.procs, p)
	}
	h.lab.mu.Unlock()
	if err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s in %s: %w", name, h.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Pid is the program's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the program has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the program is still running.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the program alone (not to its children).
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL to the program's whole process group and waits for
// the program to exit.
func (p *Process) Kill() {
	p.killGroup()
	<-p.done
}

func (p *Process) killGroup() {
	if p.Running() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Wait waits up to timeout for the program to exit and returns how it
// ended.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", p.name, timeout)
	}
}
