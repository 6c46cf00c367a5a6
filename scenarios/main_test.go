package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the teapot-lb binary built once for all scenarios, or the
// reason it could not be built.
var binary struct {
	path string
	err  error
}

// TestMain builds the teapot-lb binary once; every scenario runs it. When
// the tests run with the race detector, so does the binary (set
// TEAPOT_SCENARIO_RACE=0 to build it without).
func TestMain(m *testing.M) {
	if role := os.Getenv(attackerEnv); role != "" {
		os.Exit(attackerMain(role))
	}
	dir, err := os.MkdirTemp("", "teapot-scenarios-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		os.Exit(1)
	}
	binary.path, binary.err = build(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func build(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "teapot-lb")
	args := []string{"build", "-o", out}
	if raceEnabled && os.Getenv("TEAPOT_SCENARIO_RACE") != "0" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %v: %w\n%s", args, err, msg)
	}
	return out, nil
}

// teapotBinary returns the path of the built binary or fails tb.
func teapotBinary(tb testing.TB) string {
	tb.Helper()
	if binary.err != nil {
		tb.Fatalf("build teapot-lb: %v", binary.err)
	}
	return binary.path
}
