package certs

import (
	"context"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
)

// Kinds are the kinds of objects whose changes may matter to the
// manager: a watch may pass over revisions that change none of them.
var Kinds = []string{api.KindCertificate, api.KindLoadBalancer, api.KindTenant, api.KindStorageItem}

// Follow hands the committed state (state) to the manager (Update) at
// each revision of w that can change what it manages (MayChange), until
// ctx ends or w fails. Lock refreshes and the changes of load balancers
// that ask for no ACME certificate never reach it.
func (m *Manager) Follow(ctx context.Context, w proxy.Watcher, state func() ([]*pb.Object, uint64)) {
	for {
		r, err := w.Next(ctx)
		if err != nil {
			return
		}
		if !MayChange(r) {
			continue
		}
		objs, _ := state()
		m.Update(objs)
	}
}

// MayChange reports whether a revision can change what the manager
// manages: a Reset; certificates, certificate storage; a tenant's domains
// or quota (TenantChangeMatters); a load balancer that asks for ACME
// certificates (LoadBalancerChangeMatters). A revision that changes none
// of Kinds cannot; one that changes one of them and another kind is
// taken as a whole.
func MayChange(r proxy.Revision) bool {
	if r.Reset {
		return true
	}
	if !r.Touches(Kinds...) {
		return false
	}
	for _, c := range r.Changes {
		switch c.Ref.GetKind() {
		case api.KindLoadBalancer:
			if LoadBalancerChangeMatters(c.Previous.GetLoadBalancer(), c.Object.GetLoadBalancer()) {
				return true
			}
		case api.KindTenant:
			if TenantChangeMatters(c.Previous.GetTenant(), c.Object.GetTenant()) {
				return true
			}
		default:
			return true
		}
	}
	return false
}
