package tenantsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// Fence: a stream writes a load balancer only if it is still at the
// revision the stream last knew it at: read in the welcome, or stored by
// the stream's own last write. The leader checks it in its write loop
// (revision preconditions, consensus checkPreconditions), so it holds
// across hosts and leader changes. A stream whose agent has moved on (it
// reconnected to another host and resynced there, or a new agent took
// the tenant's lease) may still hold changes it read before: waiting for
// the write budget, for the change before it, or for a leader. Without
// the fence such a change would land after the newer stream's writes of
// the same load balancer and put an older spec back. With it the write is
// refused, nothing of the change is written, and the stream ends; an
// agent still on it reconnects and resyncs from the state as it is.
// Another writer of the load balancer (the operator through the admin
// API) ends the stream the same way.
//
// Not fenced: a create (a name the stream does not know; the leader has
// no "must not exist" precondition), a removal (deletes carry no
// preconditions) and certificates.

// knownRevision records the revision at which the stream knows a load
// balancer; 0 forgets it.
func (st *stream) knownRevision(name string, rev uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if rev == 0 {
		delete(st.revs, name)
		return
	}
	st.revs[name] = rev
}

// preconditions are the revisions objs must still be at for the stream
// to write them: those it knows.
func (st *stream) preconditions(objs []*pb.Object) []*pb.RevisionPrecondition {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []*pb.RevisionPrecondition
	for _, o := range objs {
		lb := o.GetLoadBalancer()
		if rev := st.revs[lb.GetName()]; rev != 0 {
			out = append(out, &pb.RevisionPrecondition{
				Ref:      &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: lb.GetTenant(), Name: lb.GetName()},
				Revision: rev,
			})
		}
	}
	return out
}

// learn records the revisions of the load balancers a write stored.
func (st *stream) learn(stored []*pb.Object) {
	for _, o := range stored {
		if lb := o.GetLoadBalancer(); lb != nil {
			st.knownRevision(lb.GetName(), lb.GetMeta().GetRevision())
		}
	}
}

// applyFenced writes objs if each is still at the revision the stream
// knows it at, and learns the revisions they are stored at. A write
// refused so is looked at once more: a load balancer stored with the very
// spec the stream writes was written by the stream's own earlier attempt
// (a write that reached a leader that then lost its place, retried on
// the next one) or holds what it writes anyway; the stream learns its
// revision and writes again. Any other change of one is the fence's
// refusal, and the change is not written (outdated).
func (s *Server) applyFenced(ctx context.Context, st *stream, objs []*pb.Object) (*pb.ApplyResponse, error) {
	for attempt := 0; ; attempt++ {
		resp, err := s.cfg.Store.Apply(ctx, &pb.ApplyRequest{Objects: objs, Preconditions: st.preconditions(objs)}, false)
		if err == nil {
			st.learn(resp.GetObjects())
			return resp, nil
		}
		if !errors.Is(err, api.ErrChanged) {
			return nil, err
		}
		if attempt > 0 {
			return nil, outdated(err)
		}
		same, rerr := s.storedAsWritten(ctx, st, objs)
		if rerr != nil {
			return nil, rerr
		}
		if !same {
			return nil, outdated(err)
		}
	}
}

// storedAsWritten reports whether every load balancer of objs that the
// stream knows at a revision is stored with the spec it writes now, or is
// still at that revision; it learns the revisions of those that are.
func (s *Server) storedAsWritten(ctx context.Context, st *stream, objs []*pb.Object) (bool, error) {
	for _, pc := range st.preconditions(objs) {
		cur, err := s.cfg.Store.Get(ctx, pc.GetRef())
		switch {
		case errors.Is(err, api.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("read %s: %w", api.RefString(pc.GetRef()), err)
		}
		lb := cur.GetLoadBalancer()
		if lb.GetMeta().GetRevision() == pc.GetRevision() {
			continue
		}
		var mine *pb.LoadBalancer
		for _, o := range objs {
			if o.GetLoadBalancer().GetName() == lb.GetName() {
				mine = o.GetLoadBalancer()
			}
		}
		if syncspec.Version(lb) != syncspec.Version(mine) {
			return false, nil
		}
		st.knownRevision(lb.GetName(), lb.GetMeta().GetRevision())
	}
	return true, nil
}

// outdated is the error that ends a stream whose write the fence refused.
func outdated(err error) error {
	return fmt.Errorf("%w: a load balancer this change writes was written by another stream of the tenant or by the operator since this stream read it; nothing of the change was written and the stream ends, so that the agent reconnects and resyncs from the state as it is: %w", ErrOutdated, err)
}
