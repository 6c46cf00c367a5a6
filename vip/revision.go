package vip

import (
	"iter"
	"slices"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Readiness is what the data plane tells of the load balancers it
// serves ("tenant/name"), in the form SetReady and SetReadyFor take.
type Readiness interface {
	// Readiness returns the readiness of every load balancer: an empty
	// reason when ready, else why not.
	Readiness() map[string]string
	// ReadinessOf is Readiness for lbs alone; gone lists those of lbs
	// that no longer exist.
	ReadinessOf(lbs []string) (ready map[string]string, gone []string)
}

// UpdateRevision passes on one committed revision once the data plane
// has applied it. changes are the revision's objects before and after
// (nil when created, nil when deleted), touched the load balancers the
// data plane touched, state returns the whole committed state and its
// revision, and ready tells the data plane's readiness (nil: none yet).
//
// When the revision can change the VIPs (ChangesMatter) and
// UpdateLoadBalancers cannot take it (a VIP pool or a host changed),
// the whole state goes to Update and the whole readiness to SetReady.
// Otherwise the readiness of the load balancers changed or touched goes
// to SetReadyFor: their VIPs alone are looked at again. Either way the
// manager acts on revision from then on (NoteRevision).
func (m *Manager) UpdateRevision(changes iter.Seq2[*pb.Object, *pb.Object], revision uint64, touched []string,
	state func() ([]*pb.Object, uint64), ready Readiness) {
	if m == nil {
		return
	}
	if ChangesMatter(changes) && !m.UpdateLoadBalancers(changes, revision) {
		objs, rev := state()
		m.Update(objs, rev)
		if ready != nil {
			m.SetReady(ready.Readiness())
		}
		return
	}
	if lbs := changedLoadBalancers(changes, touched); len(lbs) > 0 && ready != nil {
		m.SetReadyFor(ready.ReadinessOf(lbs))
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

// changedLoadBalancers returns the load balancers ("tenant/name") that
// are in touched or that changes wrote, sorted.
func changedLoadBalancers(changes iter.Seq2[*pb.Object, *pb.Object], touched []string) []string {
	out := slices.Clone(touched)
	for prev, next := range changes {
		lb := next.GetLoadBalancer()
		if lb == nil {
			lb = prev.GetLoadBalancer()
		}
		if lb != nil {
			out = append(out, lb.GetTenant()+"/"+lb.GetName())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
