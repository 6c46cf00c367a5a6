package certs

import (
	"context"

	"github.com/caddyserver/certmagic"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Current is what a Store may offer besides: a barrier that returns once
// this host's state holds every write committed before the call, and that
// state. *consensus.Node satisfies it. A restarting host replays its log,
// and the states on the way hold load balancers deleted since; with a
// Current store the manager hands certmagic no name to obtain or renew
// until the barrier returned, so a deleted load balancer's names are never
// ordered again, and no status is written from a state on the way.
type Current interface {
	ReadBarrier(ctx context.Context) error
	Objects() ([]*pb.Object, uint64)
}

// awaitCurrent waits for the store's barrier, then hands Run the state it
// reached. A store without one is current from the start.
func (m *Manager) awaitCurrent() {
	cur, ok := m.cfg.Store.(Current)
	if ok {
		if err := cur.ReadBarrier(m.ctx); err != nil {
			return // closed
		}
		objs, _ := cur.Objects()
		m.Update(objs)
	}
	m.current.Store(true)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// unmanage takes names out of certmagic's cache and maintenance.
func (m *Manager) unmanage(names []string) {
	if len(names) == 0 {
		return
	}
	drop := make([]certmagic.SubjectIssuer, len(names))
	for i, h := range names {
		drop[i] = certmagic.SubjectIssuer{Subject: h}
	}
	m.cache.RemoveManaged(drop)
}

// preload runs before reconcile and reports whether reconcile may go on.
// Until the state is current it only serves what the store already holds:
// uploaded certificates, and the ACME certificates whose status says
// valid, put in the cache without being managed (a host restarted without
// a quorum keeps serving them). Once current, names preloaded but no longer
// wanted leave the cache, and the wanted ones are managed as usual.
func (m *Manager) preload(d *desired) bool {
	if m.current.Load() {
		if len(m.preloaded) > 0 {
			var drop []string
			for h := range m.preloaded {
				delete(m.managed, h)
				if _, ok := d.managed[h]; !ok {
					drop = append(drop, h)
				}
			}
			m.unmanage(drop)
			m.preloaded = map[string]bool{}
		}
		return true
	}
	for h, tenant := range d.managed {
		if _, ok := m.managed[h]; ok || d.status[tenant+"/"+h].GetState() != StateValid {
			continue
		}
		m.loadManaged(h)
		m.managed[h] = func() {}
		m.preloaded[h] = true
	}
	m.loadUploads(d)
	return false
}
