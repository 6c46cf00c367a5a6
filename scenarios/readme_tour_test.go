package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tourBlock is a shell block of the README and the output shown after it.
type tourBlock struct {
	line   int // of the block in README.md
	script string
	want   string // "" when the README shows no output
	hasOut bool
}

// readmeBlocks returns the shell blocks of the README section that starts
// with heading, up to the next heading.
func readmeBlocks(t *testing.T, heading string) []tourBlock {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if l == heading {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	var blocks []tourBlock
	for i := start + 1; i < len(lines); i++ {
		l := lines[i]
		if h := strings.Index(l, " "); strings.HasPrefix(l, "#") && h > 0 && strings.Trim(l[:h], "#") == "" {
			break
		}
		if !strings.HasPrefix(l, "```") {
			continue
		}
		lang := strings.TrimPrefix(l, "```")
		j := i + 1
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		body := strings.Join(lines[i+1:j], "\n") + "\n"
		switch {
		case lang == "sh":
			blocks = append(blocks, tourBlock{line: i + 1, script: body})
		case lang == "" && len(blocks) > 0 && !blocks[len(blocks)-1].hasOut:
			blocks[len(blocks)-1].want, blocks[len(blocks)-1].hasOut = body, true
		}
		i = j
	}
	return blocks
}

var (
	tourTime   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	tourAge    = regexp.MustCompile(`\b\d+(ms|s|m|h|d)\s*$`)
	tourMember = regexp.MustCompile(`127\.0\.0\.1[12]:30080`)
	tourSpaces = regexp.MustCompile(`[ \t]+`)
	tourAssign = regexp.MustCompile(`(?m)^(?:export )?([A-Z_][A-Z0-9_]*)=`)
	// Cluster status: its ID, durations, and counts (indexes, terms, the
	// feature level) vary; addresses and ports stay.
	tourStatus = regexp.MustCompile(`^(cluster |n\d+ )`)
	tourHex    = regexp.MustCompile(`\b[0-9a-f]{16}\b`)
	tourDur    = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s)\b`)
	tourInt    = regexp.MustCompile(`[.:]?\b\d+\b[.:]?`)
)

// normaliseTour makes a sample and a run comparable: times, ages and which
// member answered vary; column widths follow the values.
func normaliseTour(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		l = tourTime.ReplaceAllString(l, "TIME")
		l = tourAge.ReplaceAllString(l, "AGE")
		l = tourMember.ReplaceAllString(l, "MEMBER")
		if tourStatus.MatchString(l) {
			l = tourHex.ReplaceAllString(l, "ID")
			l = tourDur.ReplaceAllString(l, "DUR")
			l = tourInt.ReplaceAllStringFunc(l, func(m string) string {
				if strings.ContainsAny(m, ".:") {
					return m
				}
				return "N"
			})
		}
		out = append(out, strings.TrimSpace(tourSpaces.ReplaceAllString(l, " ")))
	}
	// Hosts are listed in no fixed order.
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// mutates reports whether running a block twice differs from running it
// once: only blocks that read may be run again until their output settles
// (a load balancer's status and its members' health take a moment).
func mutates(script string) bool {
	for _, w := range []string{" create ", " upload ", " delete ", "&", "cat >", "-f shop.yaml\n", "kill "} {
		if strings.Contains(script, w) {
			return true
		}
	}
	return false
}

// The README's tour runs on one machine, offline, as written, and prints
// what the README shows: its shell blocks run in order against a real host
// started as `make run` starts it (an ACME CA on a local port), and the
// output of each is compared with the block after it.
func TestReadmeTour(t *testing.T) {
	for _, tool := range []string{"bash", "openssl", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "the tour needs %s", tool)
		}
	}
	blocks := append(readmeBlocks(t, "## A five-minute tour"), readmeBlocks(t, "### Three hosts on one machine")...)
	c := newCluster(t)
	n := c.bootstrap()

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(c.bin, filepath.Join(dir, "bin", "teapot-lb")); err != nil {
		t.Fatal(err)
	}
	env := append(childEnv(), "TEAPOT_LB_CONFIG="+n.adminConf(), "EDITOR=true")
	var groups []int
	t.Cleanup(func() {
		for _, g := range groups {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	run := func(b tourBlock) (string, error) {
		vars := tourAssign.FindAllStringSubmatch(b.script, -1)
		script := "set -e\n[ -f .tourvars ] && . ./.tourvars\n" + b.script
		for _, v := range vars {
			script += "declare -p " + v[1] + " >> .tourvars\n"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*cliTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		// A background process (the echo backends) keeps the pipes open:
		// wait for bash alone.
		cmd.WaitDelay = time.Second
		if err := cmd.Start(); err != nil {
			return "", err
		}
		groups = append(groups, cmd.Process.Pid)
		err := cmd.Wait()
		if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
			return out.String(), fmt.Errorf("%w: %s", err, errOut.String())
		}
		return out.String(), nil
	}
	ran := 0
	for _, b := range blocks {
		if strings.Contains(b.script, "make run") {
			continue // pebble and a restart of make run: the ACME tests cover pebble
		}
		ran++
		t.Logf("README.md line %d", b.line)
		deadline := time.Now().Add(startTimeout)
		for {
			out, err := run(b)
			if err != nil {
				t.Fatalf("README.md line %d:\n%s\nfailed: %v\noutput:\n%s", b.line, b.script, err, out)
			}
			got, want := normaliseTour(out), normaliseTour(b.want)
			if !b.hasOut || got == want {
				break
			}
			if mutates(b.script) || time.Now().After(deadline) {
				t.Fatalf("README.md line %d:\n%s\nprinted:\n%s\nthe README shows:\n%s", b.line, b.script, out, b.want)
			}
			time.Sleep(pollInterval)
		}
	}
	if ran < 3 {
		t.Fatalf("ran %d blocks of the tour; the README changed shape", ran)
	}
	// The tour stops what it started: nothing of the tour's groups is left.
	for _, g := range groups {
		waitFor(t, cliTimeout, "the tour's processes to end", func() error {
			if err := syscall.Kill(-g, 0); err == nil {
				return fmt.Errorf("process group %d is still running", g)
			}
			return nil
		})
	}
	if bad := noisy(func() string { b, _ := os.ReadFile(n.logPath); return string(b) }(), "\x00"); len(bad) > 0 {
		t.Errorf("the host logged during the tour:\n%s", strings.Join(bad, "\n"))
	}
}
