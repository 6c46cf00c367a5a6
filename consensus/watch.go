package consensus

import (
	"context"
	"iter"
	"slices"
	"sync"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ChangeType says what happened to an object.
type ChangeType int

// Change types.
const (
	ChangePut ChangeType = iota + 1
	ChangeDelete
)

func (t ChangeType) String() string {
	if t == ChangeDelete {
		return "delete"
	}
	return "put"
}

// Change is one object written or deleted. Objects are shared and must not
// be modified.
type Change struct {
	Type     ChangeType
	Ref      *pb.ObjectRef
	Object   *pb.Object // nil for a delete
	Previous *pb.Object // nil for a create
}

// Event is one committed revision. A Reset event instead carries every
// object at Revision: the watcher fell too far behind (or the host restored
// a snapshot) and must take it as the whole state.
type Event struct {
	Revision uint64
	Changes  []Change
	Reset    bool
	Objects  []*pb.Object
	// Applied is when this host applied the revision (this host's clock;
	// zero in a Reset).
	Applied time.Time
}

// hub keeps the latest events in a ring so that every watcher sees each
// revision exactly once, in order, without a buffer per watcher.
type hub struct {
	mu      sync.Mutex
	ring    []Event
	first   uint64 // revision of the oldest event held (0: none)
	last    uint64 // latest revision published
	notify  chan struct{}
	current func() ([]*pb.Object, uint64)
}

func newHub(size int, current func() ([]*pb.Object, uint64)) *hub {
	return &hub{ring: make([]Event, size), notify: make(chan struct{}), current: current}
}

func (h *hub) publish(ev Event) {
	// The clock stamps the event, never the state.
	ev.Applied = time.Now()
	h.mu.Lock()
	if h.first == 0 || ev.Revision != h.last+1 {
		h.first = ev.Revision
	} else if ev.Revision-h.first >= uint64(len(h.ring)) {
		h.first++
	}
	h.ring[ev.Revision%uint64(len(h.ring))] = ev
	h.last = ev.Revision
	close(h.notify)
	h.notify = make(chan struct{})
	h.mu.Unlock()
}

// reset forgets the history: the state was replaced at revision rev.
func (h *hub) reset(rev uint64) {
	h.mu.Lock()
	h.first = 0
	h.last = rev
	close(h.notify)
	h.notify = make(chan struct{})
	h.mu.Unlock()
}

// Watcher reads events from one revision on.
type Watcher struct {
	h    *hub
	next uint64
	// kinds, when set, are the only kinds whose changes wake the watcher.
	kinds   map[string]bool
	skipped uint64
}

// Only makes Next pass over the revisions that change no object of one of
// kinds (a Reset is always returned) and returns w. A reader that takes
// the whole state at each event (a data plane, say) thus never wakes for
// writes it does not read, such as certificate storage locks.
func (w *Watcher) Only(kinds ...string) *Watcher {
	w.kinds = make(map[string]bool, len(kinds))
	for _, k := range kinds {
		w.kinds[k] = true
	}
	return w
}

// Skipped returns how many revisions Next passed over because of Only.
func (w *Watcher) Skipped() uint64 { return w.skipped }

// wants reports whether ev changes an object of a kind w follows.
func (w *Watcher) wants(ev Event) bool {
	if w.kinds == nil || ev.Reset {
		return true
	}
	for _, c := range ev.Changes {
		if w.kinds[c.Ref.GetKind()] {
			return true
		}
	}
	return false
}

// Touches reports whether the event may change an object of one of kinds:
// a Reset always may.
func (ev Event) Touches(kinds ...string) bool {
	if ev.Reset {
		return true
	}
	for _, c := range ev.Changes {
		if slices.Contains(kinds, c.Ref.GetKind()) {
			return true
		}
	}
	return false
}

// Writes yields each change of the revision as the object's reference and
// the object as written (nil for a delete).
func (ev Event) Writes() iter.Seq2[*pb.ObjectRef, *pb.Object] {
	return func(yield func(*pb.ObjectRef, *pb.Object) bool) {
		for _, c := range ev.Changes {
			if !yield(c.Ref, c.Object) {
				return
			}
		}
	}
}

// Transitions yields each change of the revision as the object before and
// after it (nil when created, nil when deleted).
func (ev Event) Transitions() iter.Seq2[*pb.Object, *pb.Object] {
	return func(yield func(*pb.Object, *pb.Object) bool) {
		for _, c := range ev.Changes {
			if !yield(c.Previous, c.Object) {
				return
			}
		}
	}
}

// watch returns a watcher whose first event is revision from; from 0 means
// "a Reset with the current state, then what follows".
func (h *hub) watch(from uint64) *Watcher {
	return &Watcher{h: h, next: from}
}

// Next blocks until the next event or ctx ends.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	for {
		w.h.mu.Lock()
		last, first := w.h.last, w.h.first
		switch {
		case w.next == 0 || w.next > last+1 || (w.next <= last && (first == 0 || w.next < first)):
			w.h.mu.Unlock()
			objs, rev := w.h.current()
			w.next = rev + 1
			return Event{Revision: rev, Reset: true, Objects: objs}, nil
		case w.next <= last:
			ev := w.h.ring[w.next%uint64(len(w.h.ring))]
			w.next++
			if !w.wants(ev) {
				w.skipped++
				w.h.mu.Unlock()
				continue
			}
			w.h.mu.Unlock()
			return ev, nil
		}
		ch := w.h.notify
		w.h.mu.Unlock()
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-ch:
		}
	}
}
