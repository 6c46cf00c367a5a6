package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/teapot-lb/teapot-lb/packaging/gen"
	"github.com/teapot-lb/teapot-lb/vip"
)

var update = flag.Bool("update", false, "rewrite packaging/host/serve.yaml")

// serveFilePath is the conffile the packages install as /etc/teapot-lb/serve.yaml.
const serveFilePath = "packaging/host/serve.yaml"

// bgpSection documents the bgp: section, which has no flags.
var bgpSection = []string{
	"BGP: announce the VIPs of bgp pools to routers (only in this file).",
	"Every healthy host announces what it can serve; routers spread flows by ECMP.",
	"bgp:",
	"  asn: 64512                  # this host's AS number",
	"  router-id: 192.0.2.11       # IPv4 (default: the heartbeat address when IPv4)",
	"  interface: lo               # carries the VIPs of bgp pools (default lo)",
	"  med: 0                      # a host with a higher MED is a standby",
	"  withdraw-grace: 500ms       # serving after withdrawal on stop (default 500ms)",
	"  peers:",
	"    - address: 192.0.2.1",
	"      asn: 64500",
	"      port: 179               # default 179",
	"      password: \"\"            # TCP MD5 signatures when set",
	"      hold-time: 90s          # default 90s",
	"      bfd:",
	"        enabled: true",
	"        min-tx: 300ms         # default 300ms",
	"        min-rx: 300ms         # default 300ms",
	"        multiplier: 3",
}

// packageServeFile is what the deb and rpm install: the data directory of
// a package-installed host, every other key commented with its default.
func packageServeFile(cmd *cobra.Command) []byte {
	return gen.ServeYAML(cmd.Flags(), gen.ServeFile{
		Header: []string{
			"teapot-lb serve configuration (read by `teapot-lb serve --config FILE`).",
			"",
			"Every key is a serve flag without its dashes; a flag given on the command",
			"line wins over the key; an unknown key is refused. Durations are Go",
			"durations and carry a unit (500ms, 2s, 1m). Check the file with",
			"teapot-lb serve --check-config --config /etc/teapot-lb/serve.yaml.",
			"Keys left commented take the default shown. Apply a change with",
			"systemctl restart teapot-lb.",
			"",
			"A first host bootstraps a one-host cluster; the admin credentials land in",
			"/var/lib/teapot-lb/admin.conf, where the CLI finds them for root. Another",
			"host joins with join: and token: (teapot-lb cluster join-token).",
			"",
			"The unit lets the service write only /var/lib/teapot-lb and",
			"/var/log/teapot-lb: an access log goes there, for example",
			"access-log: /var/log/teapot-lb/access.log.",
		},
		Set:         map[string]string{"data-dir": "/var/lib/teapot-lb"},
		DefaultText: map[string]string{"node-id": "this host's name"},
		Skip:        commandLineOnly,
		Sections:    [][]string{bgpSection},
	})
}

func TestServeConfigFileIsCurrent(t *testing.T) {
	got := packageServeFile(serveCommand())
	if *update {
		if err := os.WriteFile(serveFilePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(serveFilePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go test . -run TestServeConfigFileIsCurrent -update", serveFilePath)
	}
}

// TestServeConfigFileKeys checks that the file and the flags cannot drift:
// every flag is a key of the file's struct, every key is a flag (or bgp),
// and the file with every key uncommented loads strictly.
func TestServeConfigFileKeys(t *testing.T) {
	cmd := serveCommand()
	keys := map[string]bool{}
	typ := reflect.TypeFor[serveConfig]()
	for i := range typ.NumField() {
		keys[strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	flags := map[string]bool{}
	for _, name := range flagNames(cmd) {
		flags[name] = true
		if !slices.Contains(commandLineOnly, name) && !keys[name] {
			t.Errorf("flag --%s has no key in the serve config file", name)
		}
	}
	for k := range keys {
		if k != "bgp" && k != "-" && !flags[k] {
			t.Errorf("config key %s has no flag", k)
		}
	}
	// Every BGP key appears in the documented section.
	sec := strings.Join(bgpSection, "\n")
	for _, typ := range []reflect.Type{reflect.TypeFor[vip.BGPConfig](), reflect.TypeFor[vip.BGPPeer](), reflect.TypeFor[vip.BFDConfig]()} {
		for i := range typ.NumField() {
			k := strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]
			if !strings.Contains(sec, " "+k+":") {
				t.Errorf("the bgp: section does not document %s.%s", typ.Name(), k)
			}
		}
	}

	// Uncomment everything: the result must load, and the packaged file as is
	// must set the package's data directory.
	file := packageServeFile(cmd)
	var lines []string
	for _, l := range strings.Split(string(file), "\n") {
		switch {
		case strings.HasPrefix(l, "#") && strings.Contains(l, ":") && !strings.HasPrefix(l, "# ") && !strings.HasSuffix(l, ":"):
			lines = append(lines, strings.TrimPrefix(l, "#"))
		case strings.HasPrefix(l, "# bgp:") || strings.HasPrefix(l, "#   "):
			lines = append(lines, strings.TrimPrefix(l, "# "))
		}
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "full.yaml")
	if err := os.WriteFile(full, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(t, "--config", full)
	if err != nil {
		t.Fatalf("the file with every key uncommented does not load: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if cfg.BGP == nil || cfg.BGP.ASN != 64512 || len(cfg.BGP.Peers) != 1 || cfg.BGP.Peers[0].BFD == nil {
		t.Errorf("bgp section loaded as %+v", cfg.BGP)
	}
	if cfg.HeartbeatMisses != int(vip.DefaultHeartbeatMisses) {
		t.Errorf("heartbeat-misses loaded as %d", cfg.HeartbeatMisses)
	}

	packaged := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(packaged, file, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := loadConfig(t, "--config", packaged, "--log-level", "debug")
	if err != nil {
		t.Fatal(err)
	}
	if got.DataDir != "/var/lib/teapot-lb" || got.LogLevel != "debug" {
		t.Errorf("packaged file with --log-level debug: data-dir %q log-level %q", got.DataDir, got.LogLevel)
	}
}

// loadConfig runs serve's command with args and returns the
// configuration it would serve with.
func loadConfig(t *testing.T, args ...string) (serveConfig, error) {
	t.Helper()
	var got serveConfig
	cmd := serveCommandWith(func(_ context.Context, cfg serveConfig) error { got = cfg; return nil })
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetOut(io.Discard)
	err := cmd.Execute()
	return got, err
}

func flagNames(cmd *cobra.Command) []string {
	var out []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { out = append(out, f.Name) })
	return out
}
