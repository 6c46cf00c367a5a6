package tenantsync

import (
	"sync"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// maxRefusalsPerTenant bounds the refusals remembered per tenant (to
// report each refusal once); past it, new refusals of the tenant are not
// reported as events until some clear.
const maxRefusalsPerTenant = 256

// refusals remembers the last refusal reported per tenant object, so that
// an agent resending a refused object does not repeat the event.
type refusals struct {
	mu sync.Mutex
	m  map[string]map[string]string // tenant -> name -> reason
}

// noteRefusals reports each newly refused object as an event and forgets
// the objects written or removed since.
func (s *Server) noteRefusals(tenant string, results []*pb.ObjectStatus) {
	if s.cfg.Events == nil {
		return
	}
	var events []*pb.Event
	r := &s.refusals
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]map[string]string{}
	}
	seen := r.m[tenant]
	for _, res := range results {
		name, reason := res.GetName(), res.GetError()
		if reason == "" {
			delete(seen, name)
			continue
		}
		if seen == nil {
			seen = map[string]string{}
			r.m[tenant] = seen
		}
		if prev, ok := seen[name]; ok && prev == reason {
			continue
		}
		if _, ok := seen[name]; !ok && len(seen) >= maxRefusalsPerTenant {
			continue
		}
		seen[name] = reason
		// The name and the reason are the tenant's: both are clipped.
		lb := tenant + "/" + api.Clip(name, api.MaxQuoted)
		events = append(events, &pb.Event{Type: observe.EventTenantRefused, Severity: observe.Warning, Tenant: tenant,
			LoadBalancer: lb, Message: "refused " + lb + ": " + api.Clip(reason, api.MaxReason)})
	}
	if len(seen) == 0 {
		delete(r.m, tenant)
	}
	r.mu.Unlock()
	for _, ev := range events {
		s.cfg.Events(ev)
	}
}

// noteOutdated reports, as a host event, that the fence ended a stream of
// tenant: the operator sees why the agent reconnected and whose write
// came first.
func (s *Server) noteOutdated(tenant, agent string, err error) {
	if s.cfg.Events == nil {
		return
	}
	s.cfg.Events(&pb.Event{Type: observe.EventTenantOutdated, Severity: observe.Info, Tenant: tenant,
		Message: "stream of tenant " + tenant + " (agent " + api.Clip(agent, api.MaxQuoted) + ") ended: " + api.Clip(err.Error(), api.MaxReason)})
}
