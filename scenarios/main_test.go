package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// hostBuild is one build of the teapot-lb binary, made on the first call
// of teapotBinary that needs it, or the reason it could not be made.
type hostBuild struct {
	once sync.Once
	path string
	err  error
}

// binary holds the directory the scenarios' teapot-lb binaries are built
// in and the two builds: as users run it (CGO off, as make build makes
// it) and with the race detector.
var binary struct {
	dir    string
	shared bool // dir is $TEAPOT_SCENARIO_BINARY_DIR
	plain  hostBuild
	race   hostBuild
}

// raceHostsEnv chooses which scenarios' hosts are built with the race
// detector when the tests run with it: unset, those that call raceHosts;
// "1", every scenario's; "0", none.
const raceHostsEnv = "TEAPOT_SCENARIO_RACE"

// raceHostNames are the top-level scenarios that called raceHosts.
var raceHostNames sync.Map

// raceHosts marks t, a top-level scenario, as one whose hosts run built
// with the race detector (when the tests do). Every package's unit tests
// run with the race detector; most scenarios check behaviour a race build
// adds nothing to while they wait for its hosts (four of them took 128
// CPU-seconds and 110 s with race-built hosts, 66 and 80 s without:
// README, Test time). Those that call raceHosts
// drive, across packages and processes, the concurrency unit tests cannot:
// leader kills under writes, VIP failover under traffic, the agent's
// streams through reconnects, drains, backups under writes, and mixed
// releases. Call it before the scenario's first host is built.
func raceHosts(t *testing.T) {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("%s calls raceHosts outside its own top-level body", t.Name())
	}
	raceHostNames.Store(t.Name(), true)
}

// hostRace reports whether tb's hosts are built with the race detector.
func hostRace(tb testing.TB) bool {
	if !raceEnabled {
		return false
	}
	switch os.Getenv(raceHostsEnv) {
	case "0":
		return false
	case "1":
		return true
	}
	name, _, _ := strings.Cut(tb.Name(), "/")
	_, ok := raceHostNames.Load(name)
	return ok
}

// TestMain makes the directory of the teapot-lb binaries, which the first
// scenario that needs one builds (so the rule tests run without it): one
// built as users run it, and, when the tests run with the race detector,
// one built with it for the scenarios that call raceHosts
// ($TEAPOT_SCENARIO_RACE=1 gives it to every scenario, =0 to none). It
// also sets how many parallel scenarios run at a time (setParallelWidth),
// and which tests run when $TEAPOT_SCENARIOS names a phase
// (setScenarioPhase).
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
	switch v := os.Getenv(raceHostsEnv); v {
	case "", "0", "1":
	default:
		fmt.Fprintf(os.Stderr, "scenarios: $%s=%q: want 1 (every scenario's hosts built with the race detector), 0 (none), or unset (those of the scenarios that call raceHosts)\n", raceHostsEnv, v)
		os.Exit(2)
	}
	if dir := os.Getenv(binaryDirEnv); dir != "" {
		// A directory the caller made and removes (make test).
		binary.dir, binary.shared = dir, true
		startPrebuilds()
		code := m.Run()
		close(testsDone)
		<-prebuilt
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "teapot-scenarios-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		os.Exit(1)
	}
	binary.dir = dir
	startPrebuilds()
	code := m.Run()
	close(testsDone)
	// The builds write under dir: they end before it goes.
	<-prebuilt
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaryDirEnv names a directory that runs of the package one after
// another share the teapot-lb binaries in: the first to need one builds it
// there, the later ones use it (make test's two phases, in a directory it
// makes for the one make test and removes). Build settings must not change
// between those runs.
const binaryDirEnv = "TEAPOT_SCENARIO_BINARY_DIR"

// build builds teapot-lb into dir: with the race detector, or as make
// build does (CGO off, -trimpath).
func build(dir string, race bool) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "teapot-lb")
	if race {
		out += "-race"
	}
	if binary.shared {
		if _, err := os.Stat(out); err == nil {
			return out, nil // built by an earlier run
		}
	}
	tmp := out + ".building"
	args := []string{"build", "-o", tmp}
	cgo := "CGO_ENABLED=0"
	if race {
		args, cgo = append(args, "-race"), "CGO_ENABLED=1"
	} else {
		// -trimpath, as make build builds it. The Kubernetes labs' agent
		// image (buildKubeImages) is built with the same compile flags
		// after this build, so its build finds every package compiled
		// and only links (7 s). With a cold cache on this 2-core
		// machine, the two built side by side with different flags took
		// 621 s and 1,220 CPU-seconds (load 6); one after the other with
		// the same flags, 322 s and 605 CPU-seconds (load 4).
		args = append(args, "-trimpath")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), cgo)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s go %v: %w\n%s", cgo, args, err, msg)
	}
	// Whole or not at all, for a later run that shares the directory.
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	return out, nil
}

// teapotBinary returns the path of the binary tb's hosts run (hostRace),
// building it on the first call, or fails tb.
func teapotBinary(tb testing.TB) string {
	tb.Helper()
	race := hostRace(tb)
	b := &binary.plain
	if race {
		b = &binary.race
	}
	path, err := b.get(race)
	if err != nil {
		tb.Fatalf("build teapot-lb: %v", err)
	}
	return path
}

// get builds teapot-lb into binary.dir on its first call (with the race
// detector or not) and returns the path or the reason it failed.
func (b *hostBuild) get(race bool) (string, error) {
	b.once.Do(func() { b.path, b.err = build(binary.dir, race) })
	return b.path, b.err
}
