package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// writeTenantBGP prints a tenant's BGP peering and, per host, its
// sessions and the routes accepted and dropped with the reason.
func writeTenantBGP(w io.Writer, now time.Time, tn *pb.Tenant, hosts []*pb.HostObservation) {
	b := tn.GetBgp()
	if b == nil {
		return
	}
	up := "not re-announced to the fabric routers"
	switch {
	case tn.GetAttachment() != nil:
		up = "sessions made and routes installed inside the tenant's attachment, " + api.AttachmentNamespace(tn.GetName()) + ", on each host; not re-announced"
	case b.GetReannounce():
		up = "re-announced to the fabric routers with community " + b.GetCommunity()
	}
	if tx, rx, mult, ok := api.TenantBFD(b); ok {
		up += fmt.Sprintf("; BFD minTx %s, minRx %s, multiplier %d", tx, rx, mult)
	}
	fmt.Fprintf(w, "\nBGP (asn %d, peers %s, at most %d prefixes per session and %d on each host together; %s)\n",
		b.GetAsn(), list(b.GetPeers()), api.TenantBGPMaxPrefixes(b), api.TenantBGPMaxPrefixesTotal(b), up)
	sessions, routes := newTable(w), newTable(w)
	withBFD := b.GetBfd() != nil
	if withBFD {
		sessions.row("  HOST", "PEER", "FROM", "STATE", "SINCE", "PREFIXES", "BFD", "REASON")
	} else {
		sessions.row("  HOST", "PEER", "FROM", "STATE", "SINCE", "PREFIXES", "REASON")
	}
	routes.row("  HOST", "PREFIX", "NEXT HOP", "PEER", "ROUTE")
	var problems, upstream, vips []string
	more := 0
	for _, h := range hosts {
		for _, o := range h.GetTenantBgp() {
			if o.GetTenant() != tn.GetName() {
				continue
			}
			if o.GetProblem() != "" {
				problems = append(problems, fmt.Sprintf("  %s: %s", h.GetNodeId(), o.GetProblem()))
				continue
			}
			if b.GetReannounce() {
				upstream = append(upstream, "  "+h.GetNodeId()+": "+reannounceText(now, o))
			}
			if t := announcedText(now, o); t != "" {
				vips = append(vips, "  "+h.GetNodeId()+": "+t)
			}
			for _, s := range o.GetSessions() {
				if withBFD {
					sessions.row("  "+h.GetNodeId(), s.GetPeer(), fromText(s.GetAttachment()), s.GetState(), stamp(now, s.GetSince()), fmt.Sprint(s.GetReceived()), bfdText(now, s), s.GetReason())
					continue
				}
				sessions.row("  "+h.GetNodeId(), s.GetPeer(), fromText(s.GetAttachment()), s.GetState(), stamp(now, s.GetSince()), fmt.Sprint(s.GetReceived()), s.GetReason())
			}
			installed := "installed"
			if a := o.GetAttachment(); a != "" {
				installed = "installed in " + a
			}
			for _, r := range o.GetAccepted() {
				routes.row("  "+h.GetNodeId(), r.GetPrefix(), r.GetNextHop(), r.GetPeer(), installed)
			}
			for _, r := range o.GetDropped() {
				routes.row("  "+h.GetNodeId(), r.GetPrefix(), r.GetNextHop(), r.GetPeer(), "dropped: "+r.GetReason())
			}
			more += int(o.GetAcceptedCount()) - len(o.GetAccepted()) + int(o.GetDroppedCount()) - len(o.GetDropped())
		}
	}
	_ = sessions.flush()
	for _, p := range problems {
		fmt.Fprintln(w, p)
	}
	if len(vips) > 0 {
		fmt.Fprintln(w, "\nVIPs announced to the tenant's speakers (bgp pools in its attachment)")
		for _, v := range vips {
			fmt.Fprintln(w, v)
		}
	}
	if len(upstream) > 0 {
		fmt.Fprintln(w, "\nRe-announced to the fabric routers")
		for _, u := range upstream {
			fmt.Fprintln(w, u)
		}
	}
	fmt.Fprintln(w, "\nRoutes from the tenant's speakers")
	_ = routes.flush()
	if more > 0 {
		fmt.Fprintf(w, "  (%d more not listed; each host lists at most 100 accepted and 100 dropped)\n", more)
	}
}

// bfdText is a session's BFD state, why it went down and since when.
func bfdText(now time.Time, s *pb.TenantBGPSession) string {
	if s.GetBfd() == "" {
		return "-"
	}
	out := s.GetBfd()
	if r := s.GetBfdReason(); r != "" {
		out += " (" + r + ")"
	}
	if s.GetBfdSince() != nil {
		out += " since " + age(now, s.GetBfdSince()) + " ago"
	}
	return out
}

// fromText says where a session is made from: the host's own routing
// table, or the namespace of the tenant's attachment.
func fromText(attachment string) string {
	if attachment == "" {
		return "host"
	}
	return attachment
}

// reannounceText says what one host re-announces of a tenant's routes.
func reannounceText(now time.Time, o *pb.TenantBGPObservation) string {
	switch {
	case o.GetReannounceError() != "":
		return fmt.Sprintf("cannot announce the tenant's routes since %s: %s (tried again at each pass)", stamp(now, o.GetReannounceSince()), o.GetReannounceError())
	case o.GetReannounceSince() != nil:
		n := o.GetReannounced()
		unit := "routes"
		if n == 1 {
			unit = "route"
		}
		if o.GetFabricSessions() == 0 {
			return fmt.Sprintf("%d %s given to its speaker since %s, but it has no established session with a fabric router (its serve config's bgp.peers): they reach none", n, unit, stamp(now, o.GetReannounceSince()))
		}
		return fmt.Sprintf("%d %s on %d established fabric sessions since %s", n, unit, o.GetFabricSessions(), stamp(now, o.GetReannounceSince()))
	}
	return "reports nothing (an older release, or the change has not reached it yet)"
}

// announcedText says which VIPs of bgp pools in the tenant's attachment
// one host announces to the tenant's speakers, with their next hop, how
// many prefixes its sessions are sent, and why one cannot be announced
// ("" when it announces none and has nothing to say).
func announcedText(now time.Time, o *pb.TenantBGPObservation) string {
	if len(o.GetAnnounced()) == 0 && o.GetAnnounceError() == "" {
		return ""
	}
	var out string
	if len(o.GetAnnounced()) == 0 {
		out = "none"
	}
	for i, r := range o.GetAnnounced() {
		if i > 0 {
			out += ", "
		}
		out += r.GetPrefix() + " via " + r.GetNextHop()
	}
	var sent []string
	for _, s := range o.GetSessions() {
		sent = append(sent, fmt.Sprintf("%s %d", s.GetPeer(), s.GetAdvertised()))
	}
	if len(sent) > 0 {
		out += " (prefixes sent: " + strings.Join(sent, ", ") + ")"
	}
	if o.GetAnnounceSince() != nil {
		out += " since " + stamp(now, o.GetAnnounceSince())
	}
	if e := o.GetAnnounceError(); e != "" {
		out += "; not announced: " + e
	}
	return out
}
