package scenarios

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scenarioPhaseEnv splits the package's tests into two runs, so that make
// test can run the parallel scenarios (those that call parallelScenario)
// beside the other packages' unit tests and then every other scenario
// with nothing beside it: "parallel" runs only the parallel scenarios,
// "alone" only the others (the scenarios that measure time, rates or CPU,
// and the rule tests). Unset, the package runs all of them, the parallel
// ones last.
const scenarioPhaseEnv = "TEAPOT_SCENARIOS"

// scenarioPhase is $TEAPOT_SCENARIOS as setScenarioPhase found it.
var scenarioPhase string

// parallelNames are the tests that call parallelScenario,
// parallelScenarioTaking or parallelScenarioWaiting in their own body,
// found in the package's source.
var parallelNames map[string]bool

// setScenarioPhase runs in TestMain before the tests: with
// $TEAPOT_SCENARIOS set, it adds the tests of the other phase to -skip.
func setScenarioPhase() error {
	scenarioPhase = os.Getenv(scenarioPhaseEnv)
	if scenarioPhase == "" {
		return nil
	}
	if scenarioPhase != "parallel" && scenarioPhase != "alone" {
		return fmt.Errorf("$%s=%q: want parallel (the scenarios that call parallelScenario) or alone (all the others), or unset for all", scenarioPhaseEnv, scenarioPhase)
	}
	if given := flag.Lookup("test.skip").Value.String(); given != "" {
		return fmt.Errorf("-skip with $%s: unset $%s to choose the tests with -run and -skip alone", scenarioPhaseEnv, scenarioPhaseEnv)
	}
	all, par, err := scanTests(".")
	if err != nil {
		return fmt.Errorf("$%s: %w", scenarioPhaseEnv, err)
	}
	parallelNames = par
	var skip []string
	for _, name := range all {
		if par[name] == (scenarioPhase == "alone") {
			skip = append(skip, name)
		}
	}
	if len(skip) == 0 {
		return nil
	}
	return flag.Set("test.skip", "^("+strings.Join(skip, "|")+")$")
}

// checkPhase fails t, a test that called parallelScenario, if the phase
// split did not see it as a parallel scenario (it would then run in
// neither phase, or in the wrong one).
func checkPhase(t *testing.T) {
	t.Helper()
	if scenarioPhase == "" {
		return
	}
	name, _, _ := strings.Cut(t.Name(), "/")
	if !parallelNames[name] || t.Name() != name {
		t.Fatalf("%s calls parallelScenario outside its own top-level body; $%s finds the parallel scenarios by that call: make it there", t.Name(), scenarioPhaseEnv)
	}
}

// scanTests returns the names of the top-level tests in the _test.go files
// of dir, and those of them whose body calls parallelScenario,
// parallelScenarioTaking or parallelScenarioWaiting.
func scanTests(dir string) (all []string, parallel map[string]bool, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, nil, err
	}
	parallel = map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, fmt.Errorf("scan the tests: %w", err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			all = append(all, fn.Name.Name)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && (id.Name == "parallelScenario" || id.Name == "parallelScenarioTaking" || id.Name == "parallelScenarioWaiting") {
						parallel[fn.Name.Name] = true
					}
				}
				return true
			})
		}
	}
	slices.Sort(all)
	return all, parallel, nil
}

// The scan finds the parallel scenarios that parallelScenario's callers
// are, and the tests that run alone.
func TestScanFindsParallelScenarios(t *testing.T) {
	t.Parallel()
	all, par, err := scanTests(".")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tests, %d of them parallel scenarios: %v", len(all), len(par), slices.Sorted(maps.Keys(par)))
	for _, name := range []string{"TestServeWebAddr", "TestHostPackages"} {
		if !par[name] {
			t.Errorf("%s not found as a parallel scenario (found %v)", name, par)
		}
	}
	for _, name := range []string{"TestVIPSoak", "TestFileSizes", "TestScanFindsParallelScenarios"} {
		if !slices.Contains(all, name) || par[name] {
			t.Errorf("%s: in the tests %v, parallel %v; want a test that runs alone", name, slices.Contains(all, name), par[name])
		}
	}
	for name := range par {
		if !slices.Contains(all, name) {
			t.Errorf("parallel scenario %s is not among the tests", name)
		}
	}
}
