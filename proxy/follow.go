package proxy

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Kinds are the kinds of objects the data plane reads; a revision that
// changes none of them leaves it as it is.
var Kinds = []string{api.KindLoadBalancer, api.KindTenant, api.KindVIPPool, api.KindNode}

// Change is one object's change in a Revision: its reference, the object
// as written (nil for a delete) and as it was (nil for a create).
type Change struct {
	Ref      *pb.ObjectRef
	Object   *pb.Object
	Previous *pb.Object
}

// Revision is one committed revision of the desired state, as a Feed
// follows it. A Reset carries the whole state at Revision in Objects
// instead of Changes. Applied is when this host applied it (zero:
// unknown).
type Revision struct {
	Revision uint64
	Reset    bool
	Objects  []*pb.Object
	Changes  []Change
	Applied  time.Time
}

// Watcher yields the committed revisions in order, each once, starting
// with a Reset; proxy does not import the store, whose watch the caller
// adapts.
type Watcher interface {
	Next(ctx context.Context) (Revision, error)
}

// Touches reports whether r may change an object of one of kinds: a Reset
// always may.
func (r Revision) Touches(kinds ...string) bool {
	if r.Reset {
		return true
	}
	for _, c := range r.Changes {
		if slices.Contains(kinds, c.Ref.GetKind()) {
			return true
		}
	}
	return false
}

// Writes yields each change as the object's reference and the object as
// written (nil for a delete).
func (r Revision) Writes() iter.Seq2[*pb.ObjectRef, *pb.Object] {
	return func(yield func(*pb.ObjectRef, *pb.Object) bool) {
		for _, c := range r.Changes {
			if !yield(c.Ref, c.Object) {
				return
			}
		}
	}
}

// Transitions yields each change as the object before and after it (nil
// when created, nil when deleted).
func (r Revision) Transitions() iter.Seq2[*pb.Object, *pb.Object] {
	return func(yield func(*pb.Object, *pb.Object) bool) {
		for _, c := range r.Changes {
			if !yield(c.Previous, c.Object) {
				return
			}
		}
	}
}

// ErrNotFollowing is Alive's error once Follow has returned.
var ErrNotFollowing = errors.New("the data plane no longer follows the state")

// appliedWatch is the revision a Feed applied last, with a channel closed
// at each advance.
type appliedWatch struct {
	mu       sync.Mutex
	revision uint64
	advanced chan struct{}
	done     chan struct{} // closed when Follow returns
}

// Follow hands each revision of w to the proxy, in order, until ctx ends
// or w fails: a Reset through Reset, any other revision that changes one
// of Kinds through Apply; a revision that changes none of them is passed
// over. Then it calls then with the revision and the load balancers the
// proxy touched (none for a revision passed over), and the revision
// counts as applied (WaitApplied). A revision the proxy refuses is logged
// and skipped. Alive fails once Follow has returned.
func (f *Feed) Follow(ctx context.Context, w Watcher, then func(Revision, []string)) {
	defer close(f.applied.done)
	for {
		r, err := w.Next(ctx)
		if err != nil {
			return
		}
		var touched []string
		switch {
		case !r.Touches(Kinds...):
		case r.Reset:
			err = f.Reset(r.Objects, r.Revision)
		default:
			touched, err = f.Apply(r.Writes(), r.Revision, r.Applied)
		}
		if err != nil {
			f.p.log.Error("update data plane", "revision", r.Revision, "err", err)
			continue
		}
		if then != nil {
			then(r, touched)
		}
		f.setApplied(r.Revision)
	}
}

func (f *Feed) setApplied(revision uint64) {
	a := &f.applied
	a.mu.Lock()
	a.revision = revision
	close(a.advanced)
	a.advanced = make(chan struct{})
	a.mu.Unlock()
}

// Applied returns the revision Follow applied last (0: none yet).
func (f *Feed) Applied() uint64 {
	f.applied.mu.Lock()
	defer f.applied.mu.Unlock()
	return f.applied.revision
}

// WaitApplied returns once Follow has applied revision (or a later one),
// with ctx's error when ctx ended, or ErrNotFollowing when Follow returned
// first.
func (f *Feed) WaitApplied(ctx context.Context, revision uint64) error {
	a := &f.applied
	for {
		a.mu.Lock()
		done, advanced := a.revision >= revision, a.advanced
		a.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-advanced:
		case <-a.done:
			// Follow ends when its context does, which is often this one.
			if err := ctx.Err(); err != nil {
				return err
			}
			return ErrNotFollowing
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Alive is the watchdog's test of the feed: it fails once Follow has
// returned.
func (f *Feed) Alive() error {
	select {
	case <-f.applied.done:
		return ErrNotFollowing
	default:
		return nil
	}
}
