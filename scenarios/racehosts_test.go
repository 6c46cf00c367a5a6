package scenarios

import "testing"

// TestRaceHostsChoosesTheBuild checks which build teapotBinary would give
// a scenario: the race build only to one that called raceHosts (and its
// subtests), when the tests run with the race detector, unless
// $TEAPOT_SCENARIO_RACE says every scenario or none. It builds nothing.
func TestRaceHostsChoosesTheBuild(t *testing.T) {
	t.Setenv(raceHostsEnv, "")
	if hostRace(t) {
		t.Fatalf("%s did not call raceHosts, yet its hosts would be race-built", t.Name())
	}
	raceHosts(t)
	t.Cleanup(func() { raceHostNames.Delete(t.Name()) })
	if got := hostRace(t); got != raceEnabled {
		t.Errorf("after raceHosts, race-built hosts: %v, want %v (the tests' own build)", got, raceEnabled)
	}
	t.Run("subtest", func(t *testing.T) {
		if got := hostRace(t); got != raceEnabled {
			t.Errorf("a subtest of a raceHosts scenario: race-built hosts %v, want %v", got, raceEnabled)
		}
	})
	for env, want := range map[string]bool{"0": false, "1": raceEnabled} {
		t.Run("TEAPOT_SCENARIO_RACE="+env, func(t *testing.T) {
			t.Setenv(raceHostsEnv, env)
			if got := hostRace(t); got != want {
				t.Errorf("race-built hosts %v, want %v", got, want)
			}
		})
	}
}
