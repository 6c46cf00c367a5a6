package observe

import (
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Filter selects the load balancers and events of one tenant or one load
// balancer; the zero Filter selects everything.
type Filter struct {
	Tenant string
	// LB is "tenant/name".
	LB string
	// History asks for the host's history ring (ObserveRequest.history).
	History bool
}

// FilterOf is the filter of a request.
func FilterOf(req *pb.ObserveRequest) Filter {
	return Filter{Tenant: req.GetTenant(), LB: req.GetLoadBalancer(), History: req.GetHistory()}
}

// Match reports whether an object of tenant, or of load balancer lb
// ("tenant/name", may be empty), is selected.
func (f Filter) Match(tenant, lb string) bool {
	if tenant == "" && lb != "" {
		tenant, _, _ = strings.Cut(lb, "/")
	}
	if f.Tenant != "" && tenant != f.Tenant {
		return false
	}
	if f.LB != "" && lb != f.LB {
		return false
	}
	return true
}

// MatchLB reports whether load balancer lb ("tenant/name") is selected.
func (f Filter) MatchLB(lb string) bool { return f.Match("", lb) }

// Source is one part of a host that adds what it sees to an observation,
// keeping only what f selects. It must be safe for concurrent use and
// quick: it is called on every Observe.
type Source interface {
	Observe(f Filter, h *pb.HostObservation)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(f Filter, h *pb.HostObservation)

// Observe calls s.
func (s SourceFunc) Observe(f Filter, h *pb.HostObservation) { s(f, h) }

// Host gathers one host's observation from its sources and keeps its
// events.
type Host struct {
	node   string
	events *Events

	mu      sync.Mutex
	sources []Source
}

// NewHost returns the observer of host node with an event ring of the
// default size.
func NewHost(node string) *Host {
	return &Host{node: node, events: NewEvents(node, 0)}
}

// Events is the host's event ring.
func (h *Host) Events() *Events { return h.events }

// Add registers a source; sources are asked in the order added.
func (h *Host) Add(s Source) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sources = append(h.sources, s)
}

// Observe gathers what the host sees, as req selects.
func (h *Host) Observe(req *pb.ObserveRequest) *pb.HostObservation {
	out := &pb.HostObservation{NodeId: h.node, Reachable: true, Time: timestamppb.New(time.Now())}
	f := FilterOf(req)
	if !req.GetEventsOnly() {
		h.mu.Lock()
		sources := append([]Source(nil), h.sources...)
		h.mu.Unlock()
		for _, s := range sources {
			s.Observe(f, out)
		}
	}
	out.Events, out.LastEvent = h.events.Since(req.GetEventsAfter()[h.node], f, int(req.GetMaxEvents()))
	return out
}

// MatchTenant reports whether something of a whole tenant (a certificate,
// a tenant's event) belongs to the selection: the tenant selected, or the
// tenant of the load balancer selected.
func (f Filter) MatchTenant(tenant string) bool {
	if f.Tenant != "" && tenant != f.Tenant {
		return false
	}
	if f.LB != "" {
		t, _, _ := strings.Cut(f.LB, "/")
		return tenant == t
	}
	return true
}
