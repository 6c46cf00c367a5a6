package vip

import (
	"iter"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// UpdateRevision passes on one committed revision once the data plane
// has applied it: changes are the revision's objects before and after
// (nil when created, nil when deleted) and state returns the whole
// committed state and its revision.
//
// When the revision can change the VIPs (ChangesMatter) and
// UpdateLoadBalancers cannot take it (a VIP pool or a host changed),
// the whole state goes to Update. Either way the manager acts on
// revision from then on (NoteRevision). The data plane's readiness does
// not come this way: Run follows Config.Observed.
func (m *Manager) UpdateRevision(changes iter.Seq2[*pb.Object, *pb.Object], revision uint64, state func() ([]*pb.Object, uint64)) {
	if m == nil {
		return
	}
	if ChangesMatter(changes) && !m.UpdateLoadBalancers(changes, revision) {
		objs, rev := state()
		m.Update(objs, rev)
		return
	}
	m.NoteRevision(revision)
}

// NoteRevision tells the manager that the committed state reached
// revision with no change it reads (certificate storage, credentials):
// its heartbeats say it acts on that revision, and a host that just
// started compares it with its peers' to know that it has caught up.
func (m *Manager) NoteRevision(revision uint64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.want != nil && revision > m.revision {
		m.revision = revision
	}
}
