package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/packaging/serveconfig"
)

// unitFile is the systemd unit the packages install.
const unitFile = "packaging/host/teapot-lb.service"

// parseUnit reads a unit file as systemd does, for the settings used
// here: section.key to its values in order (a setting may repeat;
// continuation lines are not used).
func parseUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = strings.Trim(l, "[]")
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" || strings.HasSuffix(l, "\\") {
				t.Fatalf("%s:%d: %q is not a setting this parser reads", path, i+1, l)
			}
			out[section+"."+strings.TrimSpace(k)] = append(out[section+"."+strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// TestServeUnit checks what the unit must hold for the modes and keys
// serve accepts: bpf(2) allowed by the syscall filter (listen-sockets:
// tenant), a writable /var/log/teapot-lb under ProtectSystem=strict
// (access-log), a start limit that Restart= reaches, and no restart on
// a refused configuration.
func TestServeUnit(t *testing.T) {
	t.Parallel()
	u := parseUnit(t, unitFile)
	one := func(key string) string {
		t.Helper()
		v := u[key]
		if len(v) != 1 {
			t.Fatalf("%s: %s is set %d times, want once", unitFile, key, len(v))
		}
		return v[0]
	}
	// The allow-list is the union of the lines without ~; a ~ line denies.
	var allowed, denied []string
	for _, v := range u["Service.SystemCallFilter"] {
		if d, ok := strings.CutPrefix(v, "~"); ok {
			denied = append(denied, strings.Fields(d)...)
			continue
		}
		allowed = append(allowed, strings.Fields(v)...)
	}
	if !slices.Contains(allowed, "bpf") || slices.Contains(denied, "bpf") || slices.Contains(denied, "@system-service") {
		t.Errorf("SystemCallFilter allows %v, denies %v: listen-sockets: tenant needs bpf(2) (not in @system-service)", allowed, denied)
	}
	if !strings.Contains(one("Service.AmbientCapabilities"), "CAP_BPF") {
		t.Errorf("AmbientCapabilities lacks CAP_BPF")
	}
	if one("Service.ProtectSystem") == "strict" && strings.Join(u["Service.LogsDirectory"], " ") != "teapot-lb" {
		t.Errorf("ProtectSystem=strict without LogsDirectory=teapot-lb: access-log: /var/log/teapot-lb/access.log cannot be written")
	}
	if !strings.Contains(packageServeFileText(t), "access-log: /var/log/teapot-lb/access.log") {
		t.Errorf("serve.yaml does not say the access log belongs in /var/log/teapot-lb")
	}

	// Restart=on-failure every RestartSec must reach the start limit, so
	// that a host that keeps failing ends failed.
	restart, err := time.ParseDuration(one("Service.RestartSec"))
	if err != nil {
		t.Fatal(err)
	}
	interval, err := time.ParseDuration(one("Unit.StartLimitIntervalSec"))
	if err != nil {
		t.Fatal(err)
	}
	burst, err := strconv.Atoi(one("Unit.StartLimitBurst"))
	if err != nil || burst < 1 {
		t.Fatalf("StartLimitBurst %v", u["Unit.StartLimitBurst"])
	}
	if one("Service.Restart") != "on-failure" || time.Duration(burst)*restart >= interval {
		t.Errorf("Restart=%s every %v: %d starts take longer than StartLimitIntervalSec=%v, the unit restarts forever", one("Service.Restart"), restart, burst, interval)
	}
	if !slices.Contains(strings.Fields(one("Service.RestartPreventExitStatus")), strconv.Itoa(serveconfig.ExitConfig)) {
		t.Errorf("RestartPreventExitStatus=%s does not name %d, serve's exit status for a refused configuration", one("Service.RestartPreventExitStatus"), serveconfig.ExitConfig)
	}
	if one("Service.Type") != "notify" {
		t.Errorf("Type=%s, want notify", one("Service.Type"))
	}
}

func packageServeFileText(t *testing.T) string {
	t.Helper()
	return string(packageServeFile(serveCommand()))
}
