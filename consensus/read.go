package consensus

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ReadBarrier returns once this host has applied every write acknowledged
// anywhere in the cluster before the call (a read index from the leader).
// The time it waited is observed in teapot_lb_read_barrier_seconds.
func (n *Node) ReadBarrier(ctx context.Context) error {
	start := time.Now()
	defer func() { n.metrics.readBarrier.Observe(time.Since(start).Seconds()) }()
	var last error
	for {
		idx, local, err := n.readIndex(ctx)
		if err == nil && local {
			// The leader's own index: the last command it had applied,
			// so there is nothing to wait for (and no log to read).
			return nil
		}
		if err == nil {
			return n.waitApplied(ctx, idx)
		}
		if !retryable(err) {
			return err
		}
		last = err
		if werr := n.waitRetry(ctx, last); werr != nil {
			return werr
		}
	}
}

// readIndex returns the leader's read index; local when this host is
// the leader that took it from its own applied state.
func (n *Node) readIndex(ctx context.Context) (idx uint64, local bool, err error) {
	if n.r().State() == raft.Leader {
		idx, err := n.leaderReadIndex(ctx)
		return idx, true, err
	}
	_, addr := n.leaderAPI()
	if addr == "" {
		return 0, false, errRetry
	}
	c, err := n.peers.cluster(addr)
	if err != nil {
		return 0, false, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.ReadIndex(rctx, &pb.ReadIndexRequest{})
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			return 0, false, errRetry
		}
		return 0, false, err
	}
	return resp.GetIndex(), false, nil
}

// leaderReadIndex confirms leadership with a quorum and returns the index
// of the last command this host has applied. That covers every
// acknowledged write: the leader answers a write only once its own state
// machine has applied it (commitBatch waits for the apply future), so a
// write acknowledged before the read began is applied here before the
// index is taken. An entry committed but not yet applied belongs to a
// write still in flight, which a read may or may not see; a read does not
// wait for its apply, so an admin read never queues behind the apply of
// a tenant's large write (TestReadsDoNotWaitForAnApplyInFlight).
// Writes acknowledged by a leader of an earlier term were applied there,
// not necessarily here, so the first read of each term waits for a
// barrier: an entry of this term, committed and applied, after every
// entry of earlier terms.
//
// The index is taken before VerifyLeader, as in the read-index protocol:
// a quorum confirming this leader afterwards means no other leader
// acknowledged a write in between.
//
// A leader that is the only voter of its configuration is its own
// quorum: Raft's VerifyLeader would answer at once without asking anyone,
// but only once Raft's leader loop takes the request, and that loop
// writes and syncs every entry of this host's log. So a read there would
// wait for the log write of whatever a tenant's stream is writing
// (TestLoneLeaderReadsDoNotWaitForTheLog); it is answered here instead.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	r := n.r()
	if term := r.CurrentTerm(); n.readTerm.Load() != term {
		if err := r.Barrier(10 * time.Second).Error(); err != nil {
			return 0, errRetry
		}
		n.readTerm.Store(term)
	}
	idx := n.fsm.applied.Load()
	if n.soleVoter(r) {
		if r.State() != raft.Leader || r.CurrentTerm() != n.readTerm.Load() {
			return 0, errRetry
		}
		return idx, nil
	}
	// Raft's future takes no deadline: the caller's ends the wait.
	verified := make(chan error, 1)
	go func() { verified <- r.VerifyLeader().Error() }()
	select {
	case err := <-verified:
		if err != nil {
			return 0, errRetry
		}
	case <-ctx.Done():
		return 0, fmt.Errorf("confirming leadership for a read: %w", ErrNoLeader)
	}
	return idx, nil
}

// soleVoter reports whether this host is the only voter of r's latest
// configuration (the one Raft counts its quorum in, committed or not).
func (n *Node) soleVoter(r *raft.Raft) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters := 0
	self := false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			self = self || string(s.ID) == n.cfg.NodeID
		}
	}
	return voters == 1 && self
}

// waitApplied returns once this host's state holds every command up to
// idx: raft has handed the entries to the FSM and the FSM has applied the
// last command among them.
func (n *Node) waitApplied(ctx context.Context, idx uint64) error {
	wait := func(done func() bool) error {
		for !done() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("catching up to index %d (at %d): %w", idx, n.fsm.applied.Load(), ErrNoLeader)
			case <-n.stop:
				return ErrClosed
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}
	if err := wait(func() bool { return n.r().AppliedIndex() >= idx }); err != nil {
		return err
	}
	cmd := n.lastCommandAtOrBefore(idx)
	return wait(func() bool { return n.fsm.applied.Load() >= cmd })
}

// lastCommandAtOrBefore returns the index of the last command entry at or
// before idx (entries in between are Raft's own: no-ops, configuration),
// or 0 when the log no longer holds it: it is then part of the snapshot
// the state was built from.
func (n *Node) lastCommandAtOrBefore(idx uint64) uint64 {
	first, err := n.store.FirstIndex()
	if err != nil {
		return 0
	}
	for i := idx; i >= first && i > 0 && idx-i < 4096; i-- {
		var l raft.Log
		if err := n.store.GetLog(i, &l); err != nil {
			return 0
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return 0
}

// Get returns one object, linearizably.
func (n *Node) Get(ctx context.Context, ref *pb.ObjectRef) (*pb.Object, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	o := n.fsm.st.get(ref.GetKind(), keyOf(ref))
	if o == nil {
		return nil, fmt.Errorf("%s %w", api.RefString(ref), api.ErrNotFound)
	}
	return o, nil
}

// List returns a kind's objects (of one tenant, if given), linearizably.
func (n *Node) List(ctx context.Context, kind, tenant string) ([]*pb.Object, uint64, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, 0, err
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.st.list(kind, tenant), n.fsm.st.revision, nil
}

// Objects returns this host's current state without asking the leader, for
// subscribers that then follow the watch.
func (n *Node) Objects() ([]*pb.Object, uint64) { return n.fsm.current() }

// LocalList returns this host's objects of one kind, sorted, without
// asking the leader, and the revision they are at. The slice is shared:
// callers must not modify it.
func (n *Node) LocalList(kind string) ([]*pb.Object, uint64) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.st.list(kind, ""), n.fsm.st.revision
}

// Revision returns the revision this host has applied.
func (n *Node) Revision() uint64 {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.st.revision
}

// Watch returns a watcher that yields every committed revision after from,
// once and in order; from 0 starts with a Reset event holding the current
// state. Objects in events are shared and must not be modified.
func (n *Node) Watch(from uint64) *Watcher { return n.fsm.hub.watch(from) }
