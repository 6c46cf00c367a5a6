package tenantbgp

import (
	"maps"
	"net/netip"

	"github.com/teapot-lb/teapot-lb/api"
)

// upstream is what the relay last gave Config.Reannounce, and whether it
// took it.
type upstream struct {
	sent  map[netip.Prefix]uint32
	world *world
	ok    bool
}

// reannounce gives Config.Reannounce the accepted routes of the tenants
// with bgp.reannounce, each with its tenant's community, when they or
// the world changed since the last time it took them. A route dropped
// for any reason, or one the kernel refused, is not among them.
func (r *Relay) reannounce(w *world, installed bool) {
	if r.cfg.Reannounce == nil || (!installed && r.up.ok && r.up.world == w) {
		return
	}
	want := map[netip.Prefix]uint32{}
	for a, pr := range r.judged {
		t := w.tenants[w.peers[a]]
		if t == nil || !t.bgp.GetReannounce() {
			continue
		}
		c, err := api.ParseBGPCommunity(t.bgp.GetCommunity())
		if err != nil {
			continue // validated: never
		}
		for p, j := range pr.routes {
			if j.reason == "" && r.failed[p] == nil {
				want[p] = c
			}
		}
	}
	if r.up.ok && maps.Equal(want, r.up.sent) {
		r.up.world = w
		return
	}
	if err := r.cfg.Reannounce(want); err != nil {
		r.up.ok = false
		r.log.Warn("cannot announce the tenants' routes upstream; tries again at the next pass", "err", err)
		return
	}
	r.up = upstream{sent: want, world: w, ok: true}
}
