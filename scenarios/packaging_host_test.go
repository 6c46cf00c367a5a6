package scenarios

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostPackagesVersion is the version of TestHostPackages' packages.
const hostPackagesVersion = "v0.1.0"

// TestHostPackages builds the deb and rpm with make package and checks
// them with the distribution's tools: lintian reports no error on the deb,
// rpm -qp lists the files, the conffile and the scripts, and
// systemd-analyze verify accepts the unit with the packaged binary.
func TestHostPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-builds two binaries")
	}
	for _, tool := range []string{"lintian", "rpm", "dpkg-deb", "systemd-analyze"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not installed (Debian packages lintian, rpm, dpkg, systemd)", tool)
		}
	}
	parallelScenarioTaking(t, 75*time.Second)
	dist := needMadeDist(t, &madePackages, "package", "VERSION="+hostPackagesVersion)
	deb := filepath.Join(dist, "teapot-lb_0.1.0-1_amd64.deb")
	rpmFile := filepath.Join(dist, "teapot-lb-0.1.0-1.x86_64.rpm")
	for _, f := range []string{deb, rpmFile, filepath.Join(dist, "teapot-lb_0.1.0-1_arm64.deb"), filepath.Join(dist, "teapot-lb-0.1.0-1.aarch64.rpm")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("make package did not write %s", filepath.Base(f))
		}
	}
	tool := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil && name != "lintian" {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}

	out := tool("lintian", "--tag-display-limit", "0", deb)
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "E: ") {
			t.Errorf("lintian: %s", l)
		}
	}
	t.Logf("lintian:\n%s", out)
	if got := tool("dpkg-deb", "-f", deb, "Version"); strings.TrimSpace(got) != "0.1.0-1" {
		t.Errorf("deb version %q, want 0.1.0-1", got)
	}

	files := tool("rpm", "-qpl", rpmFile)
	for _, want := range []string{"/usr/bin/teapot-lb", "/usr/lib/systemd/system/teapot-lb.service", "/etc/teapot-lb/serve.yaml",
		"/usr/share/bash-completion/completions/teapot-lb", "/usr/share/zsh/vendor-completions/_teapot-lb",
		"/usr/share/fish/vendor_completions.d/teapot-lb.fish", "/usr/share/man/man1/teapot-lb-serve.1.gz",
		"/usr/share/teapot-lb/grafana/teapot-lb.json", "/usr/share/teapot-lb/prometheus/teapot-lb.rules.yml",
		"/usr/share/teapot-lb/prometheus/teapot-lb.rules.test.yml"} {
		if !strings.Contains(files, want+"\n") {
			t.Errorf("rpm -qpl lacks %s:\n%s", want, files)
		}
	}
	if conf := tool("rpm", "-qpc", rpmFile); strings.TrimSpace(conf) != "/etc/teapot-lb/serve.yaml" {
		t.Errorf("rpm -qpc: %q, want the serve.yaml conffile", conf)
	}
	scripts := tool("rpm", "-qp", "--scripts", rpmFile)
	for _, want := range []string{"preinstall scriptlet", "useradd -r -g teapot-lb", "postinstall scriptlet", "preset teapot-lb.service",
		"preuninstall scriptlet", "disable --now teapot-lb.service", "postuninstall scriptlet", "try-restart teapot-lb.service"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("rpm scripts lack %q:\n%s", want, scripts)
		}
	}

	// The unit as installed, pointing at the extracted binary.
	root := t.TempDir()
	tool("dpkg-deb", "-x", deb, root)
	if conf := tool("dpkg-deb", "-f", deb, "Depends"); !strings.Contains(conf, "adduser") {
		t.Errorf("deb Depends %q", conf)
	}
	// The monitoring files, as in the source tree.
	for src, dst := range map[string]string{
		"packaging/grafana/teapot-lb.json":              "usr/share/teapot-lb/grafana/teapot-lb.json",
		"packaging/prometheus/teapot-lb.rules.yml":      "usr/share/teapot-lb/prometheus/teapot-lb.rules.yml",
		"packaging/prometheus/teapot-lb.rules.test.yml": "usr/share/teapot-lb/prometheus/teapot-lb.rules.test.yml",
	} {
		want, err := os.ReadFile(filepath.Join("..", src))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(root, dst)); err != nil || string(got) != string(want) {
			t.Errorf("the deb's /%s is not %s (%v)", dst, src, err)
		}
	}
	unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/teapot-lb.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "User=teapot-lb", "StateDirectory=teapot-lb",
		"AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE CAP_BPF\n", "CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE CAP_BPF\n",
		"ProtectSystem=strict", "NoNewPrivileges=yes", "Restart=on-failure", "LimitNOFILE=",
		"LimitRTPRIO=10\n", "RestrictRealtime=no\n",
		// listen-sockets: tenant, access-log in /var/log/teapot-lb, a
		// start limit, no restart on a refused configuration.
		"SystemCallFilter=@system-service bpf\n", "LogsDirectory=teapot-lb\n", "StartLimitBurst=", "StartLimitIntervalSec=",
		"RestartPreventExitStatus=78\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	local := filepath.Join(t.TempDir(), "teapot-lb.service")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(unit), "/usr/bin/teapot-lb", filepath.Join(root, "usr/bin/teapot-lb"))), 0o644); err != nil {
		t.Fatal(err)
	}
	tool("systemd-analyze", "verify", "--man=no", local)
	// The packaged binary serves the config file the package installs.
	help := tool(filepath.Join(root, "usr/bin/teapot-lb"), "serve", "--help")
	if !strings.Contains(help, "serve configuration file") {
		t.Errorf("serve --help does not document --config:\n%s", help)
	}
}
