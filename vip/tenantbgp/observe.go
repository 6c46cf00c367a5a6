package tenantbgp

import (
	"slices"
	"strings"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/proto"
)

var _ observe.Source = (*Relay)(nil)

// NoSpeaker is the problem of a host without a bgp: section.
const NoSpeaker = "this host has no bgp: section in its serve config (bgp.asn): it does not peer with the tenant's speakers nor install their routes"

// Observe adds the sessions and routes of the tenants f selects to h. It
// is safe on a nil Relay.
func (r *Relay) Observe(f observe.Filter, h *pb.HostObservation) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range sortedKeys(r.world.tenants) {
		if !f.MatchTenant(name) {
			continue
		}
		if r.srv == nil {
			h.TenantBgp = append(h.TenantBgp, &pb.TenantBGPObservation{Tenant: name, Problem: NoSpeaker})
			continue
		}
		o, ok := r.obs[name]
		if !ok {
			o = &pb.TenantBGPObservation{Tenant: name}
		}
		h.TenantBgp = append(h.TenantBgp, proto.CloneOf(o))
	}
	slices.SortFunc(h.TenantBgp, func(a, b *pb.TenantBGPObservation) int { return strings.Compare(a.GetTenant(), b.GetTenant()) })
}
