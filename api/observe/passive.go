package observe

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Passive health: what clients get from a member, judged over a sliding
// window on each host (the data plane keeps the counts, see
// proxy/DESIGN.md "Passive health"). The rule is JudgePassive; Assess
// and the hosts' readiness apply it alike.
const (
	// PassiveWindow is the window the counts cover.
	PassiveWindow = 60 * time.Second
	// PassiveMinimum is the fewest requests (or connections) in the
	// window that give a verdict; below it the verdict is Unknown and
	// the member counts as healthy.
	PassiveMinimum = 20
	// PassiveFailingPercent: a member whose failures are at least this
	// share of its requests is Failing (taken as down, like a failed
	// active check).
	PassiveFailingPercent = 90
	// PassiveDegradedPercent: at least this share (and below the
	// failing one) is Degraded: it serves, with a problem shown.
	PassiveDegradedPercent = 50
)

// Healthy is the verdict on a member whose clients are served.
const Healthy = "Healthy"

// Units of passive counts.
const (
	UnitRequests    = "requests"
	UnitConnections = "connections"
)

// Kinds of passive failures. Statuses 502, 503 and 504 are kinds of
// their own ("502"); a 500 or any other 5xx is the application's answer
// and proves the member serves, so it is no failure.
const (
	FailConnect  = "connect"
	FailTimeout  = "timeout"
	FailReset    = "reset"
	FailProtocol = "protocol"
)

// PassiveCounts are one member's counts over the window on one host.
type PassiveCounts struct {
	// Member is its address ("10.20.0.11:30080").
	Member string
	// Unit is UnitRequests or UnitConnections.
	Unit  string
	Total uint64
	// Failures by kind, in any order; their sum is the failed count.
	Failures []*pb.PassiveFailure
}

// JudgePassive is the passive health rule. With fewer than
// PassiveMinimum requests in the window the verdict is Unknown; with at
// least PassiveFailingPercent of them failed it is Failing, with at least
// PassiveDegradedPercent Degraded, else Healthy. The evidence names the
// failures, most first, the member and the window: "502 from
// 10.20.0.11:30080 on 412 of 412 requests in the last 60 s"; it is empty
// for Healthy and Unknown.
func JudgePassive(c PassiveCounts) (verdict, evidence string) {
	var failed uint64
	for _, f := range c.Failures {
		failed += f.GetCount()
	}
	if verdict = PassiveVerdict(c.Total, failed); verdict != Failing && verdict != Degraded {
		return verdict, ""
	}
	fs := slices.Clone(c.Failures)
	slices.SortStableFunc(fs, func(a, b *pb.PassiveFailure) int {
		return cmp.Or(cmp.Compare(b.GetCount(), a.GetCount()), strings.Compare(a.GetKind(), b.GetKind()))
	})
	var parts []string
	for i, f := range fs {
		if f.GetCount() == 0 {
			continue
		}
		what := failureWords(f.GetKind())
		if i == 0 {
			what += " " + failurePrep(f.GetKind()) + " " + c.Member
		}
		parts = append(parts, what+" on "+strconv.FormatUint(f.GetCount(), 10))
	}
	unit := cmp.Or(c.Unit, UnitRequests)
	return verdict, fmt.Sprintf("%s of %d %s in the last %d s", strings.Join(parts, " and "), c.Total, unit, int(PassiveWindow/time.Second))
}

// PassiveVerdict is JudgePassive's verdict alone, from the total and the
// failed count; it allocates nothing.
func PassiveVerdict(total, failed uint64) string {
	failed = min(failed, total)
	switch {
	case total < PassiveMinimum:
		return Unknown
	case failed*100 >= total*PassiveFailingPercent:
		return Failing
	case failed*100 >= total*PassiveDegradedPercent:
		return Degraded
	}
	return Healthy
}

// Readiness reasons the data plane gives the VIP manager for a load
// balancer whose listeners are open but whose members cannot serve:
// NoHealthyMember while none of them is healthy (active check or
// Failing by passive health), Recovering for RecoverHoldDown after one
// became healthy again. The VIP manager keeps the VIPs of such load
// balancers (there is nowhere better to send the traffic) except in a
// bgp pool with withdrawWhenDown (see vip/DESIGN.md "Member health and
// VIPs").
const (
	NoHealthyMember = "no healthy member in any of its pools"
	Recovering      = "a member recovered less than the hold-down ago"
	RecoverHoldDown = 10 * time.Second
)

// MemberHealthOnly reports whether a readiness reason is only about the
// members' health (NoHealthyMember or Recovering).
func MemberHealthOnly(reason string) bool {
	return reason == NoHealthyMember || reason == Recovering
}

// JudgeObserved applies JudgePassive to a member observation; a member
// with no passive counts is Unknown.
func JudgeObserved(m *pb.MemberObservation) (verdict, evidence string) {
	p := m.GetPassive()
	if p == nil {
		return Unknown, ""
	}
	return JudgePassive(PassiveCounts{Member: m.GetAddress(), Unit: p.GetUnit(), Total: p.GetTotal(), Failures: p.GetFailures()})
}

func failureWords(kind string) string {
	switch kind {
	case FailConnect:
		return "connect failures"
	case FailTimeout:
		return "timeouts"
	case FailReset:
		return "resets"
	case FailProtocol:
		return "malformed answers"
	}
	return kind
}

func failurePrep(kind string) string {
	if kind == FailConnect {
		return "to"
	}
	return "from"
}
