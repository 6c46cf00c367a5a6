package vip

import (
	"maps"
	"testing"
	"time"
)

// TestEligible: each rule of this host's standing, one case each, from a
// host that may hold VIPs of every mode.
func TestEligible(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const dead = 100 * time.Millisecond
	ok := func() standing {
		return standing{
			ID: "a", Now: now, Dead: dead, View: view{Quorum: true, Mutual: 3, Need: 2},
			HaveState: true, Synced: true, Reported: true, HaveKey: true, Peers: true,
			HasARP: true, ARPUp: true, ARPInterface: "eth1",
			HasBGP: true, BGPUp: true, BGPInterface: "lo", Speaker: true,
			Contact: now, StateMaxAge: 10 * time.Second,
		}
	}
	type want struct {
		any, arp, bgp string
		eligible      bool
		rebalancing   bool
		keepOnly      bool
		holdDown      bool
		rejoining     bool
		handover      bool
		handOff       bool
		wake          time.Time
	}
	for _, tt := range []struct {
		name string
		set  func(*standing)
		want want
	}{
		{"eligible for every mode", func(*standing) {}, want{eligible: true, rebalancing: true}},
		{"leaving", func(in *standing) { in.Leaving = true },
			want{any: "shutting down", arp: "shutting down", bgp: "shutting down"}},
		{"stopping before its handover", func(in *standing) { in.Stopping = true },
			want{any: "shutting down", arp: "shutting down", bgp: "shutting down"}},
		{"stopping, handing its clients over: keeps what it holds", func(in *standing) { in.Stopping, in.HandingOver = true, true },
			want{eligible: true, rebalancing: true, keepOnly: true, handover: true}},
		{"no committed state", func(in *standing) { in.HaveState = false },
			want{any: "no committed state yet", arp: "no committed state yet", bgp: "no committed state yet"}},
		{"not synced since it started", func(in *standing) { in.Synced = false },
			want{any: "has not heard the cluster since it started", arp: "has not heard the cluster since it started", bgp: "has not heard the cluster since it started"}},
		{"drained", func(in *standing) { in.Drained = true },
			want{any: problemDrained, arp: problemDrained, bgp: problemDrained}},
		{"drained, handing its clients over", func(in *standing) { in.Drained, in.HandingOver = true, true },
			want{eligible: true, rebalancing: true, keepOnly: true, handover: true}},
		{"drained and handed over: hands off for two detection times", func(in *standing) { in.Drained, in.HandedOver = true, now.Add(-dead) },
			want{any: problemDrained, arp: problemDrained, bgp: problemDrained, handOff: true, wake: now.Add(dead)}},
		{"drained and handed over long ago", func(in *standing) { in.Drained, in.HandedOver = true, now.Add(-handOffMultiple*dead) },
			want{any: problemDrained, arp: problemDrained, bgp: problemDrained}},
		{"data plane not reported", func(in *standing) { in.Reported = false },
			want{any: "the data plane has not reported yet", arp: "the data plane has not reported yet", bgp: "the data plane has not reported yet"}},
		{"no heartbeat key with peers: arp only", func(in *standing) { in.HaveKey = false },
			want{arp: "no heartbeat key yet"}},
		{"no heartbeat key, alone", func(in *standing) { in.HaveKey, in.Peers = false, false },
			want{eligible: true, rebalancing: true}},
		{"no majority: arp only", func(in *standing) { in.View = view{Mutual: 1, Need: 2} },
			want{arp: "sees 1 of the cluster's hosts, needs 2"}},
		{"majority lost in the hold-down: keeps what it holds", func(in *standing) { in.View = view{Mutual: 1, Need: 2, Keep: true, HoldDown: true} },
			want{eligible: true, keepOnly: true, holdDown: true}},
		{"the others cannot make a majority without it: keeps", func(in *standing) { in.View = view{Mutual: 1, Need: 2, Keep: true} },
			want{eligible: true, keepOnly: true}},
		{"regained its majority a moment ago: takes nothing for a detection time", func(in *standing) { in.Rejoined = now.Add(-dead / 4) },
			want{eligible: true, rebalancing: true, rejoining: true, wake: now.Add(3 * dead / 4)}},
		{"regained its majority a detection time ago", func(in *standing) { in.Rejoined = now.Add(-dead) },
			want{eligible: true, rebalancing: true}},
		{"arp interface down", func(in *standing) { in.ARPUp = false },
			want{arp: "interface eth1 is down"}},
		{"no arp interface: may still open rebalance windows", func(in *standing) { in.HasARP, in.ARPInterface = false, "" },
			want{arp: "this host has no --vip-interface for arp pools", rebalancing: true}},
		{"bgp interface down", func(in *standing) { in.BGPUp = false },
			want{bgp: "interface lo is down", eligible: true, rebalancing: true}},
		{"committed state too old for bgp", func(in *standing) { in.Contact = now.Add(-11 * time.Second) },
			want{bgp: staleProblem(now, now.Add(-11*time.Second), 10*time.Second), eligible: true, rebalancing: true}},
		{"never heard the leader", func(in *standing) { in.Contact = time.Time{} },
			want{bgp: staleProblem(now, time.Time{}, 10*time.Second), eligible: true, rebalancing: true}},
		{"no speaker", func(in *standing) { in.Speaker, in.HasBGP, in.BGPInterface = false, false, "" },
			want{bgp: "this host has no bgp: section for bgp pools", eligible: true, rebalancing: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := ok()
			tt.set(&in)
			got := eligible(in)
			g := want{
				any: got.Any.Problem, arp: got.ARP.Problem, bgp: got.BGP.Problem, eligible: got.Eligible, rebalancing: got.Rebalancing,
				keepOnly: got.ARP.KeepOnly, holdDown: got.ARP.HoldDown, rejoining: got.ARP.Rejoining, handover: got.ARP.Handover,
				handOff: got.ARP.HandOff, wake: got.Wake,
			}
			if g != tt.want {
				t.Errorf("eligible:\n got %+v\nwant %+v", g, tt.want)
			}
			if got.Any.ID != "a" || got.ARP.ID != "a" || got.BGP.ID != "a" {
				t.Errorf("ids %q %q %q, want a", got.Any.ID, got.ARP.ID, got.BGP.ID)
			}
			if got.BGP.KeepOnly || got.BGP.Rejoining || got.BGP.Handover || got.BGP.HandOff || got.Any.KeepOnly {
				t.Errorf("arp's flags reach other modes: %+v %+v", got.Any, got.BGP)
			}
		})
	}
}

// TestAttachmentsStanding: a VIP that several tenants' attachments carry
// is not ready on a host only when none of them is up there; otherwise
// the tenants whose attachment is down are named, with why, and the host
// carries it for the others.
func TestAttachmentsStanding(t *testing.T) {
	t.Parallel()
	downA, downB := "tenant a's attachment is down", "tenant b's attachment is down"
	for _, tt := range []struct {
		name     string
		spaces   []string
		problems map[string]string
		notReady string
		unserved map[string]string
	}{
		{"all up", []string{"a", "b"}, nil, "", nil},
		{"one down: carried for the other", []string{"a", "b"}, map[string]string{"a": downA}, "", map[string]string{"a": downA}},
		{"all down: not ready, every reason", []string{"a", "b"}, map[string]string{"a": downA, "b": downB}, downA + "; " + downB, nil},
		{"a tenant not sharing it is not looked at", []string{"b"}, map[string]string{"a": downA}, "", nil},
		{"one tenant, down", []string{"a"}, map[string]string{"a": downA}, downA, nil},
		{"three, two down", []string{"a", "b", "c"}, map[string]string{"a": downA, "b": downB}, "", map[string]string{"a": downA, "b": downB}},
		{"no tenants", nil, map[string]string{"a": downA}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			notReady, unserved := attachmentsStanding(tt.spaces, tt.problems)
			if notReady != tt.notReady || !maps.Equal(unserved, tt.unserved) {
				t.Errorf("got %q, %q; want %q, %q", notReady, unserved, tt.notReady, tt.unserved)
			}
		})
	}
}
