package adminserver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxCursorHosts bounds the per-host cursor a caller may send.
const maxCursorHosts = 256

func (s *Server) Observe(ctx context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	if err := checkSelection(req.GetTenant(), req.GetLoadBalancer(), req.GetEventsAfter()); err != nil {
		return nil, api.ToStatus(err)
	}
	resp, err := s.store.Observe(ctx, req)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	s.scopeCertEvents(ctx, req.GetLoadBalancer(), resp)
	return resp, nil
}

// scopeCertEvents keeps, in an observation of load balancer lb, only the
// certificate events of the names it serves (the hosts select them by
// tenant alone).
func (s *Server) scopeCertEvents(ctx context.Context, lb string, resp *pb.ObserveResponse) {
	if lb == "" {
		return
	}
	t, name, _ := strings.Cut(lb, "/")
	o, err := s.store.Get(ctx, &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: t, Name: name})
	if err != nil {
		o = nil // not stored: it serves no name
	}
	observe.KeepCertEventsOf(resp.GetHosts(), o.GetLoadBalancer())
}

func (s *Server) Events(ctx context.Context, req *pb.EventsRequest) (*pb.EventsResponse, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	if err := checkSelection(req.GetTenant(), req.GetLoadBalancer(), req.GetAfter()); err != nil {
		return nil, api.ToStatus(err)
	}
	obs, err := s.store.Observe(ctx, &pb.ObserveRequest{
		Tenant: req.GetTenant(), LoadBalancer: req.GetLoadBalancer(), Node: req.GetNode(),
		EventsAfter: req.GetAfter(), MaxEvents: req.GetMaxEvents(), EventsOnly: true,
	})
	if err != nil {
		return nil, api.ToStatus(err)
	}
	s.scopeCertEvents(ctx, req.GetLoadBalancer(), obs)
	return MergeEvents(obs, req.GetAfter()), nil
}

// MergeEvents joins the hosts' events into one list, oldest first, with
// the cursor for the next call (a host that did not answer keeps the
// position it had in after).
func MergeEvents(obs *pb.ObserveResponse, after map[string]uint64) *pb.EventsResponse {
	out := &pb.EventsResponse{Cursor: map[string]uint64{}}
	for _, h := range obs.GetHosts() {
		if !h.GetReachable() {
			out.Unreachable = append(out.Unreachable, h.GetNodeId()+": "+h.GetError())
			if c, ok := after[h.GetNodeId()]; ok {
				out.Cursor[h.GetNodeId()] = c
			}
			continue
		}
		out.Events = append(out.Events, h.GetEvents()...)
		out.Cursor[h.GetNodeId()] = h.GetLastEvent()
	}
	slices.SortStableFunc(out.Events, func(a, b *pb.Event) int {
		if c := a.GetTime().AsTime().Compare(b.GetTime().AsTime()); c != 0 {
			return c
		}
		if c := strings.Compare(a.GetNodeId(), b.GetNodeId()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetSeq(), b.GetSeq())
	})
	return out
}

func checkSelection(tenant, lb string, after map[string]uint64) error {
	if lb != "" {
		t, name, ok := strings.Cut(lb, "/")
		if !ok || t == "" || name == "" {
			return fmt.Errorf("load_balancer %q: must be TENANT/NAME: %w", lb, api.ErrInvalid)
		}
		if tenant != "" && tenant != t {
			return fmt.Errorf("load_balancer %q is not of tenant %q: %w", lb, tenant, api.ErrInvalid)
		}
	}
	if len(after) > maxCursorHosts {
		return fmt.Errorf("events cursor names %d hosts; at most %d: %w", len(after), maxCursorHosts, api.ErrInvalid)
	}
	return nil
}
