package main

import (
	"net/netip"
	"sync/atomic"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/vip"
	"github.com/teapot-lb/teapot-lb/vip/tenantbgp"
)

// upstreamTo hands the tenants' routes the relay re-announces to the VIP
// manager's speaker once the manager is open (the relay starts first; see
// vip.BGPIdentity): until then it refuses them, and the relay gives them
// again at its next pass.
type upstreamTo struct{ vm atomic.Pointer[vip.Manager] }

func (u *upstreamTo) announce(routes map[netip.Prefix]uint32) error {
	return u.vm.Load().SetTenantRoutes(routes)
}

// fabricSessions counts the VIP manager's established sessions with the
// fabric routers (0 until it is open).
func (u *upstreamTo) fabricSessions() int { return u.vm.Load().FabricSessions() }

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

// The relay announces the VIPs of bgp pools in tenants' attachments to
// the tenants' speakers.
var _ vip.TenantVIPs = (*tenantbgp.Relay)(nil)
