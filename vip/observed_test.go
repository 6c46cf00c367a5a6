package vip

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
)

// TestReadinessFollowsTheObservedState: the manager takes the data
// plane's readiness from the observed-state watch alone: nothing before
// the data plane reports, the whole readiness at first, then each change
// as a delta naming its load balancers (removed ones forgotten), so that
// the loop looks at their VIPs alone.
func TestReadinessFollowsTheObservedState(t *testing.T) {
	t.Parallel()
	m, _ := loopTestManager(t)
	plane := observe.NewPlane()
	m.cfg.Observed = plane
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.followObserved(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	took := func(what string, want map[string]string, all bool, delta ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a loaded 2-core machine
		for {
			m.mu.Lock()
			ready, have, readyAll, got := maps.Clone(m.ready), m.haveReady, m.readyAll, maps.Clone(m.readyDelta)
			m.readyAll, m.readyDelta = false, nil // as the loop takes them
			m.mu.Unlock()
			wantDelta := map[string]bool{}
			for _, lb := range delta {
				wantDelta[lb] = true
			}
			if have && maps.Equal(ready, want) && readyAll == all && (all || maps.Equal(got, wantDelta)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: readiness %q (reported %v, whole %v, delta %v); want %q (whole %v, delta %v)", what, ready, have, readyAll, got, want, all, delta)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	m.mu.Lock()
	if m.haveReady {
		t.Error("readiness taken before the data plane reported")
	}
	m.mu.Unlock()
	plane.Set(map[string]observe.LBState{"t/a": {}, "t/b": {Ready: "listeners[0]: cannot listen"}}, nil)
	took("first report", map[string]string{"t/a": "", "t/b": "listeners[0]: cannot listen"}, true)
	plane.Set(map[string]observe.LBState{"t/b": {}}, nil)
	took("t/b opened its listener", map[string]string{"t/a": "", "t/b": ""}, false, "t/b")
	plane.Set(map[string]observe.LBState{"t/c": {Ready: observe.NoHealthyMember}}, []string{"t/a"})
	took("t/c created, t/a gone", map[string]string{"t/b": "", "t/c": observe.NoHealthyMember}, false, "t/a", "t/c")
}
