package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/packaging/serveconfig"
)

// TestServeTenantCPUBounds: serve refuses a per-tenant CPU budget the
// host could not honour, from a flag or from serve.yaml, naming the key,
// the bound and what to give: over the host's CPUs (no tenant could reach
// it) or under a millicore (it would round to 0, the default).
func TestServeTenantCPUBounds(t *testing.T) {
	t.Parallel()
	procs := runtime.GOMAXPROCS(0)
	over := fmt.Sprint(procs + 1)
	run := func(args ...string) (int, string) {
		root := cli.NewRoot()
		root.AddCommand(serveCommandWith(func(context.Context, serveConfig) error {
			t.Errorf("%v started serve", args)
			return nil
		}))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"serve", "--check-config"}, args...))
		return cli.Main(root), out.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cpu-per-tenant", "0.5"}, 0, "configuration is valid"},
		{[]string{"--cpu-per-tenant", "0"}, 0, "configuration is valid"},
		{[]string{"--cpu-per-tenant", fmt.Sprint(procs)}, 0, "configuration is valid"},
		{[]string{"--cpu-per-tenant", over}, serveconfig.ExitConfig, fmt.Sprintf("--cpu-per-tenant %s: more than this host's %d CPUs (GOMAXPROCS), which no tenant could reach, so it would bound nothing; give at most %d", over, procs, procs)},
		{[]string{"--config", writeFile(t, "cpu.yaml", "cpu-per-tenant: "+over+"\n")}, serveconfig.ExitConfig, "--cpu-per-tenant " + over + ": more than this host's"},
		{[]string{"--cpu-per-tenant", "0.0004"}, serveconfig.ExitConfig, "--cpu-per-tenant 0.0004: under a thousandth of a core, the budget's unit; give 0.001 or more"},
		{[]string{"--cpu-per-tenant", "-1"}, serveconfig.ExitConfig, "--cpu-per-tenant -1: give the CPU cores"},
		{[]string{"--tls-cpu-per-tenant", over}, serveconfig.ExitConfig, "--tls-cpu-per-tenant " + over + ": more than this host's"},
		{[]string{"--tls-cpu-per-tenant", "0.0001"}, serveconfig.ExitConfig, "--tls-cpu-per-tenant 0.0001: under a thousandth of a core"},
	} {
		code, out := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("serve --check-config %v: exit %d, want %d; output %q, want %q", tc.args, code, tc.code, out, tc.want)
		}
	}
}
