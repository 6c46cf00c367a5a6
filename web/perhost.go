package web

import (
	"slices"
	"strings"
)

// perHost is a tenant's view with a row per host that reported it: its
// BGP (TenantBGP) or its attachment (TenantAttachment).
type perHost[H any] interface {
	tenantName() string
	setTenant(string)
	hostRows() *[]H
}

// hostRow is a host's row in a perHost view.
type hostRow interface {
	nodeID() string
	// unanswered marks the row as a host's last report, kept while the
	// host did not answer this read (why).
	unanswered(why string)
}

// keepPerHost adds to cur, for each host whose report is not in this
// read, its last row in prev of each tenant's view, marked not reachable
// and keeping when it was observed; a host that left the cluster is
// dropped. Views are sorted by tenant and their rows by host.
func keepPerHost[V, H any, PV interface {
	*V
	perHost[H]
}, PH interface {
	*H
	hostRow
}](prev, cur []V, answered map[string]bool, why map[string]string, nodes []Node) []V {
	inCluster := map[string]bool{}
	for _, n := range nodes {
		inCluster[n.ID] = true
	}
	idx := map[string]int{}
	for i := range cur {
		idx[PV(&cur[i]).tenantName()] = i
	}
	for j := range prev {
		p := PV(&prev[j])
		for _, h := range *p.hostRows() {
			node := PH(&h).nodeID()
			if answered[node] || (len(nodes) > 0 && !inCluster[node]) {
				continue
			}
			PH(&h).unanswered(orText(why[node], "its observation was not read this time"))
			i, ok := idx[p.tenantName()]
			if !ok {
				i = len(cur)
				idx[p.tenantName()] = i
				var v V
				PV(&v).setTenant(p.tenantName())
				cur = append(cur, v)
			}
			rows := PV(&cur[i]).hostRows()
			*rows = append(*rows, h)
		}
	}
	return sortPerHost[V, H, PV, PH](cur)
}

// sortPerHost sorts views by tenant and each view's rows by host (on
// copies of the rows: a view may share them with the last read).
func sortPerHost[V, H any, PV interface {
	*V
	perHost[H]
}, PH interface {
	*H
	hostRow
}](vs []V) []V {
	for i := range vs {
		rows := PV(&vs[i]).hostRows()
		*rows = slices.Clone(*rows)
		slices.SortFunc(*rows, func(a, b H) int { return strings.Compare(PH(&a).nodeID(), PH(&b).nodeID()) })
	}
	slices.SortFunc(vs, func(a, b V) int { return strings.Compare(PV(&a).tenantName(), PV(&b).tenantName()) })
	return nonNil(vs)
}

func (t *TenantBGP) tenantName() string        { return t.Tenant }
func (t *TenantBGP) setTenant(n string)        { t.Tenant = n }
func (t *TenantBGP) hostRows() *[]BGPHost      { return &t.Hosts }
func (h *BGPHost) nodeID() string              { return h.Node }
func (h *BGPHost) unanswered(why string)       { h.Reachable, h.Error = false, why }
func (t *TenantAttachment) tenantName() string { return t.Tenant }
func (t *TenantAttachment) setTenant(n string) { t.Tenant = n }
func (t *TenantAttachment) hostRows() *[]AttachmentHost {
	return &t.Hosts
}
func (h *AttachmentHost) nodeID() string        { return h.Node }
func (h *AttachmentHost) unanswered(why string) { h.Reachable, h.Error = false, why }
