package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// commandVersion is the version of pb.Command this build writes and applies.
const commandVersion = 1

// snapshotMagic starts every snapshot file, followed by the encoded pb.State.
var snapshotMagic = []byte("teapot-lb state v1\n")

// applyResult is what Apply returns for one log entry.
type applyResult struct {
	revision uint64
	errs     []error // one per transaction; nil where it committed
}

// fsm applies committed commands to the state. It only delegates: decoding
// here, the apply-time checks in applyTxn, storage in state. It runs no
// validation rule: the proposer did (checkTxn), so a release that changes a
// rule cannot make hosts disagree about an entry already in the log.
type fsm struct {
	mu  sync.RWMutex
	st  *state
	hub *hub
	log *slog.Logger
	// applied is the index of the last command applied to st. Raft's own
	// AppliedIndex counts entries handed to the FSM, not applied by it.
	applied atomic.Uint64
	// beforeApply, when set (tests only), runs at the start of each
	// command's Apply, before the state is locked: a test holds an entry
	// there, committed and not yet applied.
	beforeApply atomic.Pointer[func(*raft.Log)]
}

var _ raft.FSM = (*fsm)(nil)

func newFSM(log *slog.Logger) *fsm {
	f := &fsm{st: newState(), log: log}
	f.hub = newHub(1024, f.current)
	return f
}

// current returns every object and the revision they are at.
func (f *fsm) current() ([]*pb.Object, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.all(), f.st.revision
}

// Apply applies one entry. An entry this build cannot decode is a loud
// failure: applying only part of the log would make this host diverge.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd pb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		f.log.Error("log entry cannot be decoded; stopping before applying it", "index", l.Index, "err", err)
		panic(fmt.Sprintf("consensus: log entry %d cannot be decoded: %v", l.Index, err))
	}
	if cmd.GetVersion() != commandVersion {
		f.log.Error("log entry has a command version this build does not know; stopping before applying it: upgrade this host",
			"index", l.Index, "version", cmd.GetVersion(), "known", commandVersion)
		panic(fmt.Sprintf("consensus: log entry %d has command version %d but this build applies version %d; upgrade this host",
			l.Index, cmd.GetVersion(), commandVersion))
	}
	if hold := f.beforeApply.Load(); hold != nil {
		(*hold)(l)
	}
	res := &applyResult{errs: make([]error, len(cmd.GetTxns()))}
	var changes []Change

	now := cmd.GetStamped().AsTime()
	f.mu.Lock()
	rev := f.st.revision + 1
	for i, txn := range cmd.GetTxns() {
		ov := newOverlay(f.st)
		if err := applyTxn(ov, txn, now); err != nil {
			res.errs[i] = err
			continue
		}
		changes = append(changes, f.commit(ov, rev)...)
	}
	if len(changes) > 0 {
		f.st.revision = rev
	}
	res.revision = f.st.revision
	f.applied.Store(l.Index)
	f.mu.Unlock()

	if len(changes) > 0 {
		f.hub.publish(Event{Revision: rev, Changes: changes})
	}
	return res
}

// commit writes an overlay's final values into the state.
func (f *fsm) commit(ov *overlay, rev uint64) []Change {
	seen := make(map[string]bool, len(ov.order))
	var out []Change
	// A kind's sorted list is kept by copying it at each put; a commit of
	// many objects of a kind drops it instead, and the next list sorts it
	// once.
	for kind, ch := range ov.changes {
		if len(ch) > manyChanges {
			f.st.dropSorted(kind)
		}
	}
	for _, ref := range ov.order {
		k := ref.Kind + "\x00" + keyOf(ref)
		if seen[k] {
			continue
		}
		seen[k] = true
		obj, _ := ov.lookup(ref.Kind, keyOf(ref))
		prev := f.st.get(ref.Kind, keyOf(ref))
		if obj == nil {
			f.st.remove(ref)
			out = append(out, Change{Type: ChangeDelete, Ref: ref, Previous: prev})
			continue
		}
		if m := api.MetaOf(obj); m != nil {
			m.Revision = rev
		}
		f.st.put(obj)
		out = append(out, Change{Type: ChangePut, Ref: api.RefOf(obj), Object: obj, Previous: prev})
	}
	return out
}

// Snapshot captures the state. Stored objects are never changed in place,
// so the copy of the maps made here can be encoded after the lock is gone.
// Raft calls it between two applies, which wait meanwhile, so it only
// collects the objects: Persist sorts the kinds whose sorted list the
// state does not keep (a write of many objects drops it), which takes
// 179 ms at 100,000 load balancers.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	snap := &fsmSnapshot{lists: make(map[string][]*pb.Object, len(stateKinds))}
	f.mu.RLock()
	snap.revision = f.st.revision
	snap.applied = f.applied.Load()
	for _, kind := range stateKinds {
		objs, sorted := f.st.unsortedList(kind)
		snap.lists[kind] = objs
		if !sorted {
			snap.unsorted = append(snap.unsorted, kind)
		}
	}
	f.mu.RUnlock()
	return snap, nil
}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	if !bytes.HasPrefix(data, snapshotMagic) {
		return errors.New("restore snapshot: not a teapot-lb state snapshot")
	}
	var p pb.State
	if err := proto.Unmarshal(data[len(snapshotMagic):], &p); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	st := stateFromProto(&p)
	f.mu.Lock()
	f.st = st
	f.applied.Store(p.GetAppliedIndex())
	f.mu.Unlock()
	f.hub.reset(st.revision)
	f.log.Info("restored state from snapshot", "revision", st.revision)
	return nil
}

// fsmSnapshot is the state's objects at a revision, each kind sorted or
// (unsorted) to be sorted by Persist.
type fsmSnapshot struct {
	revision, applied uint64
	lists             map[string][]*pb.Object
	unsorted          []string
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	for _, kind := range s.unsorted {
		sortObjects(s.lists[kind]) // the snapshot's own slice
	}
	s.unsorted = nil
	p := stateProto(s.revision, s.lists)
	p.AppliedIndex = s.applied
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err == nil {
		_, err = sink.Write(append(append([]byte{}, snapshotMagic...), data...))
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
