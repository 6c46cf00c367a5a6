package tenantbgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	gobgpapi "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/vip/internal/bgppath"
)

// ErrNoRelay: this host has no relay (no bgp: section), so no session to
// a tenant's speakers to announce a VIP on.
var ErrNoRelay = errors.New("this host has no tenant BGP sessions (no bgp: section)")

// A VIP of a bgp pool in an attached tenant's attachment
// (VIPPool.attachment) is announced to that tenant's speakers over the
// relay's sessions with them, and to no one else: the relay's speaker has
// no other peers (the fabric routers are the VIP speaker's), and its
// export policy sends each VIP only to the sessions of the tenants whose
// attachments carry it, with this host's address in the tenant's
// attachment as next hop. The VIP layer says which VIPs, for which
// tenants (AnnounceVIP, WithdrawVIP); each pass converges gobgp on it
// (syncExports).
//
// gobgp keeps one path per VIP in its RIB (two tenants may have a VIP of
// the same address, each in its own attachment); the policy holds one
// statement per tenant: its sessions (a neighbor set of the addresses
// gobgp has for them, the tunnels' loopback addresses), its VIPs (a
// prefix set), and its next hop. A change makes the statements of the
// tenants whose part changed under new names, assigns the policy, and
// deletes the names no longer assigned, and the sessions of those
// tenants alone are soft reset out, so that gobgp withdraws what the new
// policy no longer sends them.

// vipExport is one VIP the VIP layer wants announced.
type vipExport struct {
	tenants     []string
	communities []uint32
}

// exportPlan is what one tenant's sessions are sent: its VIPs, with next
// hop, to the sessions gobgp knows by neighbors.
type exportPlan struct {
	nh        netip.Addr
	vips      []netip.Addr
	neighbors []netip.Addr
}

// exports is what the relay last put in gobgp.
type exports struct {
	gen   int
	names map[string]exportName // each tenant's statement in place, by tenant
	print string                // the plan it was made for
	plan  map[string]exportPlan
	paths map[netip.Addr]string // each VIP's path in the RIB, by its attributes
	err   string                // why the last sync failed
	since time.Time             // when the announced set or the error last changed
	// problems say, by tenant, why a VIP the VIP layer wants announced
	// to it is not.
	problems map[string]string
}

type exportName struct{ policy, neighbors, prefixes string }

// AnnounceVIP has the VIP a announced to the speakers of each of tenants
// (attached tenants with bgp), with communities; it replaces what was
// asked for a before. The next pass does it.
func (r *Relay) AnnounceVIP(a netip.Addr, tenants []string, communities []uint32) error {
	if r == nil || r.srv == nil {
		return ErrNoRelay
	}
	r.mu.Lock()
	if r.vips == nil {
		r.vips = map[netip.Addr]vipExport{}
	}
	r.vips[a] = vipExport{tenants: slices.Clone(tenants), communities: slices.Clone(communities)}
	r.mu.Unlock()
	r.poke()
	return nil
}

// WithdrawVIP withdraws the VIP a from every tenant's speakers at the
// next pass.
func (r *Relay) WithdrawVIP(a netip.Addr) error {
	if r == nil || r.srv == nil {
		return nil
	}
	r.mu.Lock()
	_, had := r.vips[a]
	delete(r.vips, a)
	r.mu.Unlock()
	if had {
		r.poke()
	}
	return nil
}

// planExports is what each tenant's sessions must be sent, from the VIPs
// wanted and the sessions in place, and why a tenant named for a VIP is
// sent nothing. It is pure.
func planExports(w *world, vips map[netip.Addr]vipExport, sessions map[netip.Addr]*session) (map[string]exportPlan, map[string]string) {
	plan := map[string]exportPlan{}
	problems := map[string]string{}
	for _, a := range sortedAddrs(vips) {
		for _, name := range vips[a].tenants {
			t := w.tenants[name]
			switch {
			case t == nil:
				problems[name] = fmt.Sprintf("VIP %s: tenant %s has no bgp here, so no session to announce it on", a, name)
				continue
			case t.space == "":
				problems[name] = fmt.Sprintf("VIP %s: tenant %s has no attachment", a, name)
				continue
			case !t.own.IsValid():
				problems[name] = fmt.Sprintf("VIP %s: tenant %s's attachment lists no address for this host", a, name)
				continue
			case t.own.Is4() != a.Is4():
				problems[name] = fmt.Sprintf("VIP %s: this host's address in tenant %s's attachment (%s) is of the other family, so it cannot be the next hop", a, name, t.own)
				continue
			}
			p := plan[name]
			p.nh = t.own
			p.vips = append(p.vips, a)
			plan[name] = p
		}
	}
	for addr, s := range sessions {
		if p, ok := plan[s.tenant]; ok && s.key.space != "" && s.key.addr.Is4() == p.nh.Is4() {
			p.neighbors = append(p.neighbors, addr)
			plan[s.tenant] = p
		}
	}
	for name, p := range plan {
		slices.SortFunc(p.neighbors, netip.Addr.Compare)
		plan[name] = p
	}
	return plan, problems
}

// planPrint sums a plan up: a new one makes a new policy.
func planPrint(plan map[string]exportPlan) string {
	var b strings.Builder
	for _, name := range sortedKeys(plan) {
		p := plan[name]
		fmt.Fprintf(&b, "%s>%s:%v:%v;", name, p.nh, p.vips, p.neighbors)
	}
	return b.String()
}

// syncExports converges gobgp on the VIPs the VIP layer wants announced:
// the paths, then the policy that sends each to its tenants' sessions.
// A VIP leaving is deleted before the policy changes, one coming added
// after, so that gobgp withdraws it from every session it was sent to
// and never sends one to a session the new policy does not name.
func (r *Relay) syncExports(ctx context.Context, w *world, now time.Time) {
	r.mu.Lock()
	vips := maps.Clone(r.vips)
	r.mu.Unlock()
	e := &r.exp
	plan, problems := planExports(w, vips, r.sessions)
	wantPaths := map[netip.Addr]string{}
	for _, p := range plan {
		for _, a := range p.vips {
			wantPaths[a] = pathPrint(vips[a].communities)
		}
	}
	var errs []error
	before := announcedOf(e.plan)
	for _, a := range sortedAddrs(e.paths) {
		if _, ok := wantPaths[a]; ok {
			continue // kept, or replaced by the add below
		}
		p, err := vipPath(a, nil, true)
		if err == nil {
			err = r.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("withdraw %s: %w", a, err))
			continue
		}
		delete(e.paths, a)
	}
	if print := planPrint(plan); print != e.print {
		touched := changedNeighbors(e.plan, plan)
		if err := r.setExportPolicy(ctx, plan); err != nil {
			errs = append(errs, err)
		} else {
			e.print, e.plan = print, plan
			for _, n := range touched {
				if _, ok := r.sessions[n]; !ok {
					continue
				}
				// gobgp withdraws what the policy no longer sends the
				// session, and sends what it now does.
				if err := r.srv.ResetPeer(ctx, &gobgpapi.ResetPeerRequest{Address: n.String(), Soft: true,
					Direction: gobgpapi.ResetPeerRequest_DIRECTION_OUT}); err != nil && ctx.Err() == nil {
					r.log.Debug("soft reset out", "peer", r.speaker(n), "err", err)
				}
			}
		}
	}
	if e.paths == nil {
		e.paths = map[netip.Addr]string{}
	}
	for _, a := range sortedAddrs(wantPaths) {
		if k, ok := e.paths[a]; ok && k == wantPaths[a] {
			continue
		}
		p, err := vipPath(a, vips[a].communities, false)
		if err == nil {
			_, err = r.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("announce %s: %w", a, err))
			continue
		}
		e.paths[a] = wantPaths[a]
	}
	msg := ""
	if err := errors.Join(errs...); err != nil {
		msg = err.Error()
		r.log.Warn("cannot announce the VIPs in tenants' attachments; tries again at the next pass", "err", err)
	}
	if msg != e.err || !maps.EqualFunc(before, announcedOf(e.plan), slices.Equal) || e.since.IsZero() {
		e.since = now
	}
	e.err, e.problems = msg, problems
}

// changedNeighbors are the sessions, under old or next, of the tenants
// whose plan differs between them: the only ones a change of the policy
// sends or withdraws anything on, so the only ones soft reset. A tenant
// whose VIPs, next hop and sessions stay is not charged for another's
// change.
func changedNeighbors(old, next map[string]exportPlan) []netip.Addr {
	touched := map[netip.Addr]bool{}
	for _, m := range []map[string]exportPlan{old, next} {
		for name, p := range m {
			if samePlan(old[name], next[name]) {
				continue
			}
			for _, a := range p.neighbors {
				touched[a] = true
			}
		}
	}
	return sortedAddrs(touched)
}

// samePlan reports whether a tenant's part of two plans is the same.
func samePlan(a, b exportPlan) bool {
	return a.nh == b.nh && slices.Equal(a.vips, b.vips) && slices.Equal(a.neighbors, b.neighbors)
}

// namesSession reports whether the policy in place names x as a session of a
// tenant.
func (e *exports) namesSession(x netip.Addr) bool {
	for _, p := range e.plan {
		if slices.Contains(p.neighbors, x) {
			return true
		}
	}
	return false
}

// announcedOf lists the VIPs each tenant is sent under plan: none while
// it has no session to send them on.
func announcedOf(plan map[string]exportPlan) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for name, p := range plan {
		if len(p.neighbors) > 0 {
			out[name] = p.vips
		}
	}
	return out
}

// setExportPolicy makes plan the speaker's export policy: new names for
// the tenants whose part changed (a tenant whose part stays keeps its
// statement, and costs nothing), the assignment, then the names no
// longer assigned deleted.
func (r *Relay) setExportPolicy(ctx context.Context, plan map[string]exportPlan) error {
	e := &r.exp
	gen := e.gen + 1
	names := map[string]exportName{}
	var fresh []exportName
	var pols []*gobgpapi.Policy
	for i, name := range sortedKeys(plan) {
		p := plan[name]
		if len(p.neighbors) == 0 {
			continue // no session yet: one added later makes a new plan
		}
		if n, ok := e.names[name]; ok && samePlan(e.plan[name], p) {
			names[name] = n
			pols = append(pols, &gobgpapi.Policy{Name: n.policy})
			continue
		}
		n := exportName{policy: fmt.Sprintf("vips-%d-%d", gen, i), neighbors: fmt.Sprintf("vips-%d-%d-n", gen, i), prefixes: fmt.Sprintf("vips-%d-%d-p", gen, i)}
		var nbrs []string
		for _, a := range p.neighbors {
			nbrs = append(nbrs, netip.PrefixFrom(a, a.BitLen()).String())
		}
		var pfx []*gobgpapi.Prefix
		for _, a := range p.vips {
			pfx = append(pfx, &gobgpapi.Prefix{IpPrefix: netip.PrefixFrom(a, a.BitLen()).String(), MaskLengthMin: uint32(a.BitLen()), MaskLengthMax: uint32(a.BitLen())})
		}
		if err := r.srv.AddDefinedSet(ctx, &gobgpapi.AddDefinedSetRequest{DefinedSet: &gobgpapi.DefinedSet{
			DefinedType: gobgpapi.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: n.neighbors, List: nbrs}}); err != nil {
			return r.dropNames(ctx, append(fresh, n), fmt.Errorf("set the sessions of tenant %s: %w", name, err))
		}
		if err := r.srv.AddDefinedSet(ctx, &gobgpapi.AddDefinedSetRequest{DefinedSet: &gobgpapi.DefinedSet{
			DefinedType: gobgpapi.DefinedType_DEFINED_TYPE_PREFIX, Name: n.prefixes, Prefixes: pfx}}); err != nil {
			return r.dropNames(ctx, append(fresh, n), fmt.Errorf("set the VIPs of tenant %s: %w", name, err))
		}
		pol := &gobgpapi.Policy{Name: n.policy, Statements: []*gobgpapi.Statement{{
			Name: n.policy,
			Conditions: &gobgpapi.Conditions{
				NeighborSet: &gobgpapi.MatchSet{Type: gobgpapi.MatchSet_TYPE_ANY, Name: n.neighbors},
				PrefixSet:   &gobgpapi.MatchSet{Type: gobgpapi.MatchSet_TYPE_ANY, Name: n.prefixes},
				RouteType:   gobgpapi.Conditions_ROUTE_TYPE_LOCAL,
			},
			Actions: &gobgpapi.Actions{RouteAction: gobgpapi.RouteAction_ROUTE_ACTION_ACCEPT,
				Nexthop: &gobgpapi.NexthopAction{Address: p.nh.String()}},
		}}}
		fresh = append(fresh, n)
		if err := r.srv.AddPolicy(ctx, &gobgpapi.AddPolicyRequest{Policy: pol}); err != nil {
			return r.dropNames(ctx, fresh, fmt.Errorf("set the policy of tenant %s: %w", name, err))
		}
		names[name] = n
		pols = append(pols, &gobgpapi.Policy{Name: n.policy})
	}
	if err := r.srv.SetPolicyAssignment(ctx, &gobgpapi.SetPolicyAssignmentRequest{Assignment: &gobgpapi.PolicyAssignment{
		Name: "global", Direction: gobgpapi.PolicyDirection_POLICY_DIRECTION_EXPORT, Policies: pols,
		DefaultAction: gobgpapi.RouteAction_ROUTE_ACTION_REJECT}}); err != nil {
		return r.dropNames(ctx, fresh, fmt.Errorf("assign the export policy: %w", err))
	}
	var old []exportName
	for _, name := range sortedKeys(e.names) {
		if n := e.names[name]; names[name] != n {
			old = append(old, n)
		}
	}
	e.gen, e.names = gen, names
	_ = r.dropNames(ctx, old, nil)
	return nil
}

// dropNames deletes the policies and sets of names (best effort) and
// returns err.
func (r *Relay) dropNames(ctx context.Context, names []exportName, err error) error {
	for _, n := range names {
		_ = r.srv.DeletePolicy(ctx, &gobgpapi.DeletePolicyRequest{Policy: &gobgpapi.Policy{Name: n.policy}, All: true})
		_ = r.srv.DeleteDefinedSet(ctx, &gobgpapi.DeleteDefinedSetRequest{DefinedSet: &gobgpapi.DefinedSet{
			DefinedType: gobgpapi.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: n.neighbors}, All: true})
		_ = r.srv.DeleteDefinedSet(ctx, &gobgpapi.DeleteDefinedSetRequest{DefinedSet: &gobgpapi.DefinedSet{
			DefinedType: gobgpapi.DefinedType_DEFINED_TYPE_PREFIX, Name: n.prefixes}, All: true})
	}
	return err
}

func pathPrint(comms []uint32) string {
	var b strings.Builder
	for _, c := range comms {
		b.WriteString(strconv.FormatUint(uint64(c), 10) + " ")
	}
	return b.String()
}

// vipPath is the gobgp path of VIP a (a host route); the policy sets its
// next hop per tenant.
func vipPath(a netip.Addr, comms []uint32, withdraw bool) (*apiutil.Path, error) {
	var extra []bgp.PathAttributeInterface
	if len(comms) > 0 {
		extra = append(extra, bgp.NewPathAttributeCommunities(slices.Clone(comms)))
	}
	return bgppath.Self(netip.PrefixFrom(a, a.BitLen()), withdraw, extra...)
}

// observeExports adds to o what this host announces to tenant's
// speakers, and to each of its sessions what gobgp sends it.
func (r *Relay) observeExports(name string, o *pb.TenantBGPObservation) {
	e := &r.exp
	p, ok := e.plan[name]
	msg := e.problems[name]
	if ok && len(p.neighbors) == 0 {
		// No statement sends them anywhere (setExportPolicy).
		fam := map[bool]string{true: "IPv4", false: "IPv6"}[p.nh.Is4()]
		msg = strings.TrimPrefix(msg+"; "+fmt.Sprintf("%d VIPs wait for a session with one of the tenant's %s speakers here to be announced on", len(p.vips), fam), "; ")
	} else if ok {
		for _, a := range p.vips {
			o.Announced = append(o.Announced, &pb.TenantRoute{Prefix: netip.PrefixFrom(a, a.BitLen()).String(), NextHop: p.nh.String()})
		}
	}
	if e.err != "" && ok {
		msg = strings.TrimPrefix(msg+"; "+e.err, "; ")
	}
	o.AnnounceError = msg
	if (ok || msg != "") && !e.since.IsZero() {
		o.AnnounceSince = timestamppb.New(e.since)
	}
}

// VIPProblem says why the VIP a, which the VIP layer asked to have
// announced, does not reach a router of every tenant it is for, as of
// the relay's last pass: the reason the relay could not announce it, that
// it waits for the next pass, or that none of the tenant's sessions of
// its family is established. Empty when it reaches them all.
func (r *Relay) VIPProblem(a netip.Addr) string {
	if r == nil || r.srv == nil {
		return ErrNoRelay.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	want, ok := r.vips[a]
	if !ok {
		return ""
	}
	prefix := netip.PrefixFrom(a, a.BitLen()).String()
	var problems []string
	for _, name := range want.tenants {
		o := r.obs[name]
		switch {
		case o == nil:
			problems = append(problems, fmt.Sprintf("tenant %s: not announced (the relay reports no BGP of the tenant on this host, or has not passed since it was asked)", name))
			continue
		case !r.announcedPrefixes()[name][prefix]:
			why := o.GetAnnounceError()
			if why == "" {
				why = "not announced yet (the relay has not passed since it was asked)"
			}
			problems = append(problems, fmt.Sprintf("tenant %s: %s", name, why))
			continue
		}
		carried := false
		for _, s := range o.GetSessions() {
			// The policy sends each of the tenant's sessions of the VIP's
			// family every VIP of that family (setExportPolicy).
			peer, err := netip.ParseAddr(s.GetPeer())
			if err == nil && s.GetState() == "established" && s.GetAttachment() != "" && peer.Is4() == a.Is4() {
				carried = true
				break
			}
		}
		if !carried {
			fam := map[bool]string{true: "IPv4", false: "IPv6"}[a.Is4()]
			problems = append(problems, fmt.Sprintf("tenant %s: no session with its %s speakers is established, so no router of the tenant has the route", name, fam))
		}
	}
	return strings.Join(problems, "; ")
}

// announcedPrefixes returns the prefixes each tenant's observation says
// are announced, made once per pass rather than scanned for each VIP: the
// VIP layer asks for every VIP at each evaluation (r.mu held).
func (r *Relay) announcedPrefixes() map[string]map[string]bool {
	if r.announced == nil {
		r.announced = make(map[string]map[string]bool, len(r.obs))
		for name, o := range r.obs {
			set := make(map[string]bool, len(o.GetAnnounced()))
			for _, x := range o.GetAnnounced() {
				set[x.GetPrefix()] = true
			}
			r.announced[name] = set
		}
	}
	return r.announced
}
