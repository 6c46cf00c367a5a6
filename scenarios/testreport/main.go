// Command testreport reads the events of `go test -json` on its standard
// input and prints what `go test` prints without -v (a line per package,
// and the whole output of every test that failed and of every package
// that failed outside its tests), then the test time: the slowest
// top-level tests of the run with their wall time, and each package's.
// It exits 1 when a test, a package or a build failed, so that a failure
// is not lost when the exit status of `go test` is (make test runs it
// with pipefail as well).
//
//	go test -json ./... | go run ./scenarios/testreport -slowest 25
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json), with the build
// events of Go 1.24 (ImportPath, build-output, build-fail).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Time        time.Time
	Elapsed     float64
	Output      string
	FailedBuild string
}

// RunningMark, logged by a test (t.Log), says that it starts its work
// only now: its time is counted from there (a parallel scenario that
// waited for a place of its own; scenarios/parallel_test.go).
const RunningMark = "testreport: running"

// timing is the wall time of a finished top-level test or package.
type timing struct {
	pkg, test string
	elapsed   time.Duration
	failed    bool
}

// report follows the events of one run.
type report struct {
	out io.Writer
	// lines are the output of each running top-level test (its subtests'
	// included), printed if it fails, dropped if it passes.
	lines map[[2]string][]string
	// pkgLines are each package's output outside its tests.
	pkgLines map[string][]string
	// resumed is when each running top-level test last started to run:
	// a parallel test's time is counted from there, not from its pause.
	resumed map[[2]string]time.Time
	tests   []timing
	pkgs    []timing
	failed  bool
}

func newReport(out io.Writer) *report {
	return &report{out: out, lines: map[[2]string][]string{}, pkgLines: map[string][]string{}, resumed: map[[2]string]time.Time{}}
}

// top is the top-level test a test or subtest belongs to.
func top(test string) string {
	name, _, _ := strings.Cut(test, "/")
	return name
}

func (r *report) event(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.out, e.Output)
		return
	case "build-fail":
		r.failed = true
		return
	}
	if e.Test != "" {
		r.testEvent(e)
		return
	}
	switch e.Action {
	case "output":
		r.pkgLines[e.Package] = append(r.pkgLines[e.Package], e.Output)
	case "pass", "skip":
		r.pkgs = append(r.pkgs, timing{pkg: e.Package, elapsed: seconds(e.Elapsed)})
		r.printSummary(e.Package)
		delete(r.pkgLines, e.Package)
	case "fail":
		r.failed = true
		r.pkgs = append(r.pkgs, timing{pkg: e.Package, elapsed: seconds(e.Elapsed), failed: true})
		// What the tests still running said (a timeout's panic names
		// them), then the package's own output.
		for k, lines := range r.lines {
			if k[0] == e.Package {
				fmt.Fprintf(r.out, "--- output of %s, which had not ended ---\n", k[1])
				fmt.Fprint(r.out, strings.Join(lines, ""))
				delete(r.lines, k)
			}
		}
		fmt.Fprint(r.out, strings.Join(r.pkgLines[e.Package], ""))
		if e.FailedBuild != "" && len(r.pkgLines[e.Package]) == 0 {
			fmt.Fprintf(r.out, "FAIL\t%s [build failed]\n", e.Package)
		}
		delete(r.pkgLines, e.Package)
	}
}

// printSummary prints the line `go test` prints for a package that
// passed or has no tests ("ok", "?"), from its own output.
func (r *report) printSummary(pkg string) {
	for _, l := range r.pkgLines[pkg] {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") {
			fmt.Fprint(r.out, l)
		}
	}
}

func (r *report) testEvent(e event) {
	k := [2]string{e.Package, top(e.Test)}
	switch e.Action {
	case "run", "cont":
		if e.Test == k[1] && !e.Time.IsZero() {
			r.resumed[k] = e.Time
		}
	case "output":
		r.lines[k] = append(r.lines[k], e.Output)
		if strings.HasSuffix(e.Output, RunningMark+"\n") && !e.Time.IsZero() {
			r.resumed[k] = e.Time
		}
	case "pass", "skip", "fail":
		if e.Test != k[1] {
			return // a subtest: its lines stay with its top-level test
		}
		elapsed := seconds(e.Elapsed)
		if at, ok := r.resumed[k]; ok && !e.Time.IsZero() {
			elapsed = e.Time.Sub(at)
		}
		delete(r.resumed, k)
		failed := e.Action == "fail"
		if failed {
			r.failed = true
			fmt.Fprint(r.out, strings.Join(r.lines[k], ""))
		}
		if e.Action != "skip" {
			r.tests = append(r.tests, timing{pkg: e.Package, test: e.Test, elapsed: elapsed, failed: failed})
		}
		delete(r.lines, k)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// summary prints the slowest top-level tests and packages.
func (r *report) summary(slowest int, wall time.Duration) {
	byTime := func(a, b timing) int { return int(b.elapsed - a.elapsed) }
	slices.SortStableFunc(r.tests, byTime)
	slices.SortStableFunc(r.pkgs, byTime)
	fmt.Fprintf(r.out, "\ntest time: %d top-level tests in %d packages, %s of wall time from the first event to the last\n",
		len(r.tests), len(r.pkgs), wall.Round(time.Second))
	fmt.Fprintf(r.out, "the %d slowest tests (a parallel test's time from when it resumed, or logged %q):\n", min(slowest, len(r.tests)), RunningMark)
	for _, t := range r.tests[:min(slowest, len(r.tests))] {
		mark := ""
		if t.failed {
			mark = "  FAILED"
		}
		fmt.Fprintf(r.out, "  %8.1fs  %s %s%s\n", t.elapsed.Seconds(), shortPkg(t.pkg), t.test, mark)
	}
	fmt.Fprintf(r.out, "the slowest packages:\n")
	for _, p := range r.pkgs[:min(10, len(r.pkgs))] {
		fmt.Fprintf(r.out, "  %8.1fs  %s\n", p.elapsed.Seconds(), shortPkg(p.pkg))
	}
}

// shortPkg drops the module's path from a package's.
func shortPkg(pkg string) string {
	const module = "github.com/teapot-lb/teapot-lb"
	if pkg == module {
		return "."
	}
	return strings.TrimPrefix(pkg, module+"/")
}

func main() {
	slowest := flag.Int("slowest", 25, "how many of the slowest tests to list")
	flag.Parse()
	r := newReport(os.Stdout)
	var first, last time.Time
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event (go test's own messages, e.g. a build it
			// could not start): passed on as it is.
			fmt.Fprintf(os.Stdout, "%s\n", line)
			continue
		}
		if !e.Time.IsZero() {
			if first.IsZero() {
				first = e.Time
			}
			last = e.Time
		}
		r.event(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r.summary(*slowest, last.Sub(first))
	if r.failed {
		os.Exit(1)
	}
}
