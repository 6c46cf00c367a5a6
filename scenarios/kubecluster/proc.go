package kubecluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is one component of the cluster running in a host's network
// namespace, logging to a file of its own.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error
}

// start runs bin inside the network namespace ns (a name under
// /run/netns) through nsenter. Unlike `ip netns exec`, nsenter keeps the
// machine's mount namespace and /sys, which the kubelet, containerd and
// runc share: a volume the kubelet mounts is the one runc binds into the
// container, and the cgroup file systems stay where they are.
func start(dir, ns, name, bin string, env []string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, LogPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== start %s at %s ====\n", name, time.Now().Format(time.RFC3339Nano))
	p.cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--", bin}, args...)...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		fmt.Fprintf(logFile, "==== %s exited at %s: %v ====\n", name, time.Now().Format(time.RFC3339Nano), p.err)
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Running reports whether the process is still running.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the process group and waits for the exit.
func (p *Proc) Kill() {
	if p.Running() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.exited
}

// Stop sends SIGTERM, and SIGKILL if the process is still there after
// grace.
func (p *Proc) Stop(grace time.Duration) {
	if p.Running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// runIn runs a short command inside ns and returns its output.
func runIn(ctx context.Context, ns, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + ns, "--", name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}
