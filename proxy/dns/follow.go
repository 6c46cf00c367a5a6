package dns

import (
	"context"
	"iter"
	"slices"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Readiness is the data plane's readiness of its load balancers
// ("tenant/name"; "": ready, else why not), as the VIP manager reads it.
type Readiness interface {
	Readiness() map[string]string
	ReadinessOf(lbs []string) (ready map[string]string, gone []string)
}

// Follow takes one committed revision once the data plane applied it.
// The readiness of the load balancers it changed or the data plane
// touched is read again (all of them after a reset). A reset, or
// changes (each object before and after, nil when created or deleted)
// that alter a name or its address, have the table compiled again from
// Config.State, off the caller's goroutine; several revisions in a row
// compile once. Other changes (members, pools, certificates) change no
// name.
func (s *Server) Follow(reset bool, changes iter.Seq2[*pb.Object, *pb.Object], touched []string, ready Readiness) {
	if s == nil {
		return
	}
	switch {
	case reset:
		s.SetReady(ready.Readiness())
	default:
		lbs := slices.Clone(touched)
		for prev, next := range changes {
			if l := next.GetLoadBalancer(); l != nil {
				lbs = append(lbs, l.GetTenant()+"/"+l.GetName())
			} else if l := prev.GetLoadBalancer(); l != nil {
				lbs = append(lbs, l.GetTenant()+"/"+l.GetName())
			}
		}
		if len(lbs) > 0 {
			slices.Sort(lbs)
			s.SetReadyFor(ready.ReadinessOf(slices.Compact(lbs)))
		}
	}
	if !reset && !ChangesMatter(changes) {
		return
	}
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// compileLoop compiles the table whenever Follow asks, until ctx ends.
func (s *Server) compileLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		}
		if s.cfg.State != nil {
			objs, rev := s.cfg.State()
			s.Update(objs, rev)
		}
	}
}

// ChangesMatter reports whether changes alter the names answered: a
// tenant's domains, a load balancer's existence, address or hosts.
func ChangesMatter(changes iter.Seq2[*pb.Object, *pb.Object]) bool {
	for prev, next := range changes {
		pt, nt := prev.GetTenant(), next.GetTenant()
		if pt != nil || nt != nil {
			if pt == nil || nt == nil || !slices.Equal(pt.GetDomains(), nt.GetDomains()) {
				return true
			}
			continue
		}
		pl, nl := prev.GetLoadBalancer(), next.GetLoadBalancer()
		if pl == nil && nl == nil {
			continue
		}
		if pl == nil || nl == nil || pl.GetStatus().GetAddress() != nl.GetStatus().GetAddress() ||
			!slices.Equal(hostsOf(pl), hostsOf(nl)) {
			return true
		}
	}
	return false
}
