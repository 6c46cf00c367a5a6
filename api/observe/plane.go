package observe

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Plane is the data plane's observed state on one host, revisioned: for
// each load balancer it serves ("tenant/name"), whether this host can
// serve it and the health of its members. The data plane writes it (Set);
// the VIP manager and the tenant streams read it through a Watch, each
// from its own cursor, as they read the committed state through the
// store's watch. It is safe for concurrent use.
//
// Every Set that changes something is one revision. A reader is never
// handed a change twice and never misses one: Next returns, for the
// revisions after its cursor, the current state of every load balancer
// they changed (several revisions come as one when the reader is slower
// than the writer), and a Reset with everything when the reader fell out
// of the history kept (PlaneHistory revisions).
type Plane struct {
	mu     sync.Mutex
	rev    uint64
	lbs    map[string]LBState
	ring   []planeEntry
	first  uint64 // the oldest revision the ring holds (0: none)
	notify chan struct{}
}

// LBState is what this host's data plane sees of one load balancer.
// Members is shared and must not be modified.
type LBState struct {
	// Ready is "" when this host can serve the load balancer, else why
	// not (its problems, or NoHealthyMember, Recovering).
	Ready string
	// Members are its members' health, sorted by pool and address.
	Members []Member
}

// Member is one member's health as this host sees it.
type Member struct {
	Pool    string
	Addr    netip.AddrPort
	Healthy bool
}

// Equal reports whether s and o tell the same.
func (s LBState) Equal(o LBState) bool {
	return s.Ready == o.Ready && slices.Equal(s.Members, o.Members)
}

// PlaneHistory is how many revisions a Plane remembers the names of; a
// reader further behind gets a Reset.
const PlaneHistory = 1024

// planeEntry is one revision: the load balancers it changed or removed.
type planeEntry struct {
	rev   uint64
	names []string
}

// NewPlane returns an empty Plane at revision 0: nothing reported yet.
func NewPlane() *Plane {
	return &Plane{lbs: map[string]LBState{}, ring: make([]planeEntry, PlaneHistory), notify: make(chan struct{})}
}

// Set records the state of the load balancers in lbs and forgets those in
// gone. Those whose state is what it was are left out; when nothing is
// left the revision stays as it is, except for the first Set, which makes
// the plane reported (revision 1) even when it holds nothing. It returns
// the revision.
func (p *Plane) Set(lbs map[string]LBState, gone []string) uint64 {
	var names []string
	p.mu.Lock()
	defer p.mu.Unlock()
	for lb, s := range lbs {
		if old, ok := p.lbs[lb]; ok && old.Equal(s) {
			continue
		}
		p.lbs[lb] = s
		names = append(names, lb)
	}
	for _, lb := range gone {
		if _, ok := p.lbs[lb]; ok {
			delete(p.lbs, lb)
			names = append(names, lb)
		}
	}
	if len(names) == 0 && p.rev > 0 {
		return p.rev
	}
	p.rev++
	if p.first == 0 {
		p.first = p.rev
	} else if p.rev-p.first >= uint64(len(p.ring)) {
		p.first++
	}
	p.ring[p.rev%uint64(len(p.ring))] = planeEntry{rev: p.rev, names: names}
	close(p.notify)
	p.notify = make(chan struct{})
	return p.rev
}

// Get returns the current state of lb.
func (p *Plane) Get(lb string) (LBState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.lbs[lb]
	return s, ok
}

// Revision returns the latest revision (0: nothing reported yet).
func (p *Plane) Revision() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rev
}

// PlaneChange is what a PlaneWatcher's Next returns: the state at
// Revision of the load balancers changed after the reader's cursor (LBs)
// and of those removed (Gone), or, in a Reset, of every load balancer.
type PlaneChange struct {
	Revision uint64
	Reset    bool
	LBs      map[string]LBState
	Gone     []string
}

// PlaneWatcher reads a Plane from a cursor on; one goroutine uses it.
type PlaneWatcher struct {
	p      *Plane
	seen   uint64 // the revision the reader has (0: none)
	prefix string
}

// Watch returns a watcher whose reader has revision seen: its first Next
// returns what changed after it. Seen 0 means the reader has nothing: its
// first Next is a Reset, once the plane was reported.
func (p *Plane) Watch(seen uint64) *PlaneWatcher { return &PlaneWatcher{p: p, seen: seen} }

// Only makes Next pass over the revisions that change no load balancer
// whose name starts with prefix ("tenant/") and leave the others out; it
// returns w.
func (w *PlaneWatcher) Only(prefix string) *PlaneWatcher {
	w.prefix = prefix
	return w
}

// Next blocks until a revision after the cursor changes a load balancer
// the watcher follows, or ctx ends, and moves the cursor to the latest
// revision.
func (w *PlaneWatcher) Next(ctx context.Context) (PlaneChange, error) {
	p := w.p
	for {
		p.mu.Lock()
		if p.rev > w.seen {
			ch, ok := w.take()
			p.mu.Unlock()
			if ok {
				return ch, nil
			}
			continue
		}
		notify := p.notify
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return PlaneChange{}, ctx.Err()
		case <-notify:
		}
	}
}

// take builds the change from the cursor to the latest revision (under
// p.mu) and moves the cursor; it reports false when nothing the watcher
// follows changed.
func (w *PlaneWatcher) take() (PlaneChange, bool) {
	p := w.p
	ch := PlaneChange{Revision: p.rev}
	if w.seen == 0 || p.first == 0 || w.seen+1 < p.first {
		ch.Reset = true
		ch.LBs = make(map[string]LBState, len(p.lbs))
		for lb, s := range p.lbs {
			if strings.HasPrefix(lb, w.prefix) {
				ch.LBs[lb] = s
			}
		}
		w.seen = p.rev
		return ch, true
	}
	names := map[string]bool{}
	for r := w.seen + 1; r <= p.rev; r++ {
		for _, lb := range p.ring[r%uint64(len(p.ring))].names {
			if strings.HasPrefix(lb, w.prefix) {
				names[lb] = true
			}
		}
	}
	w.seen = p.rev
	if len(names) == 0 {
		return ch, false
	}
	ch.LBs = make(map[string]LBState, len(names))
	for _, lb := range slices.Sorted(maps.Keys(names)) {
		if s, ok := p.lbs[lb]; ok {
			ch.LBs[lb] = s
		} else {
			ch.Gone = append(ch.Gone, lb)
		}
	}
	return ch, true
}
