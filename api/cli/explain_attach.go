package cli

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// writeTenantAttachment prints a tenant's attachment and its state on
// each host.
func writeTenantAttachment(w io.Writer, now time.Time, tn *pb.Tenant, hosts []*pb.HostObservation) {
	a := tn.GetAttachment()
	if a == nil {
		return
	}
	v := a.GetVxlan()
	via := ""
	if u := v.GetUnderlay(); u != "" {
		via = " over " + u
	}
	gw := ""
	if g := a.GetGateway(); g != "" {
		gw = ", the tenant's other networks through " + g
	}
	fmt.Fprintf(w, "\nAttachment (namespace %s on each host, VXLAN VNI %d port %d to %s%s, MTU %d%s)\n",
		api.AttachmentNamespace(tn.GetName()), v.GetVni(), api.VXLANPort(a), list(v.GetRemotes()), via, api.AttachmentMTU(a), gw)
	t := newTable(w)
	t.row("  HOST", "ADDRESS", "STATE", "SINCE", "REASON")
	known := map[string]bool{}
	for _, h := range hosts {
		found := false
		for _, o := range h.GetTenantAttachments() {
			if o.GetTenant() != tn.GetName() {
				continue
			}
			found = true
			t.row("  "+h.GetNodeId(), orDash(o.GetAddress()), o.GetState(), stamp(now, o.GetSince()), o.GetReason())
		}
		if !found && h.GetReachable() {
			t.row("  "+h.GetNodeId(), orDash(a.GetHosts()[h.GetNodeId()]), "unknown", "-", "the host reports no attachment (an older release, or the change has not reached it yet)")
		}
		known[h.GetNodeId()] = true
	}
	for _, id := range slices.Sorted(maps.Keys(a.GetHosts())) {
		if !known[id] {
			t.row("  "+id, a.GetHosts()[id], "no such host", "-", "attachment.hosts names it, but no host of the cluster has this node id, so none attaches it; cluster status lists the node ids")
		}
	}
	_ = t.flush()
}

// writeDialPath says, per host, through which attachment the members of
// tenant are dialled (nothing for a tenant without one).
func writeDialPath(w io.Writer, tenant string, hosts []*pb.HostObservation) {
	first := true
	for _, h := range hosts {
		for _, o := range h.GetTenantAttachments() {
			if o.GetTenant() != tenant {
				continue
			}
			if first {
				fmt.Fprintln(w, "  Members are dialled from the tenant's attachment:")
				first = false
			}
			what := fmt.Sprintf("namespace %s (VNI %d, from %s): %s", o.GetNamespace(), o.GetVni(), orDash(o.GetAddress()), o.GetState())
			if o.GetState() != "up" {
				what += ", so its members are not dialled from this host: " + o.GetReason()
			}
			fmt.Fprintf(w, "  %s: %s\n", h.GetNodeId(), what)
		}
	}
}

// writeAttachmentPools prints the VIP pools that live in tn's attachment
// and, per VIP of theirs that a host reports, its state there (holding
// inside the tenant's namespace, or released with the reason).
func writeAttachmentPools(w io.Writer, now time.Time, tn *pb.Tenant, pools []*pb.Object, hosts []*pb.HostObservation) {
	first := true
	for _, o := range pools {
		p := o.GetVipPool()
		if p.GetAttachment() != tn.GetName() || tn.GetName() == "" {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nVIP pools in the attachment (announced and served inside namespace %s)\n", api.AttachmentNamespace(tn.GetName()))
			first = false
		}
		fmt.Fprintf(w, "  %s (%s, %s)\n", p.GetName(), list(p.GetCidrs()), p.GetMode())
		rs, _ := api.ParsePoolRanges(p.GetCidrs())
		t := newTable(w)
		t.row("    VIP", "HOST", "STATE", "SINCE", "REASON")
		rows := 0
		for _, h := range hosts {
			for _, v := range h.GetVips() {
				a, err := netip.ParseAddr(v.GetAddress())
				if err != nil || !slices.ContainsFunc(rs, func(r api.Range) bool { return r.Contains(a) }) {
					continue
				}
				t.row("    "+v.GetAddress(), h.GetNodeId(), v.GetState(), stamp(now, v.GetSince()), v.GetReason())
				rows++
			}
		}
		if rows == 0 {
			t.row("    -", "-", "-", "-", "no host reports a VIP of this pool (no load balancer has an address in it, or no host could hold one)")
		}
		_ = t.flush()
	}
}
