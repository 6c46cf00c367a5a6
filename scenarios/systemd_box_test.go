package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netUnit is the container's network, set up at every boot before
// network-online.target: eth0 (a veth systemd-nspawn creates) carries
// 192.0.2.1/24 and the arp VIPs, and the backend's address 192.0.2.50 is
// on lo.
const netUnit = `[Unit]
Description=the test's network: eth0 and the backend's address
DefaultDependencies=no
Before=network-online.target network.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip link set lo up
ExecStart=/usr/sbin/ip link set eth0 up
ExecStart=/usr/sbin/ip addr add 192.0.2.1/24 dev eth0
ExecStart=/usr/sbin/ip addr add 192.0.2.50/32 dev lo

[Install]
WantedBy=network-online.target multi-user.target
`

// box is a Debian root booted by systemd-nspawn with systemd as PID 1.
type box struct {
	t      *testing.T
	name   string // machine name; also the host's end of the veth
	root   string // the overlay the container boots
	debs   string // bound read-only at /mnt/debs
	cgroup []string
	nspawn *exec.Cmd
	exited chan struct{}
	log    string // the container's console
	pid    int    // the container's PID 1, seen from the host
}

// debianRoot returns the cached Debian 12 root (scenarios/debianroot.sh
// debootstraps it when the cache lacks it).
func debianRoot(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scenarios", "debianroot.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scenarios/debianroot.sh: %v\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	if d := time.Since(start); d > 10*time.Second {
		t.Logf("the Debian root %s took %s (debootstrap)", dir, d.Round(time.Second))
	}
	return dir
}

// tail2 returns the last n lines of out.
func tail2(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// newBox mounts an overlay of the cached root (the lower folder is never
// written), adds the test's network unit and boots it. debs is a folder
// bound read-only at /mnt/debs.
func newBox(t *testing.T, debs string) *box {
	t.Helper()
	lower := debianRoot(t)
	work := t.TempDir()
	b := &box{t: t, name: fmt.Sprintf("tpsd%d", os.Getpid()%100000), debs: debs,
		root: filepath.Join(work, "root"), log: filepath.Join(work, "console.log")}
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, filepath.Join(work, "upper"), filepath.Join(work, "work"))
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, b.root).CombinedOutput(); err != nil {
		t.Fatalf("mount an overlay of the cached root: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		b.poweroff()
		b.removeCgroups()
		if out, err := exec.Command("umount", b.root).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s; detaching it", b.root, err, out)
			_ = exec.Command("umount", "-l", b.root).Run()
		}
	})
	unit := filepath.Join(b.root, "etc/systemd/system/teapot-test-net.service")
	if err := os.WriteFile(unit, []byte(netUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"network-online.target.wants", "multi-user.target.wants"} {
		d := filepath.Join(b.root, "etc/systemd/system", w)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../teapot-test-net.service", filepath.Join(d, "teapot-test-net.service")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(b.root, "etc/hostname"), []byte(b.name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.boot()
	return b
}

// boot starts systemd-nspawn from cgroups of its own (no systemd runs on
// this machine to give it a unit) and waits until the container's
// systemd has finished starting up.
func (b *box) boot() {
	t := b.t
	t.Helper()
	start := time.Now()
	if b.cgroup == nil {
		for _, h := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"} {
			if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
				continue
			}
			d := filepath.Join(h, "teapot-"+b.name)
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatalf("a cgroup for systemd-nspawn: %v", err)
			}
			b.cgroup = append(b.cgroup, d)
			if h == "/sys/fs/cgroup" {
				break // a pure cgroup2 machine
			}
		}
		if len(b.cgroup) == 0 {
			unavailable(t, "no cgroup hierarchy writable under /sys/fs/cgroup for systemd-nspawn")
		}
	}
	var move strings.Builder
	for _, d := range b.cgroup {
		fmt.Fprintf(&move, "echo $$ > %s/cgroup.procs && ", d)
	}
	logf, err := os.OpenFile(b.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"-c", move.String() + `exec "$@"`, "sh", "systemd-nspawn", "--quiet", "--boot",
		"--register=no", "--keep-unit", "--machine=" + b.name, "--directory=" + b.root,
		"--private-network", "--network-veth-extra=" + b.name + ":eth0",
		"--capability=CAP_BPF", "--system-call-filter=bpf", "--console=read-only",
		"--bind-ro=" + b.debs + ":/mnt/debs"}
	cmd := exec.Command("sh", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_LOG_LEVEL=warning"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b.nspawn, b.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(b.exited)
	b.pid = 0
	waitFor(t, 60*time.Second, "the container's PID 1", func() error {
		select {
		case <-b.exited:
			return errStop(fmt.Errorf("systemd-nspawn exited (%v):\n%s", cmd.ProcessState, tailFile(b.log, 40)))
		default:
		}
		pid, err := containerInit(cmd.Process.Pid)
		b.pid = pid
		return err
	})
	// The host's end of eth0 goes up so that eth0 has a carrier; it has
	// no address and nothing else on it.
	if out, err := exec.Command("ip", "link", "set", "dev", b.name, "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set dev %s up: %v %s", b.name, err, out)
	}
	var state string
	waitFor(t, 2*time.Minute, "the container's systemd to finish starting up", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		state, _ = b.execCtx(ctx, "systemctl", "is-system-running", "--wait")
		if state == "running" || state == "degraded" {
			return nil
		}
		return fmt.Errorf("is-system-running says %q\nconsole:\n%s", state, tailFile(b.log, 40))
	})
	if state == "degraded" {
		failed, _ := b.exec("systemctl", "--failed", "--no-legend", "--plain")
		t.Logf("the container's systemd is degraded; failed units:\n%s", failed)
	}
	t.Logf("container %s booted (systemd %s) in %s", b.name, b.must("sh", "-c", "systemctl --version | head -1"), time.Since(start).Round(time.Millisecond))
}

// containerInit finds the container's PID 1: the descendant of
// systemd-nspawn whose PID in its own namespace is 1.
func containerInit(nspawn int) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int]int{}
	var inits []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(st)) {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "PPid:":
				parent[pid], _ = strconv.Atoi(f[1])
			case len(f) == 3 && f[0] == "NSpid:" && f[2] == "1":
				inits = append(inits, pid)
			}
		}
	}
	for _, pid := range inits {
		for p, n := pid, 0; p > 1 && n < 8; p, n = parent[p], n+1 {
			if parent[p] != nspawn {
				continue
			}
			// Before it execs systemd, the process is systemd-nspawn's
			// child setting up the container's namespaces.
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "systemd" {
				return 0, fmt.Errorf("the container's PID 1 (%d) is %q, not systemd yet", pid, strings.TrimSpace(string(comm)))
			}
			return pid, nil
		}
	}
	return 0, errors.New("no process of PID 1 in a namespace under systemd-nspawn yet")
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail2(data, n)
}

// execCtx runs a command inside every namespace of the container, as root
// in its root folder, and returns its trimmed combined output.
func (b *box) execCtx(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(b.pid), "--all",
		"--root", "--wd", "--", name}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// exec runs a command in the container with a two-minute bound.
func (b *box) exec(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return b.execCtx(ctx, name, args...)
}

// must runs a command in the container and fails the test when it fails.
func (b *box) must(name string, args ...string) string {
	b.t.Helper()
	out, err := b.exec(name, args...)
	if err != nil {
		b.t.Fatalf("in the container: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// sh runs a shell script in the container.
func (b *box) sh(script string) (string, error) { return b.exec("sh", "-ec", script) }

// write writes a file into the running container.
func (b *box) write(path, content string, mode os.FileMode) {
	b.t.Helper()
	p := filepath.Join(b.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		b.t.Fatal(err)
	}
}

// read reads a file of the container ("" when it does not exist).
func (b *box) read(path string) string {
	data, _ := os.ReadFile(filepath.Join(b.root, path))
	return string(data)
}

// exists reports whether a path exists in the container.
func (b *box) exists(path string) bool {
	_, err := os.Lstat(filepath.Join(b.root, path))
	return err == nil
}

// inNet runs fn on a thread inside the container's network namespace;
// sockets fn opens stay there.
func (b *box) inNet(fn func() error) error {
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", b.pid))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter the container's network namespace: %w", err)
	}
	defer func() {
		// A thread that cannot go back stays locked and ends with the
		// goroutine.
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}

// dial opens a TCP connection from inside the container.
func (b *box) dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := b.inNet(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// reboot reboots the container: systemd-nspawn exits with 133 on a reboot
// (systemd-nspawn@.service restarts it), so it is started again on the same
// root.
func (b *box) reboot() {
	t := b.t
	t.Helper()
	start := time.Now()
	_, _ = b.exec("systemctl", "reboot")
	select {
	case <-b.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the container did not shut down within 2m of systemctl reboot:\n%s", tailFile(b.log, 30))
	}
	if code := b.nspawn.ProcessState.ExitCode(); code != 133 {
		t.Fatalf("systemd-nspawn exited with %d after systemctl reboot, want 133:\n%s", code, tailFile(b.log, 30))
	}
	t.Logf("the container shut down for the reboot in %s", time.Since(start).Round(time.Millisecond))
	b.boot()
}

// poweroff stops the container: SIGTERM makes systemd-nspawn ask the
// container's systemd to power off; SIGKILL after a minute.
func (b *box) poweroff() {
	if b.nspawn == nil || b.nspawn.Process == nil {
		return
	}
	select {
	case <-b.exited:
		return
	default:
	}
	_ = b.nspawn.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(time.Minute):
		b.t.Logf("the container did not power off within 1m; killing it")
		_ = syscall.Kill(-b.nspawn.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
}

// removeCgroups kills what is left in the cgroups made for
// systemd-nspawn (a container whose systemd-nspawn was killed outlives it)
// and removes them, deepest first.
func (b *box) removeCgroups() {
	for _, top := range b.cgroup {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		deadline := time.Now().Add(10 * time.Second)
		for {
			left := 0
			for _, d := range dirs {
				procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
				for _, f := range strings.Fields(string(procs)) {
					if pid, err := strconv.Atoi(f); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
						left++
					}
				}
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}
