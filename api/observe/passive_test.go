package observe

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func fails(kv ...any) []*pb.PassiveFailure {
	var out []*pb.PassiveFailure
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &pb.PassiveFailure{Kind: kv[i].(string), Count: uint64(kv[i+1].(int))})
	}
	return out
}

func TestJudgePassive(t *testing.T) {
	t.Parallel()
	const m = "10.20.0.11:30080"
	for _, c := range []struct {
		name     string
		unit     string
		total    uint64
		failures []*pb.PassiveFailure
		verdict  string
		evidence string
	}{
		{"no traffic", "", 0, nil, Unknown, ""},
		{"too few to judge", "", PassiveMinimum - 1, fails("502", PassiveMinimum-1), Unknown, ""},
		{"all 502", UnitRequests, 412, fails("502", 412), Failing, "502 from 10.20.0.11:30080 on 412 of 412 requests in the last 60 s"},
		{"exactly the minimum, all failed", UnitRequests, PassiveMinimum, fails("503", PassiveMinimum), Failing, "503 from 10.20.0.11:30080 on 20 of 20 requests in the last 60 s"},
		{"90 % is failing", UnitRequests, 100, fails("504", 90), Failing, "504 from"},
		{"89 % is degraded", UnitRequests, 100, fails("504", 89), Degraded, "504 from 10.20.0.11:30080 on 89 of 100"},
		{"50 % is degraded", UnitRequests, 100, fails("reset", 50), Degraded, "resets from 10.20.0.11:30080 on 50 of 100"},
		{"49 % is healthy", UnitRequests, 100, fails("reset", 49), Healthy, ""},
		{"mixed kinds, most first", UnitRequests, 412, fails("connect", 112, "502", 300), Failing, "502 from 10.20.0.11:30080 on 300 and connect failures on 112 of 412 requests in the last 60 s"},
		{"l4 connect failures", UnitConnections, 30, fails("connect", 30), Failing, "connect failures to 10.20.0.11:30080 on 30 of 30 connections in the last 60 s"},
		{"timeouts", UnitConnections, 40, fails("timeout", 40), Failing, "timeouts from 10.20.0.11:30080 on 40 of 40 connections"},
		{"more failures than total are capped", UnitRequests, 20, fails("502", 25), Failing, "on 25 of 20"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, ev := JudgePassive(PassiveCounts{Member: m, Unit: c.unit, Total: c.total, Failures: c.failures})
			if v != c.verdict || !strings.Contains(ev, c.evidence) || (c.evidence == "") != (ev == "") {
				t.Errorf("got %s %q, want %s containing %q", v, ev, c.verdict, c.evidence)
			}
		})
	}
}

// passiveHost is host() with every member's passive counts set.
func passiveHost(id string, vip string, total uint64, failures ...any) *pb.HostObservation {
	h := host(id, true, []bool{true, true}, vip)
	for _, m := range h.Pools[0].Members {
		if total > 0 {
			m.Passive = &pb.PassiveHealth{WindowSeconds: 60, Unit: UnitRequests, Total: total, Failures: fails(failures...)}
		}
	}
	return h
}

func TestAssessPassive(t *testing.T) {
	t.Parallel()
	oneDegraded := passiveHost("n1", "holding", 100)
	oneDegraded.Pools[0].Members[1].Passive.Failures = fails("502", 60)
	oneFailing := passiveHost("n1", "holding", 100)
	oneFailing.Pools[0].Members[1].Passive.Failures = fails("502", 100)
	for _, c := range []struct {
		name   string
		hosts  []*pb.HostObservation
		phase  string
		reason string
	}{
		{"healthy traffic", []*pb.HostObservation{passiveHost("n1", "holding", 100, "502", 10)}, Serving, ""},
		{"too little traffic to judge", []*pb.HostObservation{passiveHost("n1", "holding", 10, "502", 10)}, Serving, ""},
		{"every member answers 502", []*pb.HostObservation{passiveHost("n1", "holding", 412, "502", 412)}, Failing,
			"no healthy member on any host: n1: pool app member 10.20.0.1:80 is down: 502 from 10.20.0.1:80 on 412 of 412 requests in the last 60 s"},
		{"the holder's evidence counts for the hosts without traffic", []*pb.HostObservation{passiveHost("n1", "holding", 412, "502", 412), passiveHost("n2", "released", 0)}, Failing,
			"n1: pool app member 10.20.0.1:80 is down: 502 from"},
		{"a host that sees members serve keeps it serving", []*pb.HostObservation{passiveHost("n1", "announcing", 412, "502", 412), passiveHost("n2", "announcing", 412)}, Degraded,
			"n1: pool app member 10.20.0.1:80 is down: 502 from"},
		{"one member degraded", []*pb.HostObservation{oneDegraded}, Degraded, "n1: pool app member 10.20.0.2:80 is degraded: 502 from 10.20.0.2:80 on 60 of 100 requests"},
		{"one member failing", []*pb.HostObservation{oneFailing}, Degraded, "n1: pool app member 10.20.0.2:80 is down: 502 from 10.20.0.2:80 on 100 of 100 requests"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := Assess(assessLB(), c.hosts)
			if got.Phase != c.phase || !strings.Contains(got.Reason, c.reason) || (c.phase == Serving) != (got.Reason == "") {
				t.Errorf("got %s %q (problems %q), want %s containing %q", got.Phase, got.Reason, got.Problems, c.phase, c.reason)
			}
		})
	}
}
