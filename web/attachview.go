package web

import (
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TenantAttachment is one tenant's attachment (its network namespace and
// VXLAN device on each LB host) as every host last reported it.
type TenantAttachment struct {
	Tenant string           `json:"tenant"`
	Hosts  []AttachmentHost `json:"hosts"`
}

// AttachmentHost is a tenant's attachment on one host.
type AttachmentHost struct {
	Node string `json:"node"`
	// Reachable is whether the host answered this read; Observed when
	// it last did (the data is from then).
	Reachable bool      `json:"reachable"`
	Observed  time.Time `json:"observed"`
	Error     string    `json:"error,omitempty"`
	Namespace string    `json:"namespace"`
	// State is up, failed (Reason says why) or not-listed; Since when
	// it last changed.
	State   string    `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	Since   time.Time `json:"since"`
	VNI     uint32    `json:"vni"`
	Address string    `json:"address"`
}

// attachmentViews is every tenant's attachment from the hosts that
// answered this read, by tenant and host.
func attachmentViews(hosts []*pb.HostObservation, now time.Time) []TenantAttachment {
	by := map[string]*TenantAttachment{}
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, o := range h.GetTenantAttachments() {
			t := by[o.GetTenant()]
			if t == nil {
				t = &TenantAttachment{Tenant: o.GetTenant()}
				by[o.GetTenant()] = t
			}
			t.Hosts = append(t.Hosts, AttachmentHost{Node: h.GetNodeId(), Reachable: true, Observed: now, Namespace: clip(o.GetNamespace()),
				State: clip(o.GetState()), Reason: clip(o.GetReason()), Since: o.GetSince().AsTime(), VNI: o.GetVni(), Address: clip(o.GetAddress())})
		}
	}
	out := make([]TenantAttachment, 0, len(by))
	for _, t := range by {
		out = append(out, *t)
	}
	return sortPerHost[TenantAttachment, AttachmentHost](out)
}

// keepAttachments adds to cur, for each host whose report is not in this
// read, its last report of each attachment, marked not reachable and
// keeping when it was observed; a host that left the cluster is dropped.
func keepAttachments(prev, cur []TenantAttachment, answered map[string]bool, why map[string]string, nodes []Node) []TenantAttachment {
	return keepPerHost[TenantAttachment, AttachmentHost](prev, cur, answered, why, nodes)
}
