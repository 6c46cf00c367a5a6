package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// explainEvents is how many recent events explain shows per host.
const explainEvents = 10

func (a *app) explainCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "explain lb TENANT/NAME | tenant NAME | node ID",
		Short: "Walk one load balancer's whole path (or a tenant's, or a host's) and say what is wrong and what to do",
		Long: "Explain shows, in order, where a load balancer's spec came from, the revision that wrote it,\n" +
			"its VIP and which host holds it and why, per host whether each listener is bound and how\n" +
			"every member's health check goes, its certificates, and the last events. Each problem\n" +
			"says what to do.",
		Example: "  teapot-lb explain lb acme/shop\n  teapot-lb explain tenant acme\n  teapot-lb explain node lb2",
		Args:    args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			kind, err := api.ParseKind(argv[0])
			if err != nil {
				return err
			}
			switch kind {
			case api.KindLoadBalancer:
				ref, err := refOf(kind, argv[1], tenant)
				if err != nil {
					return err
				}
				return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
					return a.explainLB(ctx, cmd.OutOrStdout(), c, ref)
				})
			case api.KindTenant:
				return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
					return a.explainTenant(ctx, cmd.OutOrStdout(), c, argv[1])
				})
			case api.KindNode:
				return a.call(cmd, func(ctx context.Context, c *client.Conn) error {
					return a.explainNode(ctx, cmd.OutOrStdout(), c, argv[1])
				})
			}
			return fmt.Errorf("explain works on lb, tenant and node, not %s", argv[0])
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the load balancer")
	return cmd
}

// explainLB prints one load balancer's path.
func (a *app) explainLB(ctx context.Context, w io.Writer, c *client.Conn, ref *pb.ObjectRef) error {
	name := ref.GetTenant() + "/" + ref.GetName()
	o, err := c.Admin.Get(ctx, &pb.GetRequest{Ref: ref})
	if status.Code(err) == codes.NotFound {
		return a.explainMissingLB(ctx, w, c, name, err)
	}
	if err != nil {
		return err
	}
	lb := o.GetLoadBalancer()
	obs, err := c.Admin.Observe(ctx, &pb.ObserveRequest{LoadBalancer: name, MaxEvents: explainEvents})
	if err != nil {
		return fmt.Errorf("ask the hosts what they see: %w", err)
	}
	hosts := obs.GetHosts()
	st := observe.Assess(lb, hosts)
	now := a.now()

	fmt.Fprintf(w, "Load balancer %s: %s\n", name, st.GetPhase())
	if st.GetReason() != "" {
		fmt.Fprintf(w, "  %s\n", st.GetReason())
	}

	fmt.Fprintln(w, "\n1. Spec")
	if kind := api.AgentKind(lb.GetName()); kind != "" {
		fmt.Fprintf(w, "  origin:    the agent of tenant %s, from a %s of its cluster (name %s); change it there, not here\n", lb.GetTenant(), kind, lb.GetName())
	} else {
		fmt.Fprintln(w, "  origin:    the operator (teapot-lb apply)")
	}
	m := lb.GetMeta()
	fmt.Fprintf(w, "  revision:  %d (generation %d, created %s, last changed %s)\n", m.GetRevision(), m.GetGeneration(), stamp(now, m.GetCreated()), stamp(now, m.GetUpdated()))
	writeSpecListeners(w, lb)
	writeSpecRoutes(w, lb)
	for _, p := range lb.GetStatus().GetProblems() {
		fmt.Fprintf(w, "  problem:   %s: %s\n", p.GetField(), p.GetReason())
	}
	if p := api.FamilyProblem(lb); p != nil {
		fmt.Fprintf(w, "  problem:   %s: %s\n", p.GetField(), p.GetReason())
	}

	fmt.Fprintln(w, "\n2. VIP")
	addrs := api.StatusAddresses(lb)
	addr := strings.Join(addrs, ", ")
	pool := lb.GetVip().GetPool()
	switch {
	case addr == "":
		fmt.Fprintf(w, "  address:   none yet: pool %s gave none; check `teapot-lb get pool %s` for free addresses\n", orDash(pool), orDash(pool))
	case len(lb.GetVip().GetFamilies()) > 0:
		fmt.Fprintf(w, "  addresses: %s (pool %s, families %s)\n", addr, orDash(pool), strings.Join(lb.GetVip().GetFamilies(), ", "))
	default:
		fmt.Fprintf(w, "  address:   %s (pool %s)\n", addr, orDash(pool))
	}
	vipRows := 0
	for _, h := range hosts {
		for _, v := range h.GetVips() {
			if !slices.Contains(addrs, v.GetAddress()) {
				continue
			}
			vipRows++
			fmt.Fprintf(w, "  %-10s %s %s (%s) since %s: %s\n", h.GetNodeId()+":", v.GetState(), v.GetAddress(), v.GetMode(), stamp(now, v.GetSince()), orDash(v.GetReason()))
		}
	}
	if addr != "" && vipRows == 0 {
		fmt.Fprintln(w, "  no host reports this VIP (static pools, or hosts without a VIP interface, only bind it)")
	}
	for _, h := range hosts {
		for _, d := range h.GetDnsNames() {
			switch {
			case d.GetAnswered():
				fmt.Fprintf(w, "  %-10s DNS answers %s with %s\n", h.GetNodeId()+":", d.GetName(), d.GetAddress())
			default:
				fmt.Fprintf(w, "  %-10s DNS leaves %s out of %s: %s\n", h.GetNodeId()+":", orDash(d.GetAddress()), d.GetName(), d.GetReason())
			}
		}
	}

	fmt.Fprintln(w, "\n3. Listeners per host")
	t := newTable(w)
	t.row("  HOST", "LISTENER", "ADDRESS", "PROTOCOL", "BOUND", "SINCE", "WHAT TO DO")
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, l := range h.GetListeners() {
			todo := ""
			if !l.GetBound() {
				todo = l.GetError() + "; free the port on " + h.GetNodeId() + " or move the listener"
			}
			t.row("  "+h.GetNodeId(), "listeners["+strconv.Itoa(int(l.GetIndex()))+"]", l.GetAddress(), l.GetProtocol(), yesNo(l.GetBound()), stamp(now, l.GetSince()), todo)
		}
	}
	_ = t.flush()

	fmt.Fprintln(w, "\n4. Members per host")
	t = newTable(w)
	t.row("  HOST", "POOL", "MEMBER", "HEALTHY", "LAST CHECK", "CLIENTS (60 s)", "WHY / WHAT TO DO")
	for _, h := range hosts {
		for _, p := range h.GetPools() {
			for _, mb := range p.GetMembers() {
				why := mb.GetReason()
				verdict, evidence := observe.JudgeObserved(mb)
				healthy := mb.GetHealthy() && verdict != observe.Failing
				switch {
				case evidence != "" && why != "":
					why = evidence + "; " + why
				case evidence != "":
					why = evidence
				}
				switch {
				case !mb.GetHealthy():
					why += "; check that " + mb.GetAddress() + " serves and that the health check matches it"
				case evidence != "":
					why += "; check that " + mb.GetAddress() + " serves"
				}
				t.row("  "+h.GetNodeId(), p.GetPool(), mb.GetAddress(), yesNo(healthy), stamp(now, mb.GetLastCheck()), clients(mb.GetPassive()), why)
			}
		}
	}
	_ = t.flush()
	writeDialPath(w, lb.GetTenant(), hosts)

	var certRows [][]string
	for _, h := range hosts {
		for _, ce := range h.GetCertificates() {
			if !routes(lb, ce.GetHost()) {
				continue
			}
			notAfter := ""
			if ce.GetNotAfter() != nil {
				notAfter = ce.GetNotAfter().AsTime().UTC().Format(time.DateOnly)
			}
			certRows = append(certRows, []string{"  " + h.GetNodeId(), ce.GetHost(), ce.GetSource(), ce.GetState(), notAfter, ce.GetLastError()})
		}
	}
	fmt.Fprintln(w, "\n5. Certificates per host")
	if len(certRows) == 0 {
		fmt.Fprintln(w, "  none (no https listener with acme, or no uploaded certificate for its hosts)")
	} else {
		t = newTable(w)
		t.row("  HOST", "NAME", "SOURCE", "STATE", "NOT AFTER", "LAST ERROR")
		for _, r := range certRows {
			t.row(r...)
		}
		_ = t.flush()
	}

	fmt.Fprintln(w, "\n6. Traffic per host (since the host started)")
	t = newTable(w)
	t.row("  HOST", "ACTIVE", "CONNECTIONS", "REQUESTS", "ERRORS (5xx)", "P99", "IN", "OUT")
	rows := 0
	for _, h := range hosts {
		for _, tr := range h.GetTraffic() {
			var total uint64
			for _, n := range tr.GetRequests() {
				total += n
			}
			p99 := "-"
			if tr.GetP99Seconds() > 0 {
				p99 = "≤" + time.Duration(tr.GetP99Seconds()*float64(time.Second)).String()
			}
			t.row("  "+h.GetNodeId(), strconv.FormatInt(tr.GetActiveConnections(), 10), strconv.FormatUint(tr.GetConnections(), 10),
				strconv.FormatUint(total, 10), strconv.FormatUint(tr.GetRequests()["5xx"], 10), p99, bytesText(tr.GetBytesIn()), bytesText(tr.GetBytesOut()))
			rows++
		}
	}
	if rows == 0 {
		fmt.Fprintln(w, "  none recorded")
	} else {
		_ = t.flush()
	}

	writeUnreachable(w, hosts)
	if len(st.GetProblems()) > 0 {
		fmt.Fprintln(w, "\nProblems")
		for _, p := range st.GetProblems() {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	writeExplainEvents(w, hosts)
	return nil
}

// explainMissingLB explains a load balancer that is not stored: the
// refusals the hosts recorded for it, if any.
func (a *app) explainMissingLB(ctx context.Context, w io.Writer, c *client.Conn, name string, notFound error) error {
	evs, err := c.Admin.Events(ctx, &pb.EventsRequest{LoadBalancer: name, MaxEvents: explainEvents})
	if err != nil {
		return notFound
	}
	var refusals []*pb.Event
	for _, ev := range evs.GetEvents() {
		if ev.GetType() == observe.EventTenantRefused {
			refusals = append(refusals, ev)
		}
	}
	if len(refusals) == 0 {
		return notFound
	}
	last := refusals[len(refusals)-1]
	fmt.Fprintf(w, "Load balancer %s: %s\n", name, observe.Refused)
	fmt.Fprintf(w, "  %s\n", last.GetMessage())
	fmt.Fprintln(w, "\n1. Spec")
	fmt.Fprintf(w, "  not stored: the cluster refused the tenant's change (%s on %s); fix the object in the tenant's cluster, the agent sends it again when it changes\n",
		stamp(a.now(), last.GetTime()), last.GetNodeId())
	fmt.Fprintln(w, "\nEvents")
	writeEventLines(w, evs.GetEvents())
	return nil
}

// explainTenant prints a tenant's load balancers with their status and
// its recent events.
func (a *app) explainTenant(ctx context.Context, w io.Writer, c *client.Conn, name string) error {
	o, err := c.Admin.Get(ctx, &pb.GetRequest{Ref: &pb.ObjectRef{Kind: api.KindTenant, Name: name}})
	if err != nil {
		return err
	}
	tn := o.GetTenant()
	resp, err := c.Admin.List(ctx, &pb.ListRequest{Kind: api.KindLoadBalancer, Tenant: name})
	if err != nil {
		return err
	}
	obs, err := c.Admin.Observe(ctx, &pb.ObserveRequest{Tenant: name, MaxEvents: explainEvents})
	if err != nil {
		return fmt.Errorf("ask the hosts what they see: %w", err)
	}
	now := a.now()
	fmt.Fprintf(w, "Tenant %s\n", name)
	fmt.Fprintf(w, "  revision:  %d (created %s, last changed %s)\n", tn.GetMeta().GetRevision(), stamp(now, tn.GetMeta().GetCreated()), stamp(now, tn.GetMeta().GetUpdated()))
	fmt.Fprintf(w, "  domains:   %s\n  networks:  %s\n  pools:     %s\n", orDash(list(tn.GetDomains())), orDash(list(tn.GetNetworks())), orDash(list(tn.GetPools())))
	if n := len(tn.GetRevokedCredentials()); n > 0 {
		fmt.Fprintf(w, "  revoked credentials: %d\n", n)
	}
	objs := resp.GetObjects()
	sortObjects(objs)
	fmt.Fprintf(w, "\nLoad balancers (%d)\n", len(objs))
	if len(objs) > 0 {
		t := newTable(w)
		t.row("  NAME", "STATUS", "ADDRESS", "ORIGIN", "REASON")
		for _, o := range objs {
			lb := o.GetLoadBalancer()
			st := observe.Assess(lb, obs.GetHosts())
			origin := "operator"
			if k := api.AgentKind(lb.GetName()); k != "" {
				origin = "agent (" + k + ")"
			}
			t.row("  "+lb.GetName(), st.GetPhase(), strings.Join(api.StatusAddresses(lb), ","), origin, st.GetReason())
		}
		_ = t.flush()
	}
	writeTenantBGP(w, now, tn, obs.GetHosts())
	writeTenantAttachment(w, now, tn, obs.GetHosts())
	if tn.GetAttachment() != nil {
		pools, err := c.Admin.List(ctx, &pb.ListRequest{Kind: api.KindVIPPool})
		if err != nil {
			return fmt.Errorf("list the VIP pools: %w", err)
		}
		writeAttachmentPools(w, now, tn, pools.GetObjects(), obs.GetHosts())
	}
	writeTenantCPU(w, now, tn, obs.GetHosts())
	writeUnreachable(w, obs.GetHosts())
	writeExplainEvents(w, obs.GetHosts())
	return nil
}

// explainNode prints what one host sees.
func (a *app) explainNode(ctx context.Context, w io.Writer, c *client.Conn, id string) error {
	o, err := c.Admin.Get(ctx, &pb.GetRequest{Ref: &pb.ObjectRef{Kind: api.KindNode, Name: id}})
	if err != nil {
		return err
	}
	n := o.GetNode()
	obs, err := c.Admin.Observe(ctx, &pb.ObserveRequest{Node: id, MaxEvents: explainEvents})
	if err != nil {
		return fmt.Errorf("ask the host what it sees: %w", err)
	}
	now := a.now()
	fmt.Fprintf(w, "Node %s\n", id)
	fmt.Fprintf(w, "  suffrage:  %s\n  raft:      %s\n  api:       %s\n  vip iface: %s\n", orDash(n.GetSuffrage()), n.GetRaftAddr(), n.GetApiAddr(), orDash(n.GetVipInterface()))
	if n.GetDraining() {
		fmt.Fprintf(w, "  draining:  yes: it holds no VIP; undo with `teapot-lb cluster drain %s --undo`\n", id)
	} else {
		fmt.Fprintln(w, "  draining:  no")
	}
	if len(obs.GetHosts()) == 0 || !obs.GetHosts()[0].GetReachable() {
		why := "not in the cluster's configuration"
		if len(obs.GetHosts()) > 0 {
			why = obs.GetHosts()[0].GetError()
		}
		fmt.Fprintf(w, "\nThe host did not answer: %s; check that teapot-lb runs there and its API port is reachable\n", why)
		return nil
	}
	h := obs.GetHosts()[0]
	fmt.Fprintf(w, "  serves revision %d\n", h.GetRevision())
	fmt.Fprintln(w, "\nVIPs")
	if len(h.GetVips()) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, v := range h.GetVips() {
		fmt.Fprintf(w, "  %s (%s) %s since %s: %s [%s]\n", v.GetAddress(), v.GetMode(), v.GetState(), stamp(now, v.GetSince()), orDash(v.GetReason()), list(v.GetLoadBalancers()))
	}
	var unbound, down int
	for _, l := range h.GetListeners() {
		if !l.GetBound() {
			unbound++
		}
	}
	members := 0
	for _, p := range h.GetPools() {
		for _, m := range p.GetMembers() {
			members++
			if !m.GetHealthy() {
				down++
			}
		}
	}
	fmt.Fprintf(w, "\nData plane\n  listeners: %d, not bound: %d\n  members:   %d, down: %d\n", len(h.GetListeners()), unbound, members, down)
	writeDNSZones(w, h.GetDnsZones())
	if len(h.GetProblems()) > 0 {
		fmt.Fprintln(w, "\nProblems")
		for _, p := range h.GetProblems() {
			fmt.Fprintf(w, "  - %s: %s: %s\n", p.GetLoadBalancer(), p.GetField(), p.GetReason())
		}
	}
	writeExplainEvents(w, obs.GetHosts())
	return nil
}

// bytesText renders a byte count with a binary unit.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// routes reports whether lb routes requests for host.
func routes(lb *pb.LoadBalancer, host string) bool {
	for _, r := range lb.GetRoutes() {
		if strings.EqualFold(r.GetHost(), host) {
			return true
		}
	}
	return false
}

func writeUnreachable(w io.Writer, hosts []*pb.HostObservation) {
	var lines []string
	for _, h := range hosts {
		if !h.GetReachable() {
			lines = append(lines, fmt.Sprintf("  %s: %s; what it sees is missing above", h.GetNodeId(), orDash(h.GetError())))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\nUnreachable hosts")
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}
}

func writeExplainEvents(w io.Writer, hosts []*pb.HostObservation) {
	var evs []*pb.Event
	for _, h := range hosts {
		evs = append(evs, h.GetEvents()...)
	}
	slices.SortStableFunc(evs, func(a, b *pb.Event) int {
		if c := a.GetTime().AsTime().Compare(b.GetTime().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(a.GetNodeId(), b.GetNodeId())
	})
	if len(evs) > explainEvents {
		evs = evs[len(evs)-explainEvents:]
	}
	fmt.Fprintln(w, "\nLast events")
	writeEventLines(w, evs)
}

func writeEventLines(w io.Writer, evs []*pb.Event) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	t := newTable(w)
	for _, ev := range evs {
		t.row("  "+ev.GetTime().AsTime().UTC().Format(time.RFC3339), ev.GetNodeId(), ev.GetType(), ev.GetMessage())
	}
	_ = t.flush()
}

// stamp renders a time as its age and UTC time ("3m ago, 2025-06-01T11:57:00Z").
func stamp(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return age(now, ts) + " ago (" + ts.AsTime().UTC().Format(time.RFC3339) + ")"
}

// clients sums up what clients got from a member: "3 of 412 requests
// failed", "-" with nothing sent to it.
func clients(p *pb.PassiveHealth) string {
	if p.GetTotal() == 0 {
		return "-"
	}
	return fmt.Sprintf("%d of %d %s failed", p.GetFailed(), p.GetTotal(), p.GetUnit())
}

// writeDNSZones prints the zones the host's DNS serves and, for those
// signed, the DS record to publish in the parent zone.
func writeDNSZones(w io.Writer, zones []*pb.DNSZoneObservation) {
	if len(zones) == 0 {
		return
	}
	fmt.Fprintln(w, "\nDNS zones")
	for _, z := range zones {
		switch {
		case !z.GetSigned():
			fmt.Fprintf(w, "  %s not signed\n", z.GetZone())
		case z.GetDs() == "":
			fmt.Fprintf(w, "  %s signed, no key yet: %s (queries with DO get SERVFAIL)\n", z.GetZone(), z.GetError())
		default:
			fmt.Fprintf(w, "  %s signed, key tag %d\n    DS to publish in the parent zone: %s\n    DNSKEY: %s\n", z.GetZone(), z.GetKeyTag(), z.GetDs(), z.GetDnskey())
			if z.GetNextDs() != "" {
				fmt.Fprintf(w, "    rollover to key tag %d since %s (both keys sign; finish not before %s)\n      DS of the new key: %s\n      DNSKEY: %s\n",
					z.GetNextKeyTag(), z.GetRolloverStarted().AsTime().UTC().Format(time.RFC3339), z.GetRolloverFinishAfter().AsTime().UTC().Format(time.RFC3339),
					z.GetNextDs(), z.GetNextDnskey())
			}
		}
		writeDNSPush(w, z.GetPush())
	}
}

// writeDNSPush prints a zone's RFC 2136 push to the operator's primary.
func writeDNSPush(w io.Writer, p *pb.DNSPushObservation) {
	if p == nil {
		return
	}
	if !p.GetActive() {
		fmt.Fprintf(w, "    pushed to %s (key %s) by the leader, not this host\n", p.GetServer(), p.GetKey())
	} else {
		fmt.Fprintf(w, "    pushed to %s (key %s) by this host: %d records there, %d pushed in %d updates, %d failures\n",
			p.GetServer(), p.GetKey(), p.GetRecords(), p.GetPushed(), p.GetUpdates(), p.GetFailures())
	}
	if p.GetLastSuccess() != nil {
		fmt.Fprintf(w, "      last success %s\n", p.GetLastSuccess().AsTime().UTC().Format(time.RFC3339))
	}
	if p.GetLastError() != "" {
		fmt.Fprintf(w, "      last error %s: %s\n", p.GetLastErrorAt().AsTime().UTC().Format(time.RFC3339), p.GetLastError())
	}
}
