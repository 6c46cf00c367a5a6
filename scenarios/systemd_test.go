package scenarios

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unitCaps is CapEff, CapAmb and CapBnd of the unit's process:
// CAP_NET_BIND_SERVICE (10), CAP_NET_ADMIN (12), CAP_NET_RAW (13) and
// CAP_BPF (39), what AmbientCapabilities= and CapabilityBoundingSet= grant.
const unitCaps = 1<<10 | 1<<12 | 1<<13 | 1<<39

// maxExposure is the "Overall exposure level" systemd-analyze security
// (systemd 252) gives the unit as shipped: hardening may lower it, never
// raise it.
const maxExposure = 2.1

// unitManifest is an arp pool on the container's eth0, a tenant whose
// backend listens on the container's lo, and one HTTP load balancer on
// port 80 of a VIP, with access logs.
const unitManifest = installManifest + "accessLog: { enabled: true }\n"

// unitConf is the operator's edit of /etc/teapot-lb/serve.yaml: the VIP
// interface, the sk_lookup listeners (bpf(2) and CAP_BPF), the access log
// in the unit's LogsDirectory and a short drain.
const unitConf = `
# edited by the operator
vip-interface: eth0
listen-sockets: tenant
access-log: /var/log/teapot-lb/access.log
drain-timeout: 2s
`

// TestHostUnderSystemd boots a Debian 12 root with systemd as PID 1
// (systemd-nspawn), installs the amd64 deb with apt-get and checks the
// packaged host as an operator meets it: Type=notify, READY=1 only once
// admin.conf exists and the CLI answers, the watchdog, the capabilities,
// listen-sockets: tenant under the unit's syscall filter, the access log
// in /var/log/teapot-lb, an arp VIP and a listener on :80, restart, a
// drain on stop, a reboot, an upgrade keeping the conffile edit and the
// state, remove, purge, and the unit's systemd-analyze security exposure.
func TestHostUnderSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: boots a Debian root under systemd-nspawn")
	}
	if os.Geteuid() != 0 {
		unavailable(t, "booting a container needs root")
	}
	for _, tool := range []string{"debootstrap", "systemd-nspawn", "nsenter", "mount", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not installed (Debian packages debootstrap, systemd-container, util-linux, make)", tool)
		}
	}
	parallelScenarioTaking(t, 120*time.Second)
	start := time.Now()
	// The debs are built (once for the package: startHostDebs) while the
	// container boots, 0.1.0 first; 0.2.0 is built while the test works
	// with 0.1.0. Their folder is bound into the container at /mnt/debs.
	debs, err := hostDebFolder()
	if err != nil {
		t.Fatal(err)
	}
	startHostDebs()
	b := newBox(t, debs)
	u := &unitLab{t: t, b: b, last: start}
	u.step("the container booted")
	hostDeb(t, "v0.1.0")
	u.step("the deb of 0.1.0 built")

	// Install: apt-get starts the unit, Type=notify.
	out := b.must("apt-get", "install", "-y", "--no-install-recommends", "/mnt/debs/teapot-lb_0.1.0-1_amd64.deb")
	u.noWarnings("apt-get install", out)
	if got := b.must("dpkg-query", "-W", "-f", "${Status} ${Version}", "teapot-lb"); got != "install ok installed 0.1.0-1" {
		t.Fatalf("dpkg-query after install: %q", got)
	}
	if p := u.props(); p["Type"] != "notify" || p["ActiveState"] != "active" || p["SubState"] != "running" {
		t.Fatalf("after apt-get install the unit is Type=%s %s/%s, want notify active/running\n%s",
			p["Type"], p["ActiveState"], p["SubState"], u.journal(30))
	}
	u.checkEnabled()
	u.step("apt-get install of 0.1.0")

	// READY=1 only once admin.conf is written and the CLI answers: five
	// fresh bootstraps, each checked the moment systemctl start returns.
	for i := range 5 {
		// reset-failed: five starts in a row are what a start limit is
		// there to stop.
		if out, err := b.sh(`systemctl stop teapot-lb
systemctl reset-failed teapot-lb
rm -rf /var/lib/teapot-lb
systemctl start teapot-lb
if [ ! -s /var/lib/teapot-lb/admin.conf ]; then echo "admin.conf missing when systemctl start returned"; exit 3; fi
teapot-lb cluster status`); err != nil {
			t.Fatalf("fresh start %d: READY=1 came before the host could be used: %v\n%s\n%s", i+1, err, out, u.journal(20))
		}
	}

	u.step("five fresh starts")

	// Only the unit's capabilities.
	u.checkCaps()

	// systemd-analyze security: printed, kept at or below today's.
	u.checkExposure()
	u.step("capabilities and systemd-analyze security")

	// The operator's configuration: VIP on eth0, sk_lookup listeners, the
	// access log in /var/log/teapot-lb. The watchdog's shorter timeout
	// (shortWatchdog) starts with it, so that the work below is the time
	// the process spends unfrozen before checkWatchdog freezes it.
	conf := b.read("etc/teapot-lb/serve.yaml") + unitConf
	b.write("etc/teapot-lb/serve.yaml", conf, 0o644)
	u.shortWatchdog()
	u.restart()
	unfrozen, p := time.Now(), u.props()
	if p["WatchdogUSec"] != "6s" {
		t.Fatalf("WatchdogUSec is %q after the drop-in, want 6s", p["WatchdogUSec"])
	}
	clusterID := u.clusterID()
	b.write("root/lab.yaml", unitManifest, 0o644)
	b.must("teapot-lb", "apply", "-f", "/root/lab.yaml")
	u.backend()
	u.waitVIP()
	u.get("through the VIP with listen-sockets: tenant")
	u.checkAccessLog()
	u.checkNoRestarts("listen-sockets: tenant and the access log")
	u.step("the operator's configuration served")

	// The watchdog restarts a frozen process.
	u.checkWatchdog(unfrozen, p)
	u.waitVIP()
	u.get("after the watchdog's restart")
	u.step("the watchdog")

	// Stop with a connection open: it is answered or closed cleanly.
	u.checkDrainOnStop()
	b.must("systemctl", "start", "teapot-lb")
	u.waitVIP()
	u.get("after the stop and start")
	u.step("the drain on stop")

	// A refused bpf(2) names the syscall filter, and a host that keeps
	// failing ends in the failed state.
	u.checkBPFDenied()
	u.step("bpf(2) denied")

	// Reboot: the unit starts at boot with its state.
	b.reboot()
	u.backend()
	u.waitActive("after the reboot")
	if id := u.clusterID(); id != clusterID {
		t.Errorf("cluster id after the reboot %q, before %q: the state was not kept", id, clusterID)
	}
	u.waitVIP()
	u.get("after the reboot")
	u.step("the reboot")

	// Upgrade: the conffile edit and the state stay.
	hostDeb(t, "v0.2.0")
	u.step("the deb of 0.2.0 built")
	out = b.must("apt-get", "install", "-y", "--no-install-recommends", "/mnt/debs/teapot-lb_0.2.0-1_amd64.deb")
	u.noWarnings("apt-get install of the upgrade", out)
	if got := b.must("dpkg-query", "-W", "-f", "${Status} ${Version}", "teapot-lb"); got != "install ok installed 0.2.0-1" {
		t.Fatalf("dpkg-query after the upgrade: %q", got)
	}
	if got := b.read("etc/teapot-lb/serve.yaml"); got != conf {
		t.Errorf("the upgrade changed the edited conffile:\n%s", got)
	}
	u.waitActive("after the upgrade")
	if id := u.clusterID(); id != clusterID {
		t.Errorf("cluster id after the upgrade %q, before %q: the state was not kept", id, clusterID)
	}
	if out := b.must("teapot-lb", "get", "lb", "-o", "json"); !strings.Contains(out, `"shop"`) {
		t.Errorf("load balancer shop missing after the upgrade:\n%s", out)
	}
	u.waitVIP()
	u.get("after the upgrade")
	u.step("the upgrade")

	// Remove keeps the state and the configuration; purge removes them,
	// the logs and the user, without a warning.
	out = b.must("apt-get", "remove", "-y", "teapot-lb")
	u.noWarnings("apt-get remove", out)
	if p := u.props(); p["ActiveState"] != "inactive" && p["LoadState"] != "not-found" {
		t.Errorf("after apt-get remove the unit is %s (%s)", p["ActiveState"], p["LoadState"])
	}
	for _, f := range []string{"var/lib/teapot-lb/admin.conf", "etc/teapot-lb/serve.yaml"} {
		if !b.exists(f) {
			t.Errorf("apt-get remove deleted /%s", f)
		}
	}
	out = b.must("apt-get", "purge", "-y", "teapot-lb")
	u.noWarnings("apt-get purge", out)
	for _, f := range []string{"usr/bin/teapot-lb", "lib/systemd/system/teapot-lb.service", "etc/teapot-lb",
		"var/lib/teapot-lb", "var/log/teapot-lb", "etc/systemd/system/multi-user.target.wants/teapot-lb.service"} {
		if b.exists(f) {
			t.Errorf("after apt-get purge /%s still exists", f)
		}
	}
	for _, db := range []string{"passwd", "group"} {
		if out, err := b.exec("getent", db, "teapot-lb"); err == nil {
			t.Errorf("after apt-get purge the %s entry is still there: %s", db, out)
		}
	}
	u.step("remove and purge")
	t.Logf("TestHostUnderSystemd: %s in all", time.Since(start).Round(time.Second))
}

// unitLab drives teapot-lb.service inside the container.
type unitLab struct {
	t    *testing.T
	b    *box
	ln   net.Listener // the backend, in the container's network namespace
	last time.Time    // when the last step ended
}

// step logs how long the step that ends now took.
func (u *unitLab) step(what string) {
	u.t.Helper()
	now := time.Now()
	u.t.Logf("step: %s in %s", what, now.Sub(u.last).Round(100*time.Millisecond))
	u.last = now
}

// props returns properties of the unit.
func (u *unitLab) props() map[string]string {
	out, _ := u.b.exec("systemctl", "show", "teapot-lb.service", "-p",
		"Type,ActiveState,SubState,LoadState,Result,MainPID,NRestarts,ExecMainStatus,UnitFileState,WatchdogUSec")
	p := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			p[k] = v
		}
	}
	return p
}

// journal returns the unit's last n journal lines.
func (u *unitLab) journal(n int) string {
	out, _ := u.b.exec("journalctl", "-u", "teapot-lb.service", "-n", strconv.Itoa(n), "--no-pager", "-o", "cat")
	return "journal of teapot-lb.service:\n" + out
}

// complaint matches a line of apt-get's output that warns: apt's own
// (W:, E:) and a tool of the maintainer scripts prefixing its name, such as
// deluser's "deluser: `/usr/bin/crontab' not executed".
var complaint = regexp.MustCompile(`(?i)warn|error|^[WE]: |^(deluser|delgroup|userdel|groupdel|adduser|addgroup|useradd|groupadd|systemctl|deb-systemd-helper|deb-systemd-invoke|rm|rmdir|dpkg): `)

func (u *unitLab) noWarnings(what, out string) {
	u.t.Helper()
	for line := range strings.Lines(out) {
		if complaint.MatchString(line) {
			u.t.Errorf("%s printed a warning: %s(all output:\n%s)", what, line, out)
		}
	}
}

func (u *unitLab) checkEnabled() {
	u.t.Helper()
	if p := u.props(); p["UnitFileState"] != "enabled" {
		u.t.Errorf("after apt-get install the unit is %q, want enabled", p["UnitFileState"])
	}
}

// restart restarts the unit and fails when it is not active after.
func (u *unitLab) restart() {
	u.t.Helper()
	if out, err := u.b.exec("systemctl", "restart", "teapot-lb"); err != nil {
		u.t.Fatalf("systemctl restart teapot-lb: %v %s\n%s", err, out, u.journal(30))
	}
	u.waitActive("after systemctl restart")
}

func (u *unitLab) waitActive(what string) {
	u.t.Helper()
	waitFor(u.t, 90*time.Second, "teapot-lb.service active "+what, func() error {
		p := u.props()
		if p["ActiveState"] == "active" && p["SubState"] == "running" {
			return nil
		}
		if p["ActiveState"] == "failed" {
			return errStop(fmt.Errorf("the unit failed (%s)\n%s", p["Result"], u.journal(30)))
		}
		return fmt.Errorf("the unit is %s/%s\n%s", p["ActiveState"], p["SubState"], u.journal(10))
	})
}

// clusterID asks the installed CLI for the cluster's id.
func (u *unitLab) clusterID() string {
	u.t.Helper()
	out := u.b.must("teapot-lb", "cluster", "status", "-o", "json")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		u.t.Fatalf("cluster status -o json: %v\n%s", err, out)
	}
	for _, k := range []string{"clusterId", "cluster_id"} {
		if s, _ := st[k].(string); s != "" {
			return s
		}
	}
	u.t.Fatalf("no cluster id in %s", out)
	return ""
}

// backend serves HTTP on 192.0.2.50:8080 inside the container (opened
// again after a reboot, which makes a new network namespace).
func (u *unitLab) backend() {
	u.t.Helper()
	if u.ln != nil {
		_ = u.ln.Close()
	}
	var ln net.Listener
	err := u.b.inNet(func() (err error) {
		ln, err = net.Listen("tcp", "192.0.2.50:8080")
		return err
	})
	if err != nil {
		u.t.Fatalf("the backend in the container: %v", err)
	}
	u.ln = ln
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "from the backend\n")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	u.t.Cleanup(func() { _ = srv.Close() })
}

// waitVIP waits for the VIP on the container's eth0 and a connection to
// its port 80.
func (u *unitLab) waitVIP() {
	u.t.Helper()
	waitFor(u.t, 60*time.Second, "VIP 192.0.2.200 on the container's eth0 with a listener on :80", func() error {
		addrs, err := u.b.exec("ip", "-o", "addr", "show", "dev", "eth0")
		if err != nil || !strings.Contains(addrs, " 192.0.2.200/") {
			return fmt.Errorf("ip addr show dev eth0: %v %s\n%s", err, addrs, u.journal(10))
		}
		c, err := u.b.dial("192.0.2.200:80")
		if err != nil {
			return fmt.Errorf("connect to 192.0.2.200:80: %w\n%s", err, u.journal(10))
		}
		return c.Close()
	})
}

// get sends one request through the VIP and checks the backend answered.
func (u *unitLab) get(what string) {
	u.t.Helper()
	var body string
	waitFor(u.t, 30*time.Second, "an answer of the backend through 192.0.2.200:80 "+what, func() error {
		c, err := u.b.dial("192.0.2.200:80")
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		if resp.StatusCode != 200 || body != "from the backend\n" {
			return fmt.Errorf("%s %q", resp.Status, body)
		}
		return nil
	})
}

// checkCaps reads the capability sets of the unit's process.
func (u *unitLab) checkCaps() {
	u.t.Helper()
	pid := u.props()["MainPID"]
	st := u.b.must("cat", "/proc/"+pid+"/status")
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		m := regexp.MustCompile(`(?m)^` + set + `:\s+([0-9a-f]+)$`).FindStringSubmatch(st)
		if m == nil {
			u.t.Errorf("no %s in /proc/%s/status", set, pid)
			continue
		}
		got, _ := strconv.ParseUint(m[1], 16, 64)
		if got != unitCaps {
			u.t.Errorf("%s of the unit's process is %016x, want %016x (CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE CAP_BPF)", set, got, uint64(unitCaps))
		}
	}
	if !strings.Contains(st, "NoNewPrivs:\t1") {
		u.t.Errorf("the unit's process may gain privileges (NoNewPrivs is not 1)")
	}
	if m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindStringSubmatch(st); m == nil || m[1] == "0" {
		u.t.Errorf("the unit's process runs as root: %v", m)
	}
}

// checkExposure prints systemd-analyze security's verdict on the unit and
// keeps it at or below maxExposure.
func (u *unitLab) checkExposure() {
	u.t.Helper()
	out, _ := u.b.exec("systemd-analyze", "security", "--no-pager", "teapot-lb.service")
	m := regexp.MustCompile(`Overall exposure level for teapot-lb\.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
	if m == nil {
		u.t.Errorf("systemd-analyze security teapot-lb.service gave no exposure level:\n%s", out)
		return
	}
	level, _ := strconv.ParseFloat(m[1], 64)
	u.t.Logf("systemd-analyze security teapot-lb.service: exposure %s %s (at most %.1f)", m[1], m[2], maxExposure)
	if level > maxExposure {
		u.t.Errorf("systemd-analyze security exposure of the unit is %s, above %.1f: the unit lost hardening\n%s", m[1], maxExposure, out)
	}
}

// checkNoRestarts fails when the unit restarted since it was started.
func (u *unitLab) checkNoRestarts(what string) {
	u.t.Helper()
	if p := u.props(); p["NRestarts"] != "0" || p["ActiveState"] != "active" {
		u.t.Errorf("with %s the unit restarted %s times (%s)\n%s", what, p["NRestarts"], p["ActiveState"], u.journal(30))
	}
}

// checkAccessLog waits for the access log line of a request in
// /var/log/teapot-lb/access.log.
func (u *unitLab) checkAccessLog() {
	u.t.Helper()
	waitFor(u.t, 30*time.Second, "a line in /var/log/teapot-lb/access.log", func() error {
		if s := u.b.read("var/log/teapot-lb/access.log"); strings.Contains(s, `"shop"`) || strings.Contains(s, "shop") {
			return nil
		}
		out, _ := u.b.exec("ls", "-la", "/var/log/teapot-lb")
		return fmt.Errorf("no line of load balancer shop; ls /var/log/teapot-lb: %s\n%s", out, u.journal(10))
	})
}

// watchdogDropIn shortens the unit's WatchdogSec (30s) to 6s so that
// checkWatchdog stays short; the process pings at half of what
// $WATCHDOG_USEC says.
const watchdogDropIn = "etc/systemd/system/teapot-lb.service.d/watchdog.conf"

// shortWatchdog installs watchdogDropIn, for the unit's next start.
func (u *unitLab) shortWatchdog() {
	u.t.Helper()
	u.b.write(watchdogDropIn, "[Service]\nWatchdogSec=6s\n", 0o644)
	u.b.must("systemctl", "daemon-reload")
}

// checkWatchdog checks that the process the unit started at unfrozen
// (with shortWatchdog, its properties then p) kept the watchdog fed for
// at least ten seconds, then freezes it and waits for systemd's watchdog
// to restart it, and removes the drop-in.
func (u *unitLab) checkWatchdog(unfrozen time.Time, p map[string]string) {
	u.t.Helper()
	b := u.b
	// Ten seconds unfrozen, more than the 6s timeout: the pings keep it
	// alive. The operator's configuration was served in that time.
	time.Sleep(time.Until(unfrozen.Add(10 * time.Second)))
	if q := u.props(); q["MainPID"] != p["MainPID"] || q["NRestarts"] != p["NRestarts"] {
		u.t.Fatalf("the unit restarted while its process was not frozen (pid %s -> %s, NRestarts %s -> %s in %s)\n%s",
			p["MainPID"], q["MainPID"], p["NRestarts"], q["NRestarts"], time.Since(unfrozen).Round(100*time.Millisecond), u.journal(30))
	}
	pid, _ := strconv.Atoi(p["MainPID"])
	before, _ := strconv.Atoi(p["NRestarts"])
	b.must("kill", "-STOP", strconv.Itoa(pid))
	frozen := time.Now()
	waitFor(u.t, 6*time.Second+2*time.Second+30*time.Second, "the watchdog to restart the frozen process", func() error {
		q := u.props()
		n, _ := strconv.Atoi(q["NRestarts"])
		if n > before && q["MainPID"] != p["MainPID"] && q["ActiveState"] == "active" {
			return nil
		}
		return fmt.Errorf("pid %s NRestarts %s %s/%s", q["MainPID"], q["NRestarts"], q["ActiveState"], q["SubState"])
	})
	u.t.Logf("the watchdog restarted the frozen process %s after %s", time.Since(frozen).Round(100*time.Millisecond), p["MainPID"])
	if j, _ := b.exec("journalctl", "-u", "teapot-lb.service", "--no-pager", "-o", "cat", "--since", "-2min"); !strings.Contains(j, "Watchdog timeout") {
		u.t.Errorf("the journal does not say the watchdog timed out:\n%s", tail2([]byte(j), 20))
	}
	_ = os.Remove(filepath.Join(b.root, watchdogDropIn))
	b.must("systemctl", "daemon-reload")
}

// checkDrainOnStop stops the unit with an idle keep-alive connection open
// through the VIP: the connection must end with a clean close (EOF), or
// an answer to a request, once drained, and the stop must succeed.
func (u *unitLab) checkDrainOnStop() {
	u.t.Helper()
	c, err := u.b.dial("192.0.2.200:80")
	if err != nil {
		u.t.Fatalf("connect to the VIP before the stop: %v", err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	request := func() (*http.Response, error) {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: shop\r\n\r\n"); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := request(); err != nil || resp.StatusCode != 200 {
		u.t.Fatalf("a request before the stop: %v %v", resp, err)
	}
	stopped := make(chan error, 1)
	start := time.Now()
	go func() {
		out, err := u.b.exec("systemctl", "stop", "teapot-lb")
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		stopped <- err
	}()
	// drain-timeout is 2s: the idle connection is closed (or answered
	// with Connection: close) well before 2 x 2s plus slack.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = br.ReadByte()
	switch {
	case errors.Is(err, io.EOF):
		u.t.Logf("the stop closed the idle connection cleanly after %s", time.Since(start).Round(time.Millisecond))
	case err == nil:
		u.t.Errorf("the idle connection got unasked bytes during the stop")
	case errors.Is(err, syscall.ECONNRESET):
		u.t.Errorf("the stop reset the idle connection after %s instead of closing it", time.Since(start).Round(time.Millisecond))
	default:
		u.t.Errorf("the idle connection was neither closed nor answered during the stop: %v", err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			u.t.Fatalf("systemctl stop: %v", err)
		}
	case <-time.After(2 * time.Minute):
		u.t.Fatalf("systemctl stop did not return within 2m")
	}
	p := u.props()
	u.t.Logf("systemctl stop took %s", time.Since(start).Round(time.Millisecond))
	if p["ActiveState"] != "inactive" || p["Result"] != "success" {
		u.t.Errorf("after the stop the unit is %s with result %s, want inactive and success\n%s", p["ActiveState"], p["Result"], u.journal(30))
	}
}

// checkBPFDenied takes bpf(2) out of the unit's syscall filter with a
// drop-in: listen-sockets: tenant must fail naming the filter (not
// the kernel or a capability), and the host, failing at every start, must
// end in the failed state (a start limit) instead of restarting forever.
func (u *unitLab) checkBPFDenied() {
	u.t.Helper()
	b := u.b
	dropin := "etc/systemd/system/teapot-lb.service.d/nobpf.conf"
	b.write(dropin, "[Service]\nSystemCallFilter=~bpf\n", 0o644)
	b.must("systemctl", "daemon-reload")
	_, _ = b.exec("systemctl", "reset-failed", "teapot-lb")
	since := b.must("date", "+%Y-%m-%d %H:%M:%S")
	b.must("systemctl", "restart", "--no-block", "teapot-lb")
	var restarts string
	waitFor(u.t, 90*time.Second, "teapot-lb.service failed with bpf(2) outside its syscall filter", func() error {
		p := u.props()
		restarts = p["NRestarts"]
		if p["ActiveState"] == "failed" {
			return nil
		}
		return fmt.Errorf("%s/%s after %s restarts (no start limit?)\n%s", p["ActiveState"], p["SubState"], p["NRestarts"], u.journal(5))
	})
	j, _ := b.exec("journalctl", "-u", "teapot-lb.service", "--no-pager", "-o", "cat", "--since", since)
	u.t.Logf("bpf(2) denied: the unit failed after %s restarts", restarts)
	if !strings.Contains(j, "SystemCallFilter") && !strings.Contains(strings.ToLower(j), "seccomp") {
		u.t.Errorf("with bpf(2) outside SystemCallFilter= the journal does not name the syscall filter (SystemCallFilter or seccomp):\n%s", tail2([]byte(j), 25))
	}
	_ = os.Remove(filepath.Join(b.root, dropin))
	b.must("systemctl", "daemon-reload")
	b.must("systemctl", "reset-failed", "teapot-lb")
	b.must("systemctl", "start", "teapot-lb")
	u.waitVIP()
	u.get("with bpf(2) allowed again")
}
