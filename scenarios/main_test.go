package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binary is the teapot-lb binary built once for all scenarios, on the
// first call of teapotBinary, or the reason it could not be built.
var binary struct {
	once   sync.Once
	dir    string
	shared bool // dir is $TEAPOT_SCENARIO_BINARY_DIR
	path   string
	err    error
}

// TestMain makes the directory of the teapot-lb binary, which the first
// scenario that needs it builds (so the rule tests run without it). When
// the tests run with the race detector, so does the binary (set
// TEAPOT_SCENARIO_RACE=0 to build it without). It also sets how many
// parallel scenarios run at a time (setParallelWidth), and which tests run
// when $TEAPOT_SCENARIOS names a phase (setScenarioPhase).
func TestMain(m *testing.M) {
	if role := os.Getenv(attackerEnv); role != "" {
		os.Exit(attackerMain(role))
	}
	if os.Getenv(h3FlooderEnv) != "" {
		os.Exit(h3FloodMain())
	}
	if err := setParallelWidth(); err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		os.Exit(2)
	}
	if err := setScenarioPhase(); err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		os.Exit(2)
	}
	if dir := os.Getenv(binaryDirEnv); dir != "" {
		// A directory the caller made and removes (make test).
		binary.dir, binary.shared = dir, true
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "teapot-scenarios-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		os.Exit(1)
	}
	binary.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaryDirEnv names a directory that runs of the package one after
// another share the teapot-lb binary in: the first to need it builds it
// there, the later ones use it (make test's two phases, in a directory it
// makes for the one make test and removes). Build settings must not change
// between those runs.
const binaryDirEnv = "TEAPOT_SCENARIO_BINARY_DIR"

func build(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "teapot-lb")
	if binary.shared {
		if _, err := os.Stat(out); err == nil {
			return out, nil // built by an earlier run
		}
	}
	tmp := out + ".building"
	args := []string{"build", "-o", tmp}
	if raceEnabled && os.Getenv("TEAPOT_SCENARIO_RACE") != "0" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %v: %w\n%s", args, err, msg)
	}
	// Whole or not at all, for a later run that shares the directory.
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	return out, nil
}

// teapotBinary returns the path of the built binary, building it on the
// first call, or fails tb.
func teapotBinary(tb testing.TB) string {
	tb.Helper()
	binary.once.Do(func() { binary.path, binary.err = build(binary.dir) })
	if binary.err != nil {
		tb.Fatalf("build teapot-lb: %v", binary.err)
	}
	return binary.path
}
