package tenantbgp

import (
	"maps"
	"net/netip"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// upstream is what the relay last gave Config.Reannounce, and whether it
// took it: the routes of each tenant it holds, or why it did not take
// them (err), and since when (explain tenant shows them).
type upstream struct {
	sent    map[netip.Prefix]uint32
	world   *world
	ok      bool
	tenants map[string]uint32
	err     string
	since   time.Time
}

// reannounce gives Config.Reannounce the accepted routes of the tenants
// with bgp.reannounce, each with its tenant's community, when they or
// the world changed since the last time it took them. A route dropped
// for any reason, or one the kernel refused, is not among them, nor any
// route of an attached tenant: it lives in the tenant's own address
// space (validation refuses bgp.reannounce with an attachment).
func (r *Relay) reannounce(w *world, installed bool) {
	if r.cfg.Reannounce == nil || (!installed && r.up.ok && r.up.world == w) {
		return
	}
	want := map[netip.Prefix]uint32{}
	count := map[string]uint32{}
	for a, pr := range r.judged {
		tenant := r.tenantOf(a)
		t := w.tenants[tenant]
		if t == nil || !t.bgp.GetReannounce() || t.space != "" {
			continue
		}
		c, err := api.ParseBGPCommunity(t.bgp.GetCommunity())
		if err != nil {
			continue // validated: never
		}
		for p, j := range pr.routes {
			if j.reason == "" && r.failed[p] == nil {
				want[p] = c
				count[tenant]++
			}
		}
	}
	if r.up.ok && maps.Equal(want, r.up.sent) {
		r.up.world, r.up.tenants = w, count
		return
	}
	if err := r.cfg.Reannounce(want); err != nil {
		if r.up.ok || r.up.since.IsZero() || r.up.err != err.Error() {
			r.up.since = time.Now()
		}
		r.up.ok, r.up.err = false, err.Error()
		r.log.Warn("cannot announce the tenants' routes upstream; tries again at the next pass", "err", err)
		return
	}
	since := r.up.since
	if !r.up.ok || !maps.Equal(count, r.up.tenants) || since.IsZero() {
		since = time.Now()
	}
	r.up = upstream{sent: want, world: w, ok: true, tenants: count, since: since}
}

// observeUpstream adds to o what this host re-announces of tenant's
// routes, or why it cannot, when the tenant has bgp.reannounce.
func (r *Relay) observeUpstream(t *tenantRules, name string, o *pb.TenantBGPObservation) {
	if t == nil || !t.bgp.GetReannounce() || r.cfg.Reannounce == nil || r.up.since.IsZero() {
		return
	}
	o.ReannounceSince = timestamppb.New(r.up.since)
	if !r.up.ok {
		o.ReannounceError = r.up.err
		return
	}
	o.Reannounced = r.up.tenants[name]
	if r.cfg.FabricSessions != nil {
		o.FabricSessions = uint32(max(0, r.cfg.FabricSessions()))
	}
}
