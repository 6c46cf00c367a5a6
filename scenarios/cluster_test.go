package scenarios

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// leaderKills is how many times the scenario kills the leader.
const leaderKills = 3

func TestClusterFormsAndSurvivesLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a three-node cluster")
	}
	raceHosts(t) // leader kills under writes
	c := newCluster(t)
	began := time.Now()
	c.start3()
	t.Logf("three healthy voters after %s", time.Since(began).Round(time.Millisecond))

	leader := c.waitLeader()
	var follower *node
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	var acked []string
	for i := range 5 {
		name := fmt.Sprintf("t-initial-%d", i)
		if _, err := c.cli(follower, "tenant", "create", name); err != nil {
			t.Fatalf("write through follower %s: %v", follower.id, err)
		}
		acked = append(acked, name)
	}
	c.requireEveryNodeHas(acked)

	for round := 1; round <= leaderKills; round++ {
		leader := c.waitLeader()
		var survivors []*node
		for _, n := range c.nodes {
			if n != leader {
				survivors = append(survivors, n)
			}
		}
		w := startWriter(c, round, survivors)
		w.waitAcks(t, 1, time.Time{})

		c.kill(leader)
		killed := time.Now()
		t.Logf("round %d: killed leader %s", round, leader.id)
		next := c.waitLeader()
		if next == leader {
			t.Fatalf("round %d: the killed node %s still leads", round, leader.id)
		}
		w.waitAcks(t, 3, killed)
		t.Logf("round %d: %s leads, first write issued after the kill acknowledged after %s",
			round, next.id, w.firstAckAfter(killed).Sub(killed).Round(time.Millisecond))

		restarted := time.Now()
		c.restart(leader)
		c.waitCaughtUp(leader, 3)
		t.Logf("round %d: %s restarted and caught up in %s", round, leader.id, time.Since(restarted).Round(time.Millisecond))
		acked = append(acked, w.stop()...)
		c.requireEveryNodeHas(acked)
	}
	t.Logf("%d writes acknowledged, all present on every node", len(acked))
}

// requireEveryNodeHas fails the test unless every node serves every name.
// Reads through a node are linearizable, so this proves each node applied
// the writes.
func (c *cluster) requireEveryNodeHas(names []string) {
	c.tb.Helper()
	for _, n := range c.nodes {
		var lacking []string
		waitFor(c.tb, startTimeout, "tenants on "+n.id, func() error {
			have, err := c.tenantNames(n)
			if err != nil {
				return err
			}
			lacking = missing(names, have)
			return nil
		})
		if len(lacking) > 0 {
			c.tb.Fatalf("%s lacks %d of %d acknowledged tenants: %v", n.id, len(lacking), len(names), lacking)
		}
	}
}

// writer creates tenants one after another through the given nodes in turn,
// each attempt under a fresh name, and records which were acknowledged.
type writer struct {
	done     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once

	mu      sync.Mutex
	acked   []string
	issueAt []time.Time // when each acknowledged write was sent
	ackAt   []time.Time // when it was acknowledged
	failed  int
	last    error
}

func startWriter(c *cluster, round int, through []*node) *writer {
	w := &writer{done: make(chan struct{}), quit: make(chan struct{})}
	// A failed test stops the writer before the cluster goes away.
	c.tb.Cleanup(func() { w.stop() })
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			name := fmt.Sprintf("t-round%d-%d", round, i)
			issued := time.Now()
			_, err := c.cli(through[i%len(through)], "tenant", "create", name)
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, name)
				w.issueAt = append(w.issueAt, issued)
				w.ackAt = append(w.ackAt, time.Now())
			} else {
				w.failed++
				w.last = err
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(pollInterval)
			}
		}
	}()
	return w
}

// waitAcks waits until n writes issued after since were acknowledged.
func (w *writer) waitAcks(tb testing.TB, n int, since time.Time) {
	tb.Helper()
	waitFor(tb, startTimeout, fmt.Sprintf("%d acknowledged writes", n), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		got := 0
		for _, at := range w.issueAt {
			if at.After(since) {
				got++
			}
		}
		if got >= n {
			return nil
		}
		return fmt.Errorf("%d acknowledged, %d failed, last error: %v", got, w.failed, w.last)
	})
}

// firstAckAfter returns when the first write issued after t was acknowledged.
func (w *writer) firstAckAfter(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, at := range w.issueAt {
		if at.After(t) {
			return w.ackAt[i]
		}
	}
	return time.Time{}
}

// stop ends the writer and returns the acknowledged names.
func (w *writer) stop() []string {
	w.quitOnce.Do(func() { close(w.quit) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}
