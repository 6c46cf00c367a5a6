package tenantbgp

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ownProcessEnv names, in a child test process, the test it runs.
const ownProcessEnv = "TEAPOT_TENANTBGP_TEST"

// ownProcesses bounds the tests running in processes of their own at once:
// they mostly wait on BGP and BFD timers, and a few at a time keep the
// timing ones (BFD detection, update rates) clear of one another.
var ownProcesses = make(chan struct{}, 6)

// TestMain lets as many parallel tests run as ownProcesses holds, unless
// -parallel says otherwise: go test's default, the CPUs, would run two
// at a time on two cores, though they mostly wait.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(cap(ownProcesses))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// ownProcess runs t in a test process of its own, beside the package's
// other such tests, and reports true in the parent, which then returns;
// in the child it reports false, and the test runs there. gobgp's
// StartBgp writes package variables that a running server reads, so two
// servers of one process must not overlap: one test's servers to a
// process lets the tests run at once (they ran one after another, about
// 100 s of the package's time).
func ownProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownProcessEnv) == t.Name() {
		return false
	}
	t.Parallel()
	ownProcesses <- struct{}{}
	defer func() { <-ownProcesses }()
	// The child ends before the parent's deadline: a parent that times out
	// leaves no test running on. (Not Pdeathsig: it follows the thread
	// that started the child, and the tests end threads they moved into
	// network namespaces.)
	timeout := 5 * time.Minute
	if d, ok := t.Deadline(); ok {
		timeout = max(min(timeout, time.Until(d)-5*time.Second), time.Second)
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v", "-test.timeout=" + timeout.String()}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), ownProcessEnv+"="+t.Name())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("in a process of its own (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatal(fmt.Errorf("the test's process: %w", err))
	}
	switch {
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" ")):
		// The child exited 0 and skipped the test: pass on its reason, a
		// missing condition such as root, BIRD or 127.0.0.2.
		t.Skipf("its process skipped it: %s", skipReason(out, t.Name()))
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")):
		t.Fatal("the test's process did not run it")
	}
	return true
}

// skipReason is the reason a child's verbose output gives for skipping
// test: the last line the test logged (file_test.go:N: ...) before its
// SKIP line, which other output (gobgp's log) may come between.
func skipReason(out []byte, test string) string {
	before, _, _ := bytes.Cut(out, []byte("--- SKIP: "+test+" "))
	lines := strings.Split(string(before), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); testLogLine.MatchString(l) {
			return l
		}
	}
	return "it logged no reason (its output is above)"
}

// testLogLine is a line t.Log, t.Skip and their kin print: file:line: text.
var testLogLine = regexp.MustCompile(`^[\w.-]+_test\.go:\d+: `)

// A child's skip reason is the test's last log line before its SKIP line,
// past output that is not the test's.
func TestSkipReason(t *testing.T) {
	out := "=== RUN   TestRelayBFD\n    bfd_test.go:37: needs BIRD 2 (the bird2 package)\n{\"level\":\"info\",\"msg\":\"gobgp stopped\"}\n--- SKIP: TestRelayBFD (0.00s)\nPASS\n"
	if got, want := skipReason([]byte(out), "TestRelayBFD"), "bfd_test.go:37: needs BIRD 2 (the bird2 package)"; got != want {
		t.Errorf("skipReason = %q, want %q", got, want)
	}
	out = "=== RUN   TestRelayBFD\n--- SKIP: TestRelayBFD (0.00s)\n"
	if got := skipReason([]byte(out), "TestRelayBFD"); !strings.Contains(got, "no reason") {
		t.Errorf("skipReason of a silent skip = %q, want it to say there is no reason", got)
	}
}
