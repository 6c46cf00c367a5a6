package snapshot

import (
	"net/netip"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// attachedRange is the range of a VIP pool that lives in a tenant's
// attachment (VIPPool.attachment).
type attachedRange struct {
	r      api.Range
	tenant string
}

// attachedRanges returns the ranges of the pools in tenants' attachments.
func attachedRanges(pools []*pb.VIPPool) []attachedRange {
	var out []attachedRange
	for _, p := range pools {
		if p.GetAttachment() == "" {
			continue
		}
		for _, s := range p.GetCidrs() {
			if rs, err := api.ParsePoolRanges([]string{s}); err == nil {
				for _, r := range rs {
					out = append(out, attachedRange{r, p.GetAttachment()})
				}
			}
		}
	}
	return out
}

// spaceOf returns the tenant whose attachment the VIP a of a load
// balancer of tenant lives in: its listeners are opened in that tenant's
// namespace (Key.Space). "" for a VIP of the host's own network. Pools in
// different tenants' attachments may overlap, and each serves its own
// tenant only.
func (c *compiler) spaceOf(tenant string, a netip.Addr) string {
	for _, r := range c.attached {
		if r.tenant == tenant && r.r.Contains(a) {
			return r.tenant
		}
	}
	return ""
}
