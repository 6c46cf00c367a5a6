package tenantsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// parallelWrites bounds the single-object writes of a change that could not
// be written whole; the leader folds them into few Raft entries.
const parallelWrites = 64

// applyChange writes one change: its certificates first (load balancers
// may list them), then removals (they free addresses and quota), then the
// upserts in one request, which is one Raft entry, then the certificate
// removals (no load balancer lists them any more). When
// that request is refused, each upsert is written on its own so that one
// broken object never holds back the others. It returns an error, which
// ends the stream, only when the cluster could not be written at all.
func (s *Server) applyChange(ctx context.Context, st *stream, ch *pb.SyncChange) (*pb.SyncAck, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
	defer cancel()
	tenant := st.caller.tenant
	ack := &pb.SyncAck{Seq: ch.GetSeq()}

	seen := map[string]bool{}
	var removals []string
	for _, name := range ch.GetRemovals() {
		switch {
		case seen[name]:
			ack.Results = append(ack.Results, &pb.ObjectStatus{Name: name, Error: "named twice in one change"})
		case !syncspec.Managed(name):
			ack.Results = append(ack.Results, &pb.ObjectStatus{Name: name, Error: fmt.Sprintf("the agent manages load balancers named %s*, %s* and %s*; %s belongs to the operator", syncspec.ServicePrefix, syncspec.IngressPrefix, syncspec.GatewayPrefix, name)})
		default:
			removals = append(removals, name)
		}
		seen[name] = true
	}
	hosts := s.hostPorts()
	var objs []*pb.Object
	var versions []string
	for _, up := range ch.GetUpserts() {
		name := up.GetLoadBalancer().GetName()
		if seen[name] {
			ack.Results = append(ack.Results, &pb.ObjectStatus{Name: name, Error: "named twice in one change"})
			continue
		}
		seen[name] = true
		lb, err := sanitize(tenant, up.GetLoadBalancer(), hosts)
		if err != nil {
			ack.Results = append(ack.Results, &pb.ObjectStatus{Name: name, Error: errorLine(err)})
			continue
		}
		objs = append(objs, api.Wrap(lb))
		versions = append(versions, up.GetVersion())
	}
	if ch.GetResyncEnd() {
		stale, err := s.stale(ctx, tenant, ch.GetKeep(), seen)
		if err != nil {
			return nil, err
		}
		removals = append(removals, stale...)
	}

	certs, err := s.uploadCertificates(ctx, tenant, ch.GetCertificates())
	if err != nil {
		return nil, err
	}
	removed, err := s.remove(ctx, st, removals)
	if err != nil {
		return nil, err
	}
	ack.Results = append(ack.Results, removed...)
	written, rev, err := s.upsert(ctx, st, objs)
	if err != nil {
		return nil, err
	}
	ack.Results = append(ack.Results, written...)
	gone, err := s.removeCertificates(ctx, tenant, ch)
	if err != nil {
		return nil, err
	}
	ack.Certificates = append(certs, gone...)
	ack.Revision = max(rev, s.cfg.Store.Revision())
	slices.SortFunc(ack.Results, func(a, b *pb.ObjectStatus) int { return strings.Compare(a.GetName(), b.GetName()) })
	s.noteRefusals(tenant, ack.Results)
	return ack, nil
}

// stale lists the tenant's managed load balancers that the agent does not
// keep and did not name in this change.
func (s *Server) stale(ctx context.Context, tenant string, keep []string, named map[string]bool) ([]string, error) {
	objs, _, err := s.cfg.Store.List(ctx, api.KindLoadBalancer, tenant)
	if err != nil {
		return nil, fmt.Errorf("list the tenant's load balancers: %w", err)
	}
	kept := make(map[string]bool, len(keep))
	for _, k := range keep {
		kept[k] = true
	}
	var out []string
	for _, o := range objs {
		name := o.GetLoadBalancer().GetName()
		if syncspec.Managed(name) && !kept[name] && !named[name] {
			out = append(out, name)
		}
	}
	return out, nil
}

// remove deletes load balancers, concurrently so that the leader batches
// them. One that does not exist is answered as not found: removed (it is
// not stored) with an error saying so.
func (s *Server) remove(ctx context.Context, st *stream, names []string) ([]*pb.ObjectStatus, error) {
	out := make([]*pb.ObjectStatus, len(names))
	errs := make([]error, len(names))
	parallel(len(names), func(i int) {
		ref := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: st.caller.tenant, Name: names[i]}
		_, err := s.cfg.Store.Delete(ctx, &pb.DeleteRequest{Ref: ref}, false)
		switch {
		case err == nil:
			st.knownRevision(names[i], 0)
			out[i] = &pb.ObjectStatus{Name: names[i], Removed: true}
		case errors.Is(err, api.ErrNotFound), status.Code(err) == codes.NotFound:
			st.knownRevision(names[i], 0)
			out[i] = &pb.ObjectStatus{Name: names[i], Removed: true, Error: fmt.Sprintf("not found: load balancer %s does not exist", names[i])}
		case unavailable(err):
			errs[i] = err
		default:
			out[i] = &pb.ObjectStatus{Name: names[i], Error: errorLine(err)}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("remove load balancers: %w", err)
	}
	return out, nil
}

// upsert writes objs in one request, or one by one when that is refused.
// Each is written only if it is still at the revision the stream knows
// it at (fence.go); when one is not, nothing is written and the stream
// ends.
func (s *Server) upsert(ctx context.Context, st *stream, objs []*pb.Object) ([]*pb.ObjectStatus, uint64, error) {
	if len(objs) == 0 {
		return nil, 0, nil
	}
	resp, err := s.applyFenced(ctx, st, objs)
	if err == nil {
		out := make([]*pb.ObjectStatus, 0, len(objs))
		for _, o := range resp.GetObjects() {
			out = append(out, statusOf(o.GetLoadBalancer()))
		}
		return out, resp.GetRevision(), nil
	}
	if errors.Is(err, ErrOutdated) {
		return nil, 0, err
	}
	if unavailable(err) {
		return nil, 0, fmt.Errorf("write load balancers: %w", err)
	}
	if len(objs) == 1 {
		return []*pb.ObjectStatus{{Name: objs[0].GetLoadBalancer().GetName(), Error: errorLine(err)}}, 0, nil
	}
	out := make([]*pb.ObjectStatus, len(objs))
	errs := make([]error, len(objs))
	var mu sync.Mutex
	var rev uint64
	parallel(len(objs), func(i int) {
		name := objs[i].GetLoadBalancer().GetName()
		resp, err := s.applyFenced(ctx, st, objs[i:i+1])
		switch {
		case err == nil:
			out[i] = statusOf(resp.GetObjects()[0].GetLoadBalancer())
			mu.Lock()
			rev = max(rev, resp.GetRevision())
			mu.Unlock()
		case errors.Is(err, ErrOutdated):
			errs[i] = err
		case unavailable(err):
			errs[i] = err
		default:
			out[i] = &pb.ObjectStatus{Name: name, Error: errorLine(err)}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, 0, fmt.Errorf("write load balancers: %w", err)
	}
	return out, rev, nil
}

// unavailable reports an error that says nothing about the object: the
// cluster could not be reached or the stream ended.
func unavailable(err error) bool {
	if errors.Is(err, api.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
		return true
	}
	return false
}

// maxErrorLine bounds the reason an object was refused: it goes back to
// the agent and into the host's events.
const maxErrorLine = 2048

// errorLine is the one-line reason an object was refused.
func errorLine(err error) string {
	if s, ok := status.FromError(err); ok {
		return api.Clip(s.Message(), maxErrorLine)
	}
	return api.Clip(err.Error(), maxErrorLine)
}

// parallel runs fn(0..n-1) on at most parallelWrites goroutines.
func parallel(n int, fn func(i int)) {
	sem := make(chan struct{}, parallelWrites)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}
