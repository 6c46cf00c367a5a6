package observe

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Phases of a load balancer as the hosts see it.
const (
	Serving  = "Serving"
	Degraded = "Degraded"
	Failing  = "Failing"
	Refused  = "Refused"
	Pending  = "Pending"
	Unknown  = "Unknown"
)

// Held reports whether a VIP state means the host carries its traffic.
func Held(state string) bool { return state == "holding" || state == "announcing" }

// Assess computes a load balancer's observed status from the desired
// object and the hosts' observations. It is pure: the same inputs give
// the same result.
//
//   - Pending: no address yet, or no host serves the revision that wrote it.
//   - Refused: every host that answered refused it (its data plane reports
//     problems and opens none of its listeners).
//   - Failing: no host holds its VIP while hosts report it (for its
//     tenant: a host that holds an address several tenants' attachments
//     carry, without this tenant's attachment up, does not), none of its
//     listeners is bound anywhere, or no member is healthy on any host.
//     A member is not healthy when its active check says down, or when
//     what clients get says Failing (JudgePassive) on a host and no host
//     has seen it serve: with PassiveMinimum requests and a Healthy
//     verdict. A host without traffic to the member (not the VIP's
//     holder) has no evidence of its own and follows the others.
//   - Degraded: it serves, but something is wrong somewhere (a listener not
//     bound on one host, a member down or passively Degraded, a
//     certificate not obtained, a problem in its spec).
//   - Serving: nothing is wrong.
//   - Unknown: no host answered.
func Assess(lb *pb.LoadBalancer, hosts []*pb.HostObservation) *pb.ObservedStatus {
	name := lb.GetTenant() + "/" + lb.GetName()
	out := &pb.ObservedStatus{}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, p := range lb.GetStatus().GetProblems() {
		add("spec: %s: %s", p.GetField(), p.GetReason())
	}
	addr := lb.GetStatus().GetAddress()
	addrs := lb.GetStatus().GetAddresses() // every VIP of a dual-stack one
	if len(addrs) == 0 {
		addrs = []string{addr}
	}
	if addr == "" {
		out.Phase, out.Reason = Pending, "no address allocated yet"
		out.Problems = problems
		return out
	}

	passiveDown := passiveDownMembers(name, hosts)
	var reachable, refused, pending, unbound, noMember, serving int
	vipReported := false
	// unserved: a host holds the VIP for other tenants sharing it, not
	// for this one (VIPHolding.unserved_tenants).
	unserved := false
	var released []string
	// Per VIP of a dual-stack load balancer: reported by some host, and
	// held by one.
	vipSeen, vipHeld := map[string]bool{}, map[string]bool{}
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		reachable++
		id := h.GetNodeId()
		for _, v := range h.GetVips() {
			if !slices.Contains(addrs, v.GetAddress()) {
				continue
			}
			vipReported = true
			vipSeen[v.GetAddress()] = true
			if why, ok := v.GetUnservedTenants()[lb.GetTenant()]; ok && Held(v.GetState()) {
				unserved = true
				released = append(released, id+": holds it for the other tenants that share it, not for "+lb.GetTenant()+": "+why)
			} else if Held(v.GetState()) {
				vipHeld[v.GetAddress()] = true
				if !slices.Contains(out.HeldBy, id) {
					out.HeldBy = append(out.HeldBy, id)
				}
			} else if v.GetReason() != "" {
				released = append(released, id+": "+v.GetReason())
			}
		}
		var listeners, bound int
		for _, l := range h.GetListeners() {
			if l.GetLoadBalancer() != name {
				continue
			}
			listeners++
			if l.GetBound() {
				bound++
				continue
			}
			add("%s: listeners[%d] %s/%s is not bound: %s; free the port on %s or move the listener to another port",
				id, l.GetIndex(), l.GetAddress(), l.GetProtocol(), l.GetError(), id)
		}
		var hostProblems []string
		for _, p := range h.GetProblems() {
			if p.GetLoadBalancer() != name || strings.Contains(p.GetReason(), "cannot listen on") || p.GetField() == "pools" {
				continue
			}
			hostProblems = append(hostProblems, p.GetField()+": "+p.GetReason())
		}
		if listeners == 0 {
			switch {
			case len(hostProblems) > 0:
				refused++
				for _, p := range hostProblems {
					add("%s: refused: %s", id, p)
				}
			case h.GetRevision() < lb.GetMeta().GetRevision():
				pending++
				add("%s: serves revision %d, the load balancer was written at %d; wait for the host to catch up", id, h.GetRevision(), lb.GetMeta().GetRevision())
			default:
				pending++
				add("%s: serves none of its listeners", id)
			}
			continue
		}
		for _, p := range hostProblems {
			add("%s: %s", id, p)
		}
		if bound == 0 {
			unbound++
		}
		members, healthy := 0, 0
		for _, po := range h.GetPools() {
			if po.GetLoadBalancer() != name {
				continue
			}
			for _, m := range po.GetMembers() {
				members++
				key := po.GetPool() + " " + m.GetAddress()
				verdict, evidence := JudgeObserved(m)
				switch {
				case m.GetHealthy() && verdict == Degraded:
					add("%s: pool %s member %s is degraded: %s; check the member", id, po.GetPool(), m.GetAddress(), evidence)
				case m.GetHealthy() && verdict == Failing:
					add("%s: pool %s member %s is down: %s; check the member", id, po.GetPool(), m.GetAddress(), evidence)
					continue
				case m.GetHealthy() && passiveDown[key]:
					// No evidence of its own here (no traffic): another
					// host's clients get failures and none are served.
					continue
				}
				if m.GetHealthy() {
					healthy++
					continue
				}
				reason := m.GetReason()
				if reason == "" {
					reason = "not healthy"
				}
				if verdict == Failing || verdict == Degraded {
					reason = evidence + " (" + reason + ")"
				}
				add("%s: pool %s member %s is down: %s; check the member and its health check", id, po.GetPool(), m.GetAddress(), reason)
			}
		}
		if members > 0 && healthy == 0 {
			noMember++
		}
		if bound > 0 && (members == 0 || healthy > 0) {
			serving++
		}
		for _, c := range h.GetCertificates() {
			if c.GetTenant() != lb.GetTenant() || !routesHost(lb, c.GetHost()) {
				continue
			}
			switch c.GetState() {
			case "failed", "refused", "missing":
				add("%s: certificate for %s is %s: %s", id, c.GetHost(), c.GetState(), orNone(c.GetLastError()))
			}
		}
	}
	slices.Sort(out.HeldBy)
	out.HeldBy = slices.Compact(out.HeldBy)
	if len(out.HeldBy) > 0 {
		for _, a := range addrs {
			if vipSeen[a] && !vipHeld[a] {
				add("no host holds VIP %s, one of the load balancer's %d: its clients of that family get no answer", a, len(addrs))
			}
		}
	}
	out.Problems = problems
	switch {
	case reachable == 0:
		out.Phase, out.Reason = Unknown, "no LB host answered"
	case refused == reachable:
		out.Phase, out.Reason = Refused, firstOf(problems, "refused by the data plane")
	case pending+refused == reachable:
		out.Phase, out.Reason = Pending, firstOf(problems, "not served yet")
	case vipReported && len(out.HeldBy) == 0:
		out.Phase = Failing
		out.Reason = "no host holds VIP " + addr
		if unserved {
			out.Reason += " for tenant " + lb.GetTenant() + ", which shares the address with other tenants: no host that holds it has the tenant's attachment up"
		}
		if len(released) > 0 {
			slices.Sort(released)
			out.Reason += " (" + strings.Join(released, "; ") + ")"
		}
	case unbound > 0 && unbound == reachable-pending-refused:
		out.Phase, out.Reason = Failing, "no listener is bound on any host: "+firstWith(problems, "is not bound")
	case noMember > 0 && serving == 0:
		out.Phase, out.Reason = Failing, "no healthy member on any host: "+firstWith(problems, " is down: ")
	case len(problems) > 0:
		out.Phase, out.Reason = Degraded, problems[0]
	default:
		out.Phase = Serving
	}
	return out
}

// passiveDownMembers returns the members of lb ("pool address") that
// some host judges Failing by what its clients get and that no host has
// seen serve (a Healthy verdict).
func passiveDownMembers(lb string, hosts []*pb.HostObservation) map[string]bool {
	failing, served := map[string]bool{}, map[string]bool{}
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, po := range h.GetPools() {
			if po.GetLoadBalancer() != lb {
				continue
			}
			for _, m := range po.GetMembers() {
				key := po.GetPool() + " " + m.GetAddress()
				switch v, _ := JudgeObserved(m); v {
				case Failing:
					failing[key] = true
				case Healthy:
					served[key] = true
				}
			}
		}
	}
	for k := range served {
		delete(failing, k)
	}
	return failing
}

// routesHost reports whether lb routes requests for host.
func routesHost(lb *pb.LoadBalancer, host string) bool {
	for _, r := range lb.GetRoutes() {
		if strings.EqualFold(r.GetHost(), host) {
			return true
		}
	}
	return false
}

func firstOf(problems []string, def string) string {
	if len(problems) > 0 {
		return problems[0]
	}
	return def
}

func firstWith(problems []string, sub string) string {
	for _, p := range problems {
		if strings.Contains(p, sub) {
			return p
		}
	}
	return firstOf(problems, "")
}

func orNone(s string) string {
	if s == "" {
		return "no error recorded"
	}
	return s
}
