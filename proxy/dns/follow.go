package dns

import (
	"context"
	"iter"
	"slices"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// FollowObserved passes the data plane's observed state (the plane the
// VIP manager follows too) on to the answer rule until ctx ends: a Reset
// replaces the readiness (SetReady), any other change sets that of the
// load balancers it names (SetReadyFor). The watch misses no change.
func (s *Server) FollowObserved(ctx context.Context, plane *observe.Plane) {
	if s == nil || plane == nil {
		return
	}
	w := plane.Watch(0)
	for {
		ch, err := w.Next(ctx)
		if err != nil {
			return
		}
		ready := make(map[string]string, len(ch.LBs))
		for lb, st := range ch.LBs {
			ready[lb] = st.Ready
		}
		if ch.Reset {
			s.SetReady(ready)
		} else {
			s.SetReadyFor(ready, ch.Gone)
		}
	}
}

// Follow takes one committed revision once the data plane applied it. A
// reset, or changes (each object before and after, nil when created or
// deleted) that alter a name or its address, have the table compiled
// again from Config.State, off the caller's goroutine; several revisions
// in a row compile once. Other changes (members, pools, certificates)
// change no name; readiness comes through FollowObserved.
func (s *Server) Follow(reset bool, changes iter.Seq2[*pb.Object, *pb.Object]) {
	if s == nil {
		return
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
		if pl == nil || nl == nil || !slices.Equal(api.StatusAddresses(pl), api.StatusAddresses(nl)) ||
			!slices.Equal(hostsOf(pl), hostsOf(nl)) {
			return true
		}
	}
	return false
}
