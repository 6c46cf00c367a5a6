package vip

import (
	"strings"
	"time"
)

// standing is what decides whether this host may hold VIPs, gathered by
// the loop at one instant (evaluate): the view of the cluster, the
// host's own state, its interfaces and speaker, and the age of its
// committed state. eligible reads nothing else.
type standing struct {
	ID  string
	Now time.Time
	// Dead is the detection time.
	Dead time.Duration
	View view

	// Leaving: Close hands everything over. Stopping: HandOverClients
	// was called. HandingOver: the data plane's handover of the clients
	// runs now (drained or stopping).
	Leaving, Stopping, HandingOver bool
	// HaveState: a committed state. Synced: it heard the cluster since
	// it started (syncStep). Drained: the operator drained it.
	// Reported: the data plane reported its readiness.
	HaveState, Synced, Drained, Reported bool
	// HaveKey: the heartbeat key is set; Peers: the cluster has members
	// (the key matters only then).
	HaveKey, Peers bool
	// Rejoined is when it last regained its majority after losing it;
	// HandedOver is when its handover ended (zero: not).
	Rejoined, HandedOver time.Time

	// HasARP: it has an interface for arp VIPs (--vip-interface, named
	// ARPInterface), ARPUp: it can carry traffic; HasBGP, BGPInterface
	// and BGPUp the same for the bgp section's interface; Speaker: the
	// BGP speaker runs.
	HasARP, ARPUp bool
	ARPInterface  string
	HasBGP, BGPUp bool
	BGPInterface  string
	Speaker       bool
	// Contact is when it last knew its committed state current (the
	// leader's contact); bgp VIPs need it within StateMaxAge.
	Contact     time.Time
	StateMaxAge time.Duration
}

// eligibility is this host's standing by mode. Any holds the problem
// that keeps it from holding VIPs of any mode ("" none); ARP and BGP add
// each mode's own problems and, for arp, the flags that let it keep what
// it holds (KeepOnly, HoldDown, Rejoining, Handover, HandOff). The loop
// adds what it keeps itself (NotReady, Holding, Rebalance).
type eligibility struct {
	Any, ARP, BGP self
	// Rebalancing: arp VIPs may open their rebalance window (it could
	// hold them: no problem so far, a majority, a committed state).
	Rebalancing bool
	// Eligible: it may hold arp VIPs.
	Eligible bool
	// Wake is when the standing changes with the clock alone (the end of
	// the rejoin or hand-off window; zero: not).
	Wake time.Time
}

// eligible decides this host's standing from in, by the rules in
// DESIGN.md: problems of every mode first (shutting down, no committed
// state, not synced, drained, data plane not reported), then arp's
// (heartbeat key, majority in two-way contact, interface) with the
// windows in which it keeps what it holds (hold-down, rejoin, handover,
// hand-off), then bgp's (interface, committed state too old, speaker).
// It is pure: the clock comes in as in.Now.
func eligible(in standing) eligibility {
	var out eligibility
	me := self{ID: in.ID}
	switch {
	case in.Leaving, in.Stopping && !in.HandingOver:
		me.Problem = "shutting down"
	case !in.HaveState:
		me.Problem = "no committed state yet"
	case !in.Synced:
		me.Problem = "has not heard the cluster since it started"
	case in.Drained && !in.HandingOver:
		me.Problem = problemDrained
	case !in.Reported:
		me.Problem = "the data plane has not reported yet"
	}
	out.Any = me

	arp := me
	if arp.Problem == "" && !in.HaveKey && in.Peers {
		arp.Problem = "no heartbeat key yet"
	}
	arp = arp.withMajority(in.View)
	wake := func(t time.Time) {
		if out.Wake.IsZero() || t.Before(out.Wake) {
			out.Wake = t
		}
	}
	if until := in.Rejoined.Add(in.Dead); in.View.Quorum && !in.Rejoined.IsZero() && in.Now.Before(until) {
		arp.Rejoining = arp.Problem == ""
		wake(until)
	}
	if in.HandingOver && arp.Problem == "" {
		arp.KeepOnly, arp.Handover = true, true
	}
	// Drained and handed over: each VIP stays until its next holder says
	// it holds it, for at most two detection times.
	if until := in.HandedOver.Add(handOffMultiple * in.Dead); arp.Problem == problemDrained && !in.HandedOver.IsZero() && in.Now.Before(until) {
		arp.HandOff = true
		wake(until)
	}
	if arp.Problem == "" && !in.ARPUp {
		arp.Problem = "interface " + in.ARPInterface + " is down"
	}
	out.Rebalancing = arp.Problem == "" && in.View.Quorum && in.HaveState
	if !in.HasARP && arp.Problem == "" {
		arp.Problem = "this host has no --vip-interface for arp pools"
	}
	out.ARP = arp
	out.Eligible = arp.Problem == "" && in.HasARP

	bgp := me
	switch {
	case bgp.Problem != "":
	case !in.BGPUp && in.HasBGP:
		bgp.Problem = "interface " + in.BGPInterface + " is down"
	default:
		bgp.Problem = staleProblem(in.Now, in.Contact, in.StateMaxAge)
	}
	if !in.Speaker && bgp.Problem == "" {
		bgp.Problem = "this host has no bgp: section for bgp pools"
	}
	out.BGP = bgp
	return out
}

// attachmentsStanding says whether this host can carry a VIP that the
// attachments of several tenants carry (vipSpec.Spaces), from why the
// attachment of each tenant cannot carry VIPs here (problems, by tenant;
// absent: it can). notReady, when none of them can, gives every reason;
// otherwise unserved says, by tenant, why the address is not carried here
// for the tenants whose attachment is not up (nil when every one is): the
// host carries it for the others. So a tenant whose attachment is down
// does not take the address from the tenants that share it; holderOf
// prefers a host that carries it for all of them. It is pure.
func attachmentsStanding(spaces []string, problems map[string]string) (notReady string, unserved map[string]string) {
	var why []string
	for _, t := range spaces {
		p := problems[t]
		if p == "" {
			continue
		}
		why = append(why, p)
		if unserved == nil {
			unserved = map[string]string{}
		}
		unserved[t] = p
	}
	if len(spaces) > 0 && len(why) == len(spaces) {
		return strings.Join(why, "; "), nil
	}
	return "", unserved
}
