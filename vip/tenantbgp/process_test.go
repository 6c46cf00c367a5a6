package tenantbgp

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
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
		// Pass on the child's reason, the last line it logged before its
		// SKIP line: a missing condition, such as root or 127.0.0.2.
		before, _, _ := bytes.Cut(out, []byte("--- SKIP: "+t.Name()+" "))
		lines := strings.Split(strings.TrimRight(string(before), "\n"), "\n")
		t.Skipf("its process skipped it: %s", strings.TrimSpace(lines[len(lines)-1]))
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")):
		t.Fatal("the test's process did not run it")
	}
	return true
}
