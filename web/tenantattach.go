package web

import (
	"slices"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TenantAttachment is one tenant's attachment (its networks reached
// through a namespace of its own on each host) as every host reports it.
type TenantAttachment struct {
	Tenant string         `json:"tenant"`
	Hosts  []AttachedHost `json:"hosts"`
}

// AttachedHost is a tenant's attachment on one host, as the host last
// reported it.
type AttachedHost struct {
	Node string `json:"node"`
	// Reachable is whether the host answered this read; Observed when
	// it last did (the data is from then).
	Reachable bool      `json:"reachable"`
	Observed  time.Time `json:"observed"`
	Error     string    `json:"error,omitempty"`
	// State is up, failed (Reason says why) or not-listed (the
	// attachment names no address for this host), since Since.
	State   string    `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	Address string    `json:"address,omitempty"`
	VNI     uint32    `json:"vni"`
	Since   time.Time `json:"since"`
}

// attachViews is every tenant's attachment from the hosts that answered
// this read.
func attachViews(hosts []*pb.HostObservation, now time.Time) []TenantAttachment {
	by := map[string]*TenantAttachment{}
	var names []string
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, o := range h.GetTenantAttachments() {
			t := by[o.GetTenant()]
			if t == nil {
				t = &TenantAttachment{Tenant: o.GetTenant()}
				by[o.GetTenant()] = t
				names = append(names, o.GetTenant())
			}
			t.Hosts = append(t.Hosts, AttachedHost{Node: h.GetNodeId(), Reachable: true, Observed: now, State: clip(o.GetState()),
				Reason: clip(o.GetReason()), Address: clip(o.GetAddress()), VNI: o.GetVni(), Since: o.GetSince().AsTime()})
		}
	}
	slices.Sort(names)
	out := make([]TenantAttachment, 0, len(names))
	for _, n := range names {
		out = append(out, *by[n])
	}
	return out
}

// keepAttachments adds to cur, for each host whose report is not in this
// read, its last report of each tenant's attachment, marked not reachable
// and keeping when it was observed; a host that left the cluster is
// dropped.
func keepAttachments(prev, cur []TenantAttachment, answered map[string]bool, why map[string]string, nodes []Node) []TenantAttachment {
	inCluster := map[string]bool{}
	for _, n := range nodes {
		inCluster[n.ID] = true
	}
	idx := map[string]int{}
	for i, t := range cur {
		idx[t.Tenant] = i
	}
	for _, t := range prev {
		for _, h := range t.Hosts {
			if answered[h.Node] || (len(nodes) > 0 && !inCluster[h.Node]) {
				continue
			}
			h.Reachable, h.Error = false, orText(why[h.Node], "its observation was not read this time")
			i, ok := idx[t.Tenant]
			if !ok {
				i = len(cur)
				idx[t.Tenant] = i
				cur = append(cur, TenantAttachment{Tenant: t.Tenant})
			}
			cur[i].Hosts = append(cur[i].Hosts, h)
		}
	}
	for i := range cur {
		cur[i].Hosts = slices.Clone(cur[i].Hosts)
		slices.SortFunc(cur[i].Hosts, func(a, b AttachedHost) int { return strings.Compare(a.Node, b.Node) })
	}
	slices.SortFunc(cur, func(a, b TenantAttachment) int { return strings.Compare(a.Tenant, b.Tenant) })
	return nonNil(cur)
}
