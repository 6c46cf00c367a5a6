package consensus

import (
	"sync/atomic"
	"testing"
	"time"
)

// A leader's state is current while it leads. Between leaving the leader
// state and Raft setting its last contact, a host that was never a
// follower has no last contact: LeaderContact then reports its last
// moment as leader, not the zero time.
func TestLeaderContactWhileSteppingDown(t *testing.T) {
	var led atomic.Int64
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	never := func() time.Time { return time.Time{} }
	if got := leaderContact(true, never, &led, t0); !got.Equal(t0) {
		t.Fatalf("while leading: %v, want now (%v)", got, t0)
	}
	if got := leaderContact(false, never, &led, t0.Add(time.Millisecond)); !got.Equal(t0) {
		t.Errorf("stepping down, no last contact yet: %v, want the last moment as leader (%v)", got, t0)
	}
	later := t0.Add(time.Second)
	if got := leaderContact(false, func() time.Time { return later }, &led, later); !got.Equal(later) {
		t.Errorf("heard from a leader since: %v, want that contact (%v)", got, later)
	}
	var fresh atomic.Int64
	if got := leaderContact(false, never, &fresh, t0); !got.IsZero() {
		t.Errorf("never led nor heard a leader: %v, want zero", got)
	}
}

// A leader that loses its majority steps down with a recent contact, as
// real Raft hosts run.
func TestLeaderContactAfterSteppingDown(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	leader := leaderOf(t, hosts)
	stopped := time.Now()
	for _, h := range hosts {
		if h != leader {
			h.stop()
		}
	}
	waitFor(t, "the leader stepping down", func() bool { return !leader.node.IsLeader() })
	lc := leader.node.LeaderContact()
	if lc.Before(stopped) || time.Since(lc) > 10*time.Second {
		t.Fatalf("after stepping down: contact at %v (%v old), want after the others stopped (%v ago)", lc, time.Since(lc), time.Since(stopped))
	}
}
