package main

import (
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/vip/tenantbgp"
)

// followTenantBGP passes the committed state to the tenant BGP relay
// after a reset and after each revision that changed a tenant or a VIP
// pool (the rest does not concern it).
func followTenantBGP(relay *tenantbgp.Relay, r proxy.Revision, state func() ([]*pb.Object, uint64)) {
	if r.Reset {
		relay.Update(r.Objects)
		return
	}
	for prev, next := range r.Transitions() {
		if concernsTenantBGP(prev) || concernsTenantBGP(next) {
			objs, _ := state()
			relay.Update(objs)
			return
		}
	}
}

func concernsTenantBGP(o *pb.Object) bool { return o.GetTenant() != nil || o.GetVipPool() != nil }
