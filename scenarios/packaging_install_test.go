package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// installManifest is an arp pool, a tenant and one HTTP load balancer on
// port 80 of a VIP the installed host must add to its interface.
const installManifest = `
kind: VIPPool
name: l2
cidrs: ["192.0.2.200-192.0.2.203"]
mode: arp
---
kind: Tenant
name: acme
networks: [192.0.2.50/32]
pools: [l2]
---
kind: LoadBalancer
name: shop
tenant: acme
vip: { pool: l2, address: "192.0.2.200" }
listeners: [{ port: 80, protocol: http }]
routes: [{ path: /, pool: web }]
pools: { web: { members: ["192.0.2.50:8080"] } }
`

// installLab is the machine state TestHostPackageInstall changes.
type installLab struct {
	t     *testing.T
	ns    string
	dir   string
	serve *exec.Cmd
	done  chan struct{}
	log   string
}

// TestHostPackageInstall installs the amd64 deb with apt-get into this
// machine (a debootstrap chroot costs minutes of mirror traffic per run;
// the machine is a Debian root CI provisions fresh), checks the user, the
// files and the conffile, runs the unit's ExecStart as systemd would (the
// unit's user, only its ambient capabilities, its StateDirectory and
// WorkingDirectory, umask 0077) inside a network namespace, and checks it
// serves: cluster status from the installed CLI, an arp VIP on the
// namespace's interface and a listener on port 80. It then upgrades to a
// newer package (state and conffile edits kept) and purges (files, state,
// user and group gone). Everything it changed is undone, even on failure.
func TestHostPackageInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two packages and installs them into this machine")
	}
	if os.Geteuid() != 0 {
		unavailable(t, "installing a package needs root")
	}
	for _, tool := range []string{"apt-get", "dpkg", "dpkg-query", "setpriv", "ip", "ss", "adduser", "deluser", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not installed (Debian packages apt, dpkg, util-linux, iproute2, adduser, make)", tool)
		}
	}
	if out, _ := exec.Command("dpkg-query", "-W", "-f", "${Status}", "teapot-lb").Output(); strings.Contains(string(out), "installed") {
		unavailable(t, "teapot-lb is already installed on this machine (%s); the test would replace it", out)
	}
	if _, err := os.Stat("/var/lib/teapot-lb"); err == nil {
		unavailable(t, "/var/lib/teapot-lb exists on this machine; the test would delete it")
	}

	parallelScenarioTaking(t, 70*time.Second)
	start := time.Now()
	old := hostDeb(t, "v0.1.0")

	l := &installLab{t: t, ns: fmt.Sprintf("tpinst%d", os.Getpid()), dir: t.TempDir()}
	t.Cleanup(l.cleanup)
	l.run("ip", "netns", "add", l.ns)
	l.run("ip", "-n", l.ns, "link", "set", "lo", "up")
	l.run("ip", "-n", l.ns, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
	l.run("ip", "-n", l.ns, "addr", "add", "192.0.2.1/24", "dev", "eth0")
	l.run("ip", "-n", l.ns, "link", "set", "eth0", "up")
	l.run("ip", "-n", l.ns, "link", "set", "peer0", "up")

	// Install: the two commands of the README.
	l.run("apt-get", "install", "-y", "--no-install-recommends", old)
	if got := l.run("dpkg-query", "-W", "-f", "${Status} ${Version}", "teapot-lb"); got != "install ok installed 0.1.0-1" {
		t.Fatalf("dpkg-query: %q", got)
	}
	pw := l.run("getent", "passwd", "teapot-lb")
	if f := strings.Split(pw, ":"); len(f) != 7 || f[5] != "/var/lib/teapot-lb" || f[6] != "/usr/sbin/nologin" {
		t.Errorf("system user: %q, want home /var/lib/teapot-lb and shell /usr/sbin/nologin", pw)
	} else if uid := 0; func() bool { _, err := fmt.Sscan(f[2], &uid); return err != nil || uid >= 1000 }() {
		t.Errorf("teapot-lb uid %s is not a system uid", f[2])
	}
	l.run("getent", "group", "teapot-lb")
	status := l.run("dpkg", "--status", "teapot-lb")
	if !regexp.MustCompile(`(?m)^Conffiles:\n /etc/teapot-lb/serve\.yaml [0-9a-f]{32}$`).MatchString(status) {
		t.Errorf("dpkg --status does not list serve.yaml as the conffile:\n%s", status)
	}
	unitPath := "/lib/systemd/system/teapot-lb.service"
	for _, f := range []string{"/usr/bin/teapot-lb", unitPath, "/etc/teapot-lb/serve.yaml",
		"/usr/share/man/man1/teapot-lb-serve.1.gz", "/usr/share/bash-completion/completions/teapot-lb",
		"/etc/systemd/system/multi-user.target.wants/teapot-lb.service"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The operator's edit of the conffile: the VIP interface.
	conf := "/etc/teapot-lb/serve.yaml"
	accessLog := "/var/log/teapot-lb/access.log"
	edited := readFile(t, conf) + "\n# edited by the operator\nvip-interface: eth0\nnode-id: lb-install\naccess-log: " + accessLog + "\n"
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	l.startUnit(unitPath)
	clusterID := l.waitServing()
	if fi, err := os.Stat(accessLog); err != nil || fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("access log in the unit's LogsDirectory: %v %v", fi, err)
	}
	l.cli("apply", "-f", l.write("lab.yaml", installManifest))
	l.waitVIP()
	l.stopUnit()

	// Upgrade: state and the conffile edit stay.
	newer := hostDeb(t, "v0.2.0")
	l.run("apt-get", "install", "-y", "--no-install-recommends", newer)
	if got := l.run("dpkg-query", "-W", "-f", "${Status} ${Version}", "teapot-lb"); got != "install ok installed 0.2.0-1" {
		t.Fatalf("after upgrade dpkg-query: %q", got)
	}
	if got := readFile(t, conf); got != edited {
		t.Fatalf("the upgrade changed the edited conffile:\n%s", got)
	}
	if v := l.run("/usr/bin/teapot-lb", "version"); !strings.Contains(v, "0.2.0") {
		t.Errorf("installed version after upgrade: %q", v)
	}
	l.startUnit(unitPath)
	if id := l.waitServing(); id != clusterID {
		t.Errorf("cluster id after upgrade %q, before %q: the state was not kept", id, clusterID)
	}
	if out := l.cli("get", "lb", "-o", "json"); !strings.Contains(out, `"shop"`) {
		t.Errorf("load balancer shop missing after upgrade:\n%s", out)
	}
	l.waitVIP()
	l.stopUnit()

	// Purge: files, state, user and group go.
	// Purge quietly: no warning from deluser about cron.
	if out := l.run("apt-get", "purge", "-y", "teapot-lb"); strings.Contains(out, "crontab") || strings.Contains(out, "deluser:") {
		t.Errorf("purge warns:\n%s", out)
	}
	if out, _ := exec.Command("dpkg-query", "-W", "-f", "${Status}", "teapot-lb").Output(); strings.Contains(string(out), "installed") {
		t.Errorf("after purge dpkg-query: %q", out)
	}
	for _, f := range []string{"/usr/bin/teapot-lb", unitPath, "/etc/teapot-lb", "/var/lib/teapot-lb", "/var/log/teapot-lb",
		"/etc/systemd/system/multi-user.target.wants/teapot-lb.service"} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("after purge %s still exists", f)
		}
	}
	for _, db := range []string{"passwd", "group"} {
		if err := exec.Command("getent", db, "teapot-lb").Run(); err == nil {
			t.Errorf("after purge the %s entry teapot-lb still exists", db)
		}
	}
	t.Logf("install, serve, upgrade, serve, purge: %s in all", time.Since(start).Round(time.Second))
}

// hostDeb returns the amd64 deb of version (hostDebVersions: 0.1.0 or
// 0.2.0) that TestHostPackageInstall and TestHostUnderSystemd install, or
// fails tb. The debs are built once for the package's run
// (startHostDebs), 0.1.0 first: the two scenarios run side by side, and
// each installs 0.1.0 and works with it before it upgrades, while 0.2.0
// is built.
func hostDeb(tb testing.TB, version string) string {
	tb.Helper()
	began := time.Now()
	path, took, err := waitHostDeb(version)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("the deb of %s ready after %s (its build took %s)", version,
		time.Since(began).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	return path
}

// hostDebVersions are the versions of the debs, in the order they are
// built.
var hostDebVersions = []string{"v0.1.0", "v0.2.0"}

// sharedDebs holds the debs hostDeb returns. dir is made on the first
// call of hostDebFolder, before the build, so that TestHostUnderSystemd
// can bind it into its container while the debs are built.
var sharedDebs struct {
	dirOnce sync.Once
	dir     string
	dirErr  error

	once  sync.Once
	build sync.Once
	built map[string]*builtDeb
}

// builtDeb is one version's deb: done closes once path or err is set.
type builtDeb struct {
	done chan struct{}
	path string
	took time.Duration
	err  error
}

// hostDebFolder returns the folder the debs are built into (nothing
// else): a fresh folder under binary.dir for this process, so a later run
// of the package sharing binary.dir ($TEAPOT_SCENARIO_BINARY_DIR) builds
// its own and never installs debs of an earlier source tree or a build
// cut short. Its mode is 0755 and the debs' 0644, so that apt-get reads
// them as its unprivileged user and says nothing about it.
func hostDebFolder() (string, error) {
	sharedDebs.dirOnce.Do(func() {
		parent, err := os.MkdirTemp(binary.dir, "host-debs-")
		if err == nil {
			err = os.Chmod(parent, 0o755)
		}
		if err != nil {
			sharedDebs.dirErr = fmt.Errorf("host debs: %w", err)
			return
		}
		sharedDebs.dir = filepath.Join(parent, "debs")
		if err := os.Mkdir(sharedDebs.dir, 0o755); err != nil {
			sharedDebs.dirErr = fmt.Errorf("host debs: %w", err)
		}
	})
	return sharedDebs.dir, sharedDebs.dirErr
}

// startHostDebs starts, on its first call, the build of the amd64 debs of
// hostDebVersions (buildHostDebs) on a goroutine of its own. Later calls
// do nothing.
func startHostDebs() {
	initHostDebs()
	go buildHostDebs()
}

// initHostDebs makes the debs' records, once.
func initHostDebs() {
	sharedDebs.once.Do(func() {
		sharedDebs.built = map[string]*builtDeb{}
		for _, v := range hostDebVersions {
			sharedDebs.built[v] = &builtDeb{done: make(chan struct{})}
		}
	})
}

// buildHostDebs builds, on its first call, the amd64 debs of
// hostDebVersions as make package does (make dist-bin, then teapot-pkg;
// the cross-build of arm64 and the rpm are left out), one version after
// the other, each from its own build so that the binary of 0.2.0 says
// 0.2.0, into hostDebFolder. Later calls wait for the first one's end.
func buildHostDebs() {
	initHostDebs()
	sharedDebs.build.Do(func() {
		var failed error
		for _, v := range hostDebVersions {
			d := sharedDebs.built[v]
			if failed != nil {
				d.err = fmt.Errorf("the deb of %s is not built: the build of an earlier version failed", v)
			} else {
				began := time.Now()
				d.path, d.err = buildDeb(v)
				d.took, failed = time.Since(began), d.err
			}
			close(d.done)
		}
	})
}

// waitHostDeb starts the build (startHostDebs) and waits for the deb of
// version.
func waitHostDeb(version string) (path string, took time.Duration, err error) {
	startHostDebs()
	d, ok := sharedDebs.built[version]
	if !ok {
		return "", 0, fmt.Errorf("no deb of %s is built (%v)", version, hostDebVersions)
	}
	<-d.done
	return d.path, d.took, d.err
}

// buildDeb builds the deb of one version into hostDebFolder.
func buildDeb(version string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	debs, err := hostDebFolder()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env := append(os.Environ(), "CGO_ENABLED=0")
	if os.Getenv("SOURCE_DATE_EPOCH") == "" {
		env = append(env, "SOURCE_DATE_EPOCH=1700000000")
	}
	// dist-bin and teapot-pkg work in a dist folder of the version's own
	// beside debs, which holds only the debs.
	dist := filepath.Join(filepath.Dir(debs), version)
	for _, args := range [][]string{
		{"nice", "-n", "10", "make", "--no-print-directory", "dist-bin", "ARCHES=amd64", "DIST=" + dist, "VERSION=" + version},
		{"nice", "-n", "10", "go", "run", "./packaging/cmd/teapot-pkg", "package", "--arch", "amd64", "--format", "deb",
			"--version", version, "--revision", "test", "--dist", dist},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = root, env, 10*time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	// --format deb builds no rpm: each one of the binary costs as much
	// compression as the deb.
	if rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm")); len(rpms) > 0 {
		return "", fmt.Errorf("teapot-pkg package --format deb built %v", rpms)
	}
	name := fmt.Sprintf("teapot-lb_%s-1_amd64.deb", strings.TrimPrefix(version, "v"))
	deb := filepath.Join(debs, name)
	if err := os.Rename(filepath.Join(dist, name), deb); err != nil {
		return "", err
	}
	if err := os.Chmod(deb, 0o644); err != nil {
		return "", err
	}
	return deb, nil
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// run runs a command as root in the test's own network namespace (the
// machine's) and returns its trimmed output.
func (l *installLab) run(name string, args ...string) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (l *installLab) write(name, content string) string {
	p := filepath.Join(l.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// cli runs the installed CLI as root inside the namespace, from a folder
// and a home without admin configs, so it finds the host's admin.conf.
func (l *installLab) cli(args ...string) string {
	l.t.Helper()
	out, err := l.cliErr(args...)
	if err != nil {
		l.t.Fatalf("teapot-lb %v: %v\n%s\nserve log:\n%s", args, err, out, tail(l.log, 30))
	}
	return out
}

func (l *installLab) cliErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.ns, "/usr/bin/teapot-lb"}, args...)...)
	home := filepath.Join(l.dir, "home")
	_ = os.MkdirAll(home, 0o700)
	cmd.Dir = home
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startUnit runs the unit's ExecStart as systemd would: the StateDirectory
// and LogsDirectory created for the unit's user, the WorkingDirectory, umask 0077, the user
// and group, no new privileges and only the ambient capabilities of the
// unit, which are also the bounding set.
func (l *installLab) startUnit(unitPath string) {
	l.t.Helper()
	unit := readFile(l.t, unitPath)
	key := func(k string) string {
		m := regexp.MustCompile(`(?m)^` + k + `=(.*)$`).FindStringSubmatch(unit)
		if m == nil {
			l.t.Fatalf("%s has no %s=", unitPath, k)
		}
		return strings.TrimSpace(m[1])
	}
	user, group, state, logs := key("User"), key("Group"), key("StateDirectory"), key("LogsDirectory")
	var caps []string
	for _, c := range strings.Fields(key("AmbientCapabilities")) {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	set := "-all," + strings.Join(caps, ",")
	stateDir := filepath.Join("/var/lib", state)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		l.t.Fatal(err)
	}
	l.run("chown", user+":"+group, stateDir)
	l.run("chmod", key("StateDirectoryMode"), stateDir)
	logsDir := filepath.Join("/var/log", logs)
	if err := os.MkdirAll(logsDir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	l.run("chown", user+":"+group, logsDir)
	l.run("chmod", key("LogsDirectoryMode"), logsDir)

	args := []string{"netns", "exec", l.ns, "sh", "-c", `umask 0077; exec "$@"`, "sh",
		"setpriv", "--reuid", user, "--regid", group, "--init-groups", "--no-new-privs",
		"--inh-caps", set, "--ambient-caps", set, "--bounding-set", set, "--"}
	args = append(args, strings.Fields(key("ExecStart"))...)
	l.log = filepath.Join(l.dir, fmt.Sprintf("serve-%d.log", time.Now().UnixNano()))
	logf, err := os.Create(l.log)
	if err != nil {
		l.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", args...)
	cmd.Dir = key("WorkingDirectory")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + stateDir, "USER=" + user, "LOGNAME=" + user, "SHELL=/usr/sbin/nologin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.serve, l.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(l.done)
}

// waitServing waits for cluster status from the installed CLI and returns
// the cluster id.
func (l *installLab) waitServing() string {
	l.t.Helper()
	var id string
	waitFor(l.t, 90*time.Second, "cluster status from the installed CLI", func() error {
		select {
		case <-l.done:
			return errStop(fmt.Errorf("serve exited:\n%s", tail(l.log, 30)))
		default:
		}
		out, err := l.cliErr("cluster", "status", "-o", "json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		var st map[string]any
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		for _, k := range []string{"clusterId", "cluster_id"} {
			if s, _ := st[k].(string); s != "" {
				id = s
				return nil
			}
		}
		return fmt.Errorf("no cluster id in %s", out)
	})
	return id
}

// waitVIP waits for the load balancer's VIP on the namespace's interface
// and its listener on port 80 (CAP_NET_ADMIN and CAP_NET_BIND_SERVICE).
func (l *installLab) waitVIP() {
	l.t.Helper()
	waitFor(l.t, 60*time.Second, "VIP 192.0.2.200 on eth0 with a listener on port 80", func() error {
		addrs, err := exec.Command("ip", "-n", l.ns, "-o", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(addrs), " 192.0.2.200/") {
			return fmt.Errorf("ip -n %s addr: %v %s\nserve log:\n%s", l.ns, err, addrs, tail(l.log, 10))
		}
		ss, err := exec.Command("ip", "netns", "exec", l.ns, "ss", "-Hltn", "src", "192.0.2.200:80").CombinedOutput()
		if err != nil || !strings.Contains(string(ss), "192.0.2.200:80") {
			return fmt.Errorf("no listener on 192.0.2.200:80: %v %s\nserve log:\n%s", err, ss, tail(l.log, 10))
		}
		return nil
	})
}

// stopUnit stops serve as systemctl stop would (SIGTERM, then SIGKILL).
func (l *installLab) stopUnit() {
	if l.serve == nil {
		return
	}
	_ = syscall.Kill(-l.serve.Process.Pid, syscall.SIGTERM)
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-l.serve.Process.Pid, syscall.SIGKILL)
		<-l.done
	}
	l.serve = nil
}

// cleanup undoes everything the test did to the machine.
func (l *installLab) cleanup() {
	l.stopUnit()
	if out, _ := exec.Command("dpkg-query", "-W", "-f", "${Status}", "teapot-lb").Output(); len(out) > 0 && !strings.Contains(string(out), "not-installed") {
		if out, err := exec.Command("dpkg", "--purge", "teapot-lb").CombinedOutput(); err != nil {
			l.t.Errorf("cleanup: dpkg --purge: %v\n%s", err, out)
		}
	}
	for _, p := range []string{"/etc/teapot-lb", "/var/lib/teapot-lb", "/var/log/teapot-lb",
		"/etc/systemd/system/multi-user.target.wants/teapot-lb.service",
		"/var/lib/systemd/deb-systemd-helper-enabled/teapot-lb.service.dsh-also",
		"/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/teapot-lb.service",
		"/var/lib/systemd/deb-systemd-helper-masked/teapot-lb.service"} {
		_ = os.RemoveAll(p)
	}
	if exec.Command("getent", "passwd", "teapot-lb").Run() == nil {
		_ = exec.Command("userdel", "teapot-lb").Run()
	}
	if exec.Command("getent", "group", "teapot-lb").Run() == nil {
		_ = exec.Command("groupdel", "teapot-lb").Run()
	}
	_ = exec.Command("ip", "netns", "del", l.ns).Run()
}
