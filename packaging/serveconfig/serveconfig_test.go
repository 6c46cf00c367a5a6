package serveconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestNearest(t *testing.T) {
	t.Parallel()
	keys := []string{"data-dir", "drain-timeout", "log-level", "memory-limit", "gc-headroom"}
	for name, want := range map[string]string{
		"drain-timout": "drain-timeout", "datadir": "data-dir", "loglevel": "log-level",
		"memory_limit": "memory-limit", "gc-headrom": "gc-headroom", "colour": "", "": "",
	} {
		if got := nearest(name, keys); got != want {
			t.Errorf("nearest(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestApply: a key sets its flag through the flag's Value (the same
// parse and check as the command line) unless the flag was given; an
// empty file and an empty key are allowed where the flag allows "".
func TestApply(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	name := fs.String("name", "a", "")
	wait := fs.Duration("wait", time.Second, "")
	level := "info"
	fs.Var(NewChecked(&level, "level", func(s string) error {
		if s != "info" && s != "debug" {
			return errors.New("not a level")
		}
		return nil
	}), "level", "")
	fs.String("once", "", "")
	if err := fs.Parse([]string{"--wait", "5s"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "f.yaml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := File{CommandLineOnly: []string{"once"}}
	if err := Apply(fs, write("# nothing\n"), f); err != nil {
		t.Fatalf("a file of comments: %v", err)
	}
	if err := Apply(fs, write("name:\nwait: 9s\nlevel: debug\n"), f); err != nil {
		t.Fatal(err)
	}
	if *name != "" || *wait != 5*time.Second || level != "debug" {
		t.Errorf("name %q wait %v level %q: want \"\", the command line's 5s, debug", *name, *wait, level)
	}
	err := Apply(fs, write("level: loud\n"), f)
	if err == nil || !strings.Contains(err.Error(), "f.yaml:1: level: not a level") || !errors.Is(err, ErrConfig) {
		t.Errorf("level: loud: %v", err)
	}
	if err := Apply(fs, write("once: x\n"), f); err == nil || !strings.Contains(err.Error(), "(--once)") {
		t.Errorf("a command-line-only key: %v", err)
	}
	if err := Apply(fs, write("name: [\n"), f); err == nil || !strings.Contains(err.Error(), "f.yaml") {
		t.Errorf("broken YAML: %v", err)
	}
	if got := (File{CommandLineOnly: []string{"once"}, Sections: map[string]any{"bgp": new(*struct{})}}).Keys(fs); strings.Join(got, " ") != "bgp level name wait" {
		t.Errorf("keys %v", got)
	}
}
