package web

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Event kinds on the timeline.
const (
	EventLeader   = "leader-change"
	EventNode     = "node"
	EventVIPMove  = "vip-move"
	EventLB       = "lb"
	EventDraining = "draining"
)

// maxEvents bounds the timeline kept in memory and sent to a browser.
const maxEvents = 500

// Event is one change the dashboard saw between two snapshots.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Subject string    `json:"subject"`
	Message string    `json:"message"`
	// Warning marks a change for the worse (a host lost, a VIP moved away
	// from a failed holder, a load balancer no longer serving).
	Warning bool `json:"warning"`
	// Subjects are every load balancer a host event concerns (a member
	// shared by several load balancers changes once for all of them).
	Subjects []string `json:"subjects,omitempty"`
	// Tenant and Host: the tenant and DNS name of a certificate event.
	Tenant string `json:"tenant,omitempty"`
	Host   string `json:"host,omitempty"`
}

// memberEvent is the message of a member's health change
// (proxy.memberChanged): one per load balancer whose pools hold it.
var memberEvent = regexp.MustCompile(`^member (\S+) of pool (\S+) is (up|down): `)

// hostEvents turns a host's events newer than after into timeline
// events. The same change of one member, reported once per load balancer
// sharing it, becomes one event naming them all.
func hostEvents(h *pb.HostObservation, after uint64) []Event {
	var out []Event
	index := map[string]int{}
	for _, e := range h.GetEvents() {
		if e.GetSeq() <= after || e.GetType() == EventLeader {
			continue // leader changes come from the cluster status
		}
		msg, key := e.GetMessage(), ""
		if m := memberEvent.FindStringSubmatchIndex(msg); m != nil && e.GetLoadBalancer() != "" {
			// member ADDR is up|down: reason, whatever the pool's name
			key = e.GetType() + " " + msg[m[2]:m[3]] + " " + msg[m[6]:]
			if i, ok := index[key]; ok {
				ev := &out[i]
				if !slices.Contains(ev.Subjects, e.GetLoadBalancer()) {
					ev.Subjects = append(ev.Subjects, e.GetLoadBalancer())
					ev.Message += fmt.Sprintf("; also %s (pool %s)", e.GetLoadBalancer(), msg[m[4]:m[5]])
				}
				continue
			}
			msg += " (" + e.GetLoadBalancer() + ")"
		}
		ev := Event{
			Time: e.GetTime().AsTime(), Kind: e.GetType(), Subject: orText(e.GetLoadBalancer(), e.GetNodeId()),
			Message: e.GetNodeId() + ": " + msg, Warning: e.GetSeverity() == "warning",
			Tenant: e.GetTenant(), Host: e.GetHost(),
		}
		if e.GetLoadBalancer() != "" {
			ev.Subjects = []string{e.GetLoadBalancer()}
		}
		if key != "" {
			index[key] = len(out)
		}
		out = append(out, ev)
	}
	return out
}

// diff returns what changed from prev to cur, in a stable order. With no
// previous snapshot it reports nothing: the first view is the baseline.
// lastHeld keeps the last hosts that held each VIP across calls, so a VIP
// that was briefly held by nobody is reported as moved from its last
// holder; diff updates it.
func diff(prev, cur *Snapshot, lastHeld map[string][]string) []Event {
	if cur != nil {
		defer func() {
			for addr, hs := range holdersByVIP(cur.Cluster.VIPs) {
				if len(hs) > 0 {
					lastHeld[addr] = hs
				}
			}
		}()
	}
	if prev == nil || cur == nil {
		return nil
	}
	var out []Event
	add := func(kind, subject string, warn bool, format string, args ...any) {
		out = append(out, Event{Time: cur.Time, Kind: kind, Subject: subject, Message: fmt.Sprintf(format, args...), Warning: warn})
	}
	pc, cc := prev.Cluster, cur.Cluster
	if pc.Leader != cc.Leader {
		switch {
		case cc.Leader == "":
			add(EventLeader, pc.Leader, true, "leader %s lost; no leader", pc.Leader)
		case pc.Leader == "":
			add(EventLeader, cc.Leader, false, "%s elected leader (term %d)", cc.Leader, cc.Term)
		default:
			add(EventLeader, cc.Leader, true, "leader moved %s → %s (term %d)", pc.Leader, cc.Leader, cc.Term)
		}
	}
	before := map[string]Node{}
	for _, n := range pc.Nodes {
		before[n.ID] = n
	}
	for _, n := range cc.Nodes {
		b, ok := before[n.ID]
		switch {
		case !ok:
			add(EventNode, n.ID, false, "%s joined as %s", n.ID, n.Suffrage)
		case b.Healthy && !n.Healthy:
			add(EventNode, n.ID, true, "%s unhealthy: %s", n.ID, orText(n.Error, n.Role))
		case !b.Healthy && n.Healthy:
			add(EventNode, n.ID, false, "%s healthy again (%s)", n.ID, n.Role)
		}
		if ok && b.Draining != n.Draining {
			if n.Draining {
				add(EventDraining, n.ID, false, "%s draining: gives up its VIPs, keeps serving", n.ID)
			} else {
				add(EventDraining, n.ID, false, "%s no longer draining", n.ID)
			}
		}
		delete(before, n.ID)
	}
	for _, id := range sortedKeys(before) {
		add(EventNode, id, true, "%s left the cluster", id)
	}

	oldHolders := holdersByVIP(pc.VIPs)
	newHolders := holdersByVIP(cc.VIPs)
	for _, addr := range unionKeys(oldHolders, newHolders) {
		was, now := oldHolders[addr], newHolders[addr]
		if slices.Equal(was, now) {
			continue
		}
		why := vipReason(cc.VIPs, addr, now)
		switch {
		case len(now) == 0:
			add(EventVIPMove, addr, true, "VIP %s no longer held (was %s)%s", addr, strings.Join(was, ", "), why)
		case len(was) == 0 && len(lastHeld[addr]) > 0 && !slices.Equal(lastHeld[addr], now):
			add(EventVIPMove, addr, true, "VIP %s moved %s → %s%s", addr, strings.Join(lastHeld[addr], ", "), strings.Join(now, ", "), why)
		case len(was) == 0:
			add(EventVIPMove, addr, false, "VIP %s taken by %s%s", addr, strings.Join(now, ", "), why)
		default:
			add(EventVIPMove, addr, true, "VIP %s moved %s → %s%s", addr, strings.Join(was, ", "), strings.Join(now, ", "), why)
		}
	}

	oldLBs := map[string]LB{}
	for _, lb := range prev.LBs {
		oldLBs[lb.ID] = lb
	}
	for _, lb := range cur.LBs {
		b, ok := oldLBs[lb.ID]
		delete(oldLBs, lb.ID)
		switch {
		case !ok:
			add(EventLB, lb.ID, lb.Status != StatusServing, "load balancer %s created: %s%s", lb.ID, lb.Status, reasonText(lb.Reasons))
		case b.Status != lb.Status:
			add(EventLB, lb.ID, lb.Status != StatusServing, "load balancer %s %s → %s%s", lb.ID, b.Status, lb.Status, reasonText(lb.Reasons))
		}
	}
	for _, id := range sortedKeys(oldLBs) {
		add(EventLB, id, false, "load balancer %s deleted", id)
	}
	return out
}

func holdersByVIP(vips []VIP) map[string][]string {
	m := map[string][]string{}
	for _, v := range vips {
		var hs []string
		for _, h := range v.Holders {
			if h.State == "holding" || h.State == "announcing" {
				hs = append(hs, h.Node)
			}
		}
		slices.Sort(hs)
		m[v.Address] = hs
	}
	return m
}

// vipReason is the reason a new holder gave for taking addr.
func vipReason(vips []VIP, addr string, holders []string) string {
	for _, v := range vips {
		if v.Address != addr {
			continue
		}
		for _, h := range v.Holders {
			if h.Reason != "" && (len(holders) == 0 || slices.Contains(holders, h.Node)) {
				return " (" + h.Reason + ")"
			}
		}
	}
	return ""
}

func reasonText(r []string) string {
	if len(r) == 0 {
		return ""
	}
	return " (" + strings.Join(r, "; ") + ")"
}

func orText(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, compareAddr)
	return keys
}
