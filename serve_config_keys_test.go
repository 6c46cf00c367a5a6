package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/packaging/serveconfig"
)

// nonDefault is a value other than its default for every key of the
// serve configuration file, written as it is read back.
var nonDefault = map[string]string{
	"access-log":                "/var/log/teapot-lb/access.log",
	"acme-ca":                   "https://127.0.0.1:14000/dir",
	"acme-ca-root":              "/etc/teapot-lb/acme-roots.pem",
	"acme-email":                "ops@example.com",
	"acme-orders-per-tenant":    "3",
	"acme-renew-check":          "7m0s",
	"api-addr":                  "127.0.0.1:7444",
	"data-dir":                  "/srv/teapot",
	"dns-addr":                  "127.0.0.1:5353",
	"dns-ns":                    "ns1.lb.example.com=192.0.2.53",
	"dns-queries-per-tenant":    "100",
	"dns-push":                  "lb.example.com=127.0.0.3:5300=xfr",
	"dns-responses-per-second":  "7",
	"dns-secondaries":           "127.0.0.2=xfr",
	"dns-slip":                  "3",
	"dns-tsig-keys":             "testdata/dns-xfr.key",
	"dns-ttl":                   "10s",
	"dns-zones":                 "lb.example.com,signed.example.com",
	"dns-dnssec":                "signed.example.com",
	"dns-signatures-per-tenant": "50",
	"data-path":                 "io_uring",
	"drain-timeout":             "45s",
	"gc-headroom":               "none",
	"heartbeat-addr":            "127.0.0.1:7947",
	"heartbeat-interval":        "30ms",
	"heartbeat-misses":          "7",
	"join":                      "127.0.0.1:7445",
	"listen-sockets":            "tenant",
	"log-level":                 "debug",
	"memory-limit":              "1900MiB",
	"metrics-addr":              "127.0.0.1:9301",
	"node-id":                   "lb-7",
	"raft-addr":                 "127.0.0.1:7301",
	"raft-election-timeout":     "400ms",
	"raft-heartbeat-timeout":    "300ms",
	"tls-cpu-per-tenant":        "0.5",
	"cpu-per-tenant":            "0.5",
	"token":                     "join-token-1",
	"vip-interface":             "eth7",
	"netns-dir":                 "/run/teapot-netns",
	"web-addr":                  "127.0.0.1:8443",
}

// fileKeys are the flags of serve that have a key in the file.
func fileKeys(t *testing.T) []*pflag.Flag {
	t.Helper()
	var out []*pflag.Flag
	serveCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(commandLineOnly, f.Name) {
			out = append(out, f)
		}
	})
	if len(out) < 20 {
		t.Fatalf("serve has %d flags with a key", len(out))
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeConfigEveryKeyApplies writes every key of serve's flag set
// with a value other than its default into one file and checks that the
// configuration serve runs with holds each; then that a flag given on
// the command line wins over its key. A key dropped from the merge, or a
// new flag without a value here, fails it.
func TestServeConfigEveryKeyApplies(t *testing.T) {
	t.Parallel()
	var file strings.Builder
	flags := fileKeys(t)
	for _, f := range flags {
		v, ok := nonDefault[f.Name]
		if !ok {
			t.Errorf("flag --%s: add a value other than its default to nonDefault", f.Name)
			continue
		}
		if v == f.DefValue {
			t.Errorf("nonDefault[%s] is the flag's default %q", f.Name, v)
		}
		fmt.Fprintf(&file, "%s: %s\n", f.Name, v)
	}
	file.WriteString("bgp:\n  asn: 64999\n  peers:\n    - address: 192.0.2.1\n      asn: 64500\n      hold-time: 30s\n")
	path := writeFile(t, "serve.yaml", file.String())

	field := func(cfg serveConfig, key string) (string, bool) {
		v := reflect.ValueOf(cfg)
		for i := range v.NumField() {
			if strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0] == key {
				return fmt.Sprint(v.Field(i).Interface()), true
			}
		}
		return "", false
	}
	cfg, err := loadConfig(t, "--config", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, file.String())
	}
	for _, f := range flags {
		got, ok := field(cfg, f.Name)
		switch {
		case !ok:
			t.Errorf("key %s: no field of serveConfig has the tag json:%q", f.Name, f.Name)
		case got != nonDefault[f.Name]:
			t.Errorf("key %s: %s in the file, %s in the configuration", f.Name, nonDefault[f.Name], got)
		}
	}
	if cfg.BGP == nil || cfg.BGP.ASN != 64999 || len(cfg.BGP.Peers) != 1 || cfg.BGP.Peers[0].HoldTime.String() != "30s" {
		t.Errorf("bgp: section: %+v", cfg.BGP)
	}

	// Each flag on the command line wins over its key.
	for _, f := range flags {
		if f.Value.Type() != "string" && f.Value.Type() != "duration" && f.Value.Type() != "int" {
			continue
		}
		def := f.DefValue
		if def == "" {
			continue
		}
		cfg, err := loadConfig(t, "--config", path, "--"+f.Name+"="+def)
		if err != nil {
			t.Fatalf("--%s=%s: %v", f.Name, def, err)
		}
		if got, _ := field(cfg, f.Name); got != def {
			t.Errorf("--%s=%s with the key %s: got %s", f.Name, def, nonDefault[f.Name], got)
		}
	}
}

// TestServeConfigRefusals: what the file gets wrong is refused with the
// file, the line and a reason, as a configuration error (exit status 78).
func TestServeConfigRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, want string }{
		{"drain-timeot: 30s\n", `:1: unknown key "drain-timeot": did you mean drain-timeout?`},
		{"data-dir: /x\ndrain-timeout: 30\n", ":2: drain-timeout: 30 has no unit; write 30s"},
		{"heartbeat-interval: 0.5\n", ":1: heartbeat-interval: 0.5 has no unit; write 0.5s"},
		{"heartbeat-misses: five\n", `:1: heartbeat-misses: "five" is not a whole number`},
		{"log-level: loud\n", `:1: log-level: "loud" is not a level: use debug, info, warn or error`},
		{"memory-limit: lots\n", `:1: memory-limit: not a memory limit: "lots"`},
		{"gc-headroom: 1MiB\n", `:1: gc-headroom: "1MiB" is below 16 MiB`},
		{"listen-sockets: socket\n", `:1: listen-sockets: "socket" is not a way to listen`},
		{"api-addr: 7443\n", `:1: api-addr: "7443" is not IP:port`},
		{"drain-timeout: [30s]\n", ":1: drain-timeout is a list, want a duration such as 30s"},
		{"heartbeat-misses: {n: 1}\n", ":1: heartbeat-misses is a mapping, want a whole number"},
		{"restore: /tmp/backup\n", ":1: restore is not a key of the file: give it on the command line (--restore)"},
		{"check-config: true\n", ":1: check-config is not a key of the file"},
		{"drain-timeout: 30s\n\ndrain-timeout: 40s\n", ":3: drain-timeout is set twice (first on line 1)"},
		{"drain-timeout:\n", ":1: drain-timeout: no value: give a duration such as 30s or remove the key (default 30s)"},
		{"zzzzzz: 1\n", `:1: unknown key "zzzzzz": the keys are serve's flags without their dashes`},
		{"- data-dir\n", ":1: the file is a list"},
		{"data-dir: /a\n---\ndrain-timeout: 5s\n", "a second document (after ---)"},
		{"bgp:\n  asnn: 1\n", `:2: unknown key bgp."asnn": did you mean asn?`},
		{"bgp:\n  asn: 64512\n  withdraw-grace: 5\n", ":3: bgp.withdraw-grace: 5 has no unit; write 5s"},
		{"bgp:\n  asn: many\n", `:2: bgp.asn is the value "many", want a whole number`},
		{"bgp:\n  peers: {address: 192.0.2.1}\n", ":2: bgp.peers is a mapping, want a list"},
		{"bgp:\n  peers:\n    - address: 192.0.2.1\n      hold-tme: 9s\n", `:4: unknown key bgp.peers[0]."hold-tme": did you mean hold-time?`},
		{"join: 127.0.0.1:7443\n", "--join needs --token"},
		{"dns-addr: 127.0.0.1:5353\n", "--dns-addr needs at least one zone in --dns-zones"},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\n", "--dns-addr needs at least one --dns-ns NAME=IP"},
		{"dns-zones: lb.example.com\n", "--dns-zones and --dns-ns need --dns-addr"},
		{"dns-addr: dns.example:53\n", `:1: dns-addr: "dns.example:53": give an IP address, not a name`},
		{"dns-zones: \"*.example\"\n", `:1: dns-zones: zone "*.example": give a domain name like lb.example.com`},
		{"dns-ns: ns1.example.com\n", `:1: dns-ns: name server "ns1.example.com": give NAME=IP`},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-ttl: 2h\n", "--dns-ttl 2h0m0s: give 1s to 1h0m0s"},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-secondaries: 127.0.0.2=xfr\n", "--dns-secondaries needs --dns-tsig-keys"},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-secondaries: 127.0.0.2=other\ndns-tsig-keys: testdata/dns-xfr.key\n", `--dns-secondaries 127.0.0.2:53: key "other." is not in --dns-tsig-keys`},
		{"dns-secondaries: 127.0.0.2\n", `:1: dns-secondaries: secondary "127.0.0.2": give IP[:port]=KEY`},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-dnssec: acme.example\n", "--dns-dnssec acme.example.: not a zone of --dns-zones"},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-push: acme.example=127.0.0.2=xfr\ndns-tsig-keys: testdata/dns-xfr.key\n", "--dns-push acme.example.: not a zone of --dns-zones"},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-push: lb.example.com=127.0.0.2=xfr\n", "--dns-push needs --dns-tsig-keys"},
		{"dns-addr: 127.0.0.1:5353\ndns-zones: lb.example.com\ndns-ns: ns1.lb.example.com=192.0.2.53\ndns-push: lb.example.com=127.0.0.2=other\ndns-tsig-keys: testdata/dns-xfr.key\n", `--dns-push lb.example.com.: key "other." is not in --dns-tsig-keys`},
		{"dns-push: lb.example.com=127.0.0.2\n", `:1: dns-push: push "lb.example.com=127.0.0.2": give ZONE=IP[:port]=KEY`},
		{"dns-responses-per-second: -1\n", "--dns-responses-per-second -1: give a rate, or 0 to turn response-rate limiting off"},
	} {
		path := writeFile(t, "serve.yaml", tc.file)
		_, err := loadConfig(t, "--config", path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.file, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), path) && !strings.HasPrefix(tc.want, "--") {
			t.Errorf("%q: %v does not name the file", tc.file, err)
		}
		var coded interface{ ExitCode() int }
		if !errors.Is(err, serveconfig.ErrConfig) || !errors.As(err, &coded) || coded.ExitCode() != serveconfig.ExitConfig {
			t.Errorf("%q: %v is not a configuration error", tc.file, err)
		}
	}
}

// TestServeCheckConfig: serve --check-config validates the flags and the
// file and exits, 0 when valid and 78 when refused, starting nothing.
func TestServeCheckConfig(t *testing.T) {
	t.Parallel()
	good := writeFile(t, "good.yaml", "drain-timeout: 10s\nmemory-limit: 1900MiB\n")
	bad := writeFile(t, "bad.yaml", "drain-timeout: 30\n")
	run := func(args ...string) (int, string) {
		root := cli.NewRoot()
		root.AddCommand(serveCommandWith(func(context.Context, serveConfig) error {
			t.Errorf("%v started serve", args)
			return nil
		}))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"serve"}, args...))
		return cli.Main(root), out.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--check-config", "--config", good}, 0, "configuration is valid"},
		{[]string{"--check-config"}, 0, "configuration is valid"},
		{[]string{"--check-config", "--config", bad}, serveconfig.ExitConfig, bad + ":1: drain-timeout: 30 has no unit; write 30s"},
		{[]string{"--check-config", "--drain-timeout", "30"}, serveconfig.ExitConfig, "30 has no unit; write 30s"},
		{[]string{"--check-config", "--config", good, "--memory-limit", "lots"}, serveconfig.ExitConfig, "not a memory limit"},
		{[]string{"--check-config", "--config", filepath.Join(t.TempDir(), "none.yaml")}, serveconfig.ExitConfig, "read the configuration file"},
	} {
		code, out := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("serve %v: exit %d, want %d; output %q, want %q", tc.args, code, tc.code, out, tc.want)
		}
	}
}
