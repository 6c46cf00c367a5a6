package vip

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	dead   = 100 * time.Millisecond
	quorum = 80 * time.Millisecond
)

// heard is a peer heard ago before t0 that lists the given sightings.
func heard(ago time.Duration, eligible bool, sights ...sighting) *peerState {
	return &peerState{Heard: t0.Add(-ago), Eligible: eligible, Sightings: sights}
}

func saw(id string, age time.Duration) sighting { return sighting{ID: id, Age: age, Eligible: true} }

func TestComputeView(t *testing.T) {
	tests := []struct {
		name      string
		counted   []string
		peers     map[string]*peerState
		alive     []string
		direct    []string
		mutual    int
		quorum    bool
		next      time.Duration // after t0; 0: none
		eligibleN []string      // alive but not eligible
	}{
		{
			name:    "alone in a one-host cluster",
			counted: []string{"n1"},
			alive:   nil, mutual: 1, quorum: true,
		},
		{
			name:    "alone in a three-host cluster",
			counted: []string{"n1", "n2", "n3"},
			peers:   map[string]*peerState{"n2": {}, "n3": {}},
			mutual:  1, quorum: false,
		},
		{
			name:    "all three in two-way contact",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond), saw("n3", 5*time.Millisecond)),
				"n3": heard(15*time.Millisecond, true, saw("n1", 5*time.Millisecond), saw("n2", 5*time.Millisecond)),
			},
			alive: []string{"n2", "n3"}, direct: []string{"n2", "n3"}, mutual: 3, quorum: true,
			// n3's contact with n1 leaves the quorum window first: it heard
			// n1 20ms before t0.
			next: 60 * time.Millisecond,
		},
		{
			name:    "a peer that does not hear this host is alive but no vote",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n3", 5*time.Millisecond)),
				"n3": heard(10*time.Millisecond, true, saw("n2", 5*time.Millisecond)),
			},
			alive: []string{"n2", "n3"}, direct: []string{"n2", "n3"}, mutual: 1, quorum: false,
			next: 90 * time.Millisecond,
		},
		{
			name:    "a peer heard too long ago is dead",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(100*time.Millisecond, true, saw("n1", 0)),
				"n3": heard(10*time.Millisecond, true, saw("n1", 0)),
			},
			alive: []string{"n3"}, direct: []string{"n3"}, mutual: 2, quorum: true,
			next: 70 * time.Millisecond,
		},
		{
			name:    "contact older than the quorum window gives no vote",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(50*time.Millisecond, true, saw("n1", 40*time.Millisecond)),
				"n3": heard(85*time.Millisecond, true, saw("n1", 0)),
			},
			alive: []string{"n2", "n3"}, direct: []string{"n2", "n3"}, mutual: 1, quorum: false,
			next: 15 * time.Millisecond,
		},
		{
			name:    "a host heard only through a peer is alive",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond), saw("n3", 30*time.Millisecond)),
			},
			alive: []string{"n2", "n3"}, direct: []string{"n2"}, mutual: 2, quorum: true,
			next: 60 * time.Millisecond, // n3 was last heard 40ms before t0
		},
		{
			name:    "a stale report keeps nobody alive",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond), saw("n3", 95*time.Millisecond)),
			},
			alive: []string{"n2"}, direct: []string{"n2"}, mutual: 2, quorum: true,
			next: 65 * time.Millisecond, // n2 heard n1 15ms before t0
		},
		{
			name:    "a host that said goodbye is dead even if reported",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond), saw("n3", 5*time.Millisecond)),
				"n3": {Heard: t0.Add(-5 * time.Millisecond), Left: true},
			},
			alive: []string{"n2"}, direct: []string{"n2"}, mutual: 2, quorum: true,
			next: 65 * time.Millisecond, // n2 heard n1 15ms before t0
		},
		{
			name:    "reported eligibility is used for a host heard only through a peer",
			counted: []string{"n1", "n2", "n3"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond), sighting{ID: "n3", Age: 5 * time.Millisecond}),
			},
			alive: []string{"n2", "n3"}, direct: []string{"n2"}, mutual: 2, quorum: true,
			next: 65 * time.Millisecond, eligibleN: []string{"n3"},
		},
		{
			name:    "an uncounted host gives no vote",
			counted: []string{"n1", "n2"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond)),
				"n3": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond)),
			},
			alive: []string{"n2", "n3"}, direct: []string{"n2", "n3"}, mutual: 2, quorum: true,
			next: 65 * time.Millisecond, // n2 heard n1 15ms before t0
		},
		{
			name:    "two of four is no majority",
			counted: []string{"n1", "n2", "n3", "n4"},
			peers: map[string]*peerState{
				"n2": heard(10*time.Millisecond, true, saw("n1", 5*time.Millisecond)),
			},
			alive: []string{"n2"}, direct: []string{"n2"}, mutual: 2, quorum: false,
			next: 65 * time.Millisecond, // n2 heard n1 15ms before t0
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := computeView(viewInput{Self: "n1", Counted: tt.counted, Now: t0, Dead: dead, Quorum: quorum, Interval: dead - quorum, Peers: tt.peers})
			if got := slices.Sorted(maps.Keys(v.Alive)); !slices.Equal(got, tt.alive) {
				t.Errorf("alive = %v, want %v", got, tt.alive)
			}
			var direct, notEligible []string
			for id, h := range v.Alive {
				if h.Direct {
					direct = append(direct, id)
				}
				if !h.Eligible {
					notEligible = append(notEligible, id)
				}
			}
			slices.Sort(direct)
			slices.Sort(notEligible)
			if !slices.Equal(direct, tt.direct) {
				t.Errorf("direct = %v, want %v", direct, tt.direct)
			}
			if !slices.Equal(notEligible, tt.eligibleN) {
				t.Errorf("not eligible = %v, want %v", notEligible, tt.eligibleN)
			}
			if v.Mutual != tt.mutual || v.Quorum != tt.quorum {
				t.Errorf("mutual %d quorum %t, want %d %t", v.Mutual, v.Quorum, tt.mutual, tt.quorum)
			}
			var next time.Duration
			if !v.Next.IsZero() {
				next = v.Next.Sub(t0)
			}
			if next != tt.next {
				t.Errorf("next = %s, want %s", next, tt.next)
			}
		})
	}
}

const settle = 10 * dead

// lab is the input of computeView with the default timers.
func lab(self string, counted []string, now time.Time, peers map[string]*peerState) viewInput {
	return viewInput{Self: self, Counted: counted, Now: now, Dead: dead, Quorum: quorum,
		Settle: settle, Interval: dead - quorum, HoldDown: dead - quorum, Peers: peers}
}

// reports is a peer of this version heard at at, hearing the given hosts
// (settled) age ago.
func reports(at time.Time, age time.Duration, ids ...string) *peerState {
	p := &peerState{Heard: at, Eligible: true, Holdings: true, HoldingKnown: true}
	for _, id := range ids {
		p.Sightings = append(p.Sightings, sighting{ID: id, Age: age, Eligible: true, Settled: true})
	}
	return p
}

// TestStallRiddenOutWithOneHostDead: n3 has been dead for long; n2, the
// other survivor, goes silent (a stall, or a cut between n1 and n2). n1
// keeps its VIPs until n2 and n3 could have settled with each other, and
// n2 never has a majority to take them in that time.
func TestStallRiddenOutWithOneHostDead(t *testing.T) {
	counted := []string{"n1", "n2", "n3"}
	silent := t0
	var kept time.Duration
	for d := time.Duration(0); d <= 2*settle; d += time.Millisecond {
		now := silent.Add(d)
		// n1 last heard n2 at the cut; n2 heard n1 then and not n3.
		atN1 := map[string]*peerState{"n2": reports(silent, 0, "n1"), "n3": {Heard: silent.Add(-time.Minute)}}
		// n2 keeps hearing nobody (it is cut off) or nothing at all (stalled).
		atN2 := map[string]*peerState{"n1": reports(silent, 0, "n2"), "n3": {Heard: silent.Add(-time.Minute)}}
		v1 := computeView(lab("n1", counted, now, atN1))
		v2 := computeView(lab("n2", counted, now, atN2))
		if v1.Quorum || v1.Keep {
			kept = d
		}
		if d > quorum && v2.Quorum {
			t.Fatalf("at %s n2 has a majority while n1 keeps its VIPs", d)
		}
	}
	// n2 and n3 settle no sooner than n2's last report plus settle.
	if want := settle - (dead - quorum); kept < want-time.Millisecond || kept > want {
		t.Errorf("n1 kept its VIPs for %s of n2's silence, want %s", kept, want)
	}
}

// TestStalledHolderReleases: with all three alive, a holder that was
// paused for 200ms finds, once it runs again, that its peers stopped
// hearing it and could take over: it keeps nothing.
func TestStalledHolderReleases(t *testing.T) {
	counted := []string{"n1", "n2", "n3"}
	now := t0
	// The kernel stamped their heartbeats on time; they say they last
	// heard n1 200ms ago and hear each other.
	peers := map[string]*peerState{
		"n2": reports(now, 0, "n3"),
		"n3": reports(now, 0, "n2"),
	}
	peers["n2"].Sightings = append(peers["n2"].Sightings, sighting{ID: "n1", Age: 200 * time.Millisecond, Settled: true})
	peers["n3"].Sightings = append(peers["n3"].Sightings, sighting{ID: "n1", Age: 200 * time.Millisecond, Settled: true})
	v := computeView(lab("n1", counted, now, peers))
	if v.Quorum || v.Keep {
		t.Fatalf("the stalled holder keeps its VIPs: %+v", v)
	}
}

// TestReturningHostCannotTakeAtOnce: n1 holds VIPs and hears n2, which
// is still settling with it after a hiccup; n3 comes back from a cut and
// its first heartbeat does not list n1 yet. n3 may not take n1 for
// dead, but it has settled with nobody: n1 keeps its VIPs.
func TestReturningHostCannotTakeAtOnce(t *testing.T) {
	counted := []string{"n1", "n2", "n3"}
	n2 := reports(t0, 0, "n1", "n3")
	n2.AliveSince = t0.Add(-300 * time.Millisecond)
	n2.Sightings[0].Settled = false // n2 settles with n1 later
	n2.Sightings[0].AliveFor = 300 * time.Millisecond
	n2.Sightings[1] = sighting{ID: "n3", AliveFor: 5 * time.Millisecond}
	n3 := reports(t0, 0)
	n3.AliveSince = t0.Add(-5 * time.Millisecond)
	n3.Sightings = []sighting{{ID: "n2", AliveFor: 5 * time.Millisecond}}
	v := computeView(lab("n1", counted, t0, map[string]*peerState{"n2": n2, "n3": n3}))
	if v.Quorum || !v.Keep {
		t.Fatalf("quorum %t keep %t, want n1 to keep its VIPs (no majority can form without it yet)", v.Quorum, v.Keep)
	}
	// Once n2 and n3 have settled with each other, they could.
	n2.Sightings[1].AliveFor, n2.Sightings[1].Settled = settle, true
	n3.Sightings[0].AliveFor, n3.Sightings[0].Settled = settle, true
	if v := computeView(lab("n1", counted, t0, map[string]*peerState{"n2": n2, "n3": n3})); v.Keep && v.Until.Sub(t0) > dead {
		t.Fatalf("n1 keeps its VIPs until %s after n2 and n3 settled", v.Until.Sub(t0))
	}
}

// TestSettling: a peer back from the dead counts towards the majority
// only once settled, and only when it says it settled with this host.
func TestSettling(t *testing.T) {
	counted := []string{"n1", "n2", "n3"}
	for _, tt := range []struct {
		name    string
		back    time.Duration // n2 heard again this long before t0
		settled bool          // n2 reports n1 settled
		mutual  int
	}{
		{"just back", 10 * time.Millisecond, true, 1},
		{"back for the settling time", settle, true, 2},
		{"settled here, not there", settle, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := reports(t0, 0)
			p.AliveSince = t0.Add(-tt.back)
			p.Sightings = []sighting{{ID: "n1", Settled: tt.settled}}
			v := computeView(lab("n1", counted, t0, map[string]*peerState{"n2": p}))
			if v.Mutual != tt.mutual {
				t.Errorf("mutual %d, want %d", v.Mutual, tt.mutual)
			}
		})
	}
}

// TestReturningPeer: a peer of this version that this host counted dead
// is returning for a detection time after it is seen again, whether
// through its own heartbeat or a peer's report, and the view changes by
// itself when that ends; a peer of an earlier version never is (it takes
// what it ranks first for, returning or not).
func TestReturningPeer(t *testing.T) {
	counted := []string{"n1", "n2", "n3"}
	for _, tt := range []struct {
		name      string
		gone      bool
		back      time.Duration // before t0; 0: never
		earlier   bool          // n3 is of an earlier version
		direct    bool          // n1 hears n3 itself (else through n2)
		returning bool
		next      time.Duration // after t0, the end of the window; 0: not checked
	}{
		// Its window ends after the quorum window (80ms), which wakes the
		// loop first.
		{"counted dead until this view, heard itself", true, 0, false, true, true, 0},
		{"counted dead until this view, through a report", true, 0, false, false, true, 0},
		{"back 30ms ago", false, 30 * time.Millisecond, false, true, true, dead - 30*time.Millisecond},
		{"back a detection time ago", false, dead, false, true, false, 0},
		{"never counted dead", false, 0, false, true, false, 0},
		{"an earlier version", true, 0, true, true, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n2 := reports(t0, 0, "n1", "n3")
			n3 := reports(t0, 0, "n1", "n2")
			n3.Gone = tt.gone
			if tt.back > 0 {
				n3.Back = t0.Add(-tt.back)
			}
			if tt.earlier {
				n3.Holdings, n3.HoldingKnown = false, false
			}
			if !tt.direct {
				n3.Heard = t0.Add(-2 * dead)
			}
			v := computeView(lab("n1", counted, t0, map[string]*peerState{"n2": n2, "n3": n3}))
			hv, ok := v.Alive["n3"]
			if !ok || hv.Direct != tt.direct {
				t.Fatalf("n3 alive %t direct %t, want alive, direct %t", ok, hv.Direct, tt.direct)
			}
			if hv.Returning != tt.returning {
				t.Errorf("returning %t, want %t", hv.Returning, tt.returning)
			}
			if tt.next > 0 && !v.Next.Equal(t0.Add(tt.next)) {
				t.Errorf("next %s, want the end of the window, %s", v.Next.Sub(t0), tt.next)
			}
		})
	}
}

// TestHolderOf pins who holds an arp VIP: it stays where it is held.
func TestHolderOf(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.10")
	ranked := []string{"n2", "n1", "n3"}
	held := map[netip.Addr]bool{a: true}
	peer := func(holding, known bool) hostView {
		hv := hostView{Eligible: true, Direct: true, Holdings: known}
		if holding {
			hv.Holding = held
		}
		return hv
	}
	// partlyPeer carries a for some of the tenants sharing it only.
	partlyPeer := func(holding bool) hostView {
		hv := peer(holding, true)
		hv.NotReady, hv.Partly = held, held
		return hv
	}
	unservedHere := map[netip.Addr]map[string]string{a: {"ta": "tenant ta's attachment, which carries this VIP, is not up on this host"}}
	tests := []struct {
		name string
		me   self
		v    view
		want string
	}{
		{"nobody holds it: the ranking", self{ID: "n1"}, view{Alive: map[string]hostView{"n2": peer(false, true), "n3": peer(false, true)}}, "n2"},
		{"it stays with a lower-ranked holder", self{ID: "n1"}, view{Alive: map[string]hostView{"n2": peer(false, true), "n3": peer(true, true)}}, "n3"},
		{"this host holds it and keeps it", self{ID: "n1", Holding: held}, view{Alive: map[string]hostView{"n2": peer(false, true)}}, "n1"},
		{"two hold it: the higher-ranked keeps it", self{ID: "n3", Holding: held}, view{Alive: map[string]hostView{"n1": peer(true, true)}}, "n1"},
		{"a host that just started leaves it with a holder of its fair share", self{ID: "n2", Rebalance: held}, view{Alive: map[string]hostView{"n3": peer(true, true)}}, "n3"},
		{"a host that just started and holds it keeps it", self{ID: "n2", Rebalance: held, Holding: held}, view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n2"},
		{"a host that just started takes nobody's VIP", self{ID: "n2", Rebalance: held}, view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n2"},
		{"a peer of an earlier version ranked first: the ranking", self{ID: "n1"}, view{Alive: map[string]hostView{"n2": peer(false, false), "n3": peer(true, true)}}, "n2"},
		{"a peer of an earlier version ranked lower: it stays", self{ID: "n2"}, view{Alive: map[string]hostView{"n1": peer(false, false), "n3": peer(true, true)}}, "n3"},
		{"keep-only takes nothing", self{ID: "n1", KeepOnly: true}, view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n3"},
		{"keep-only keeps what it holds", self{ID: "n1", KeepOnly: true, Holding: held}, view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n1"},
		{"rejoining takes nothing", self{ID: "n1", Rejoining: true}, view{Alive: map[string]hostView{"n2": peer(false, true), "n3": peer(false, true)}}, "n2"},
		{"rejoining keeps what it holds", self{ID: "n1", Rejoining: true, Holding: held}, view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n1"},
		// n2 is back from the dead, known through a peer's report only
		// (no holdings): it takes nothing for a detection time, so it is
		// no candidate, and the holder keeps the VIP (it ranked alone,
		// like an earlier version, and the holder let it go).
		{"a returning peer heard of through a report: the holder keeps it", self{ID: "n1", Holding: held},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Returning: true}, "n3": peer(false, true)}}, "n1"},
		{"a returning peer that holds nothing: the holder keeps it", self{ID: "n3", Holding: held},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Direct: true, Holdings: true, Returning: true}, "n1": peer(false, true)}}, "n3"},
		{"a returning peer is no candidate for nobody's VIP", self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Returning: true}, "n3": peer(false, true)}}, "n1"},
		{"a returning peer that holds it keeps it", self{ID: "n1", Holding: held},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Direct: true, Holdings: true, Holding: held, Returning: true}}}, "n2"},
		// An address several tenants' attachments carry: a host that
		// carries it for some of them only (one's attachment is down
		// there) is a candidate only when none carries it for all.
		{"carried for some tenants everywhere: the ranking", self{ID: "n1", Partly: unservedHere},
			view{Alive: map[string]hostView{"n2": partlyPeer(false), "n3": partlyPeer(false)}}, "n2"},
		{"carried for some tenants everywhere: it stays with its holder", self{ID: "n1", Partly: unservedHere},
			view{Alive: map[string]hostView{"n2": partlyPeer(false), "n3": partlyPeer(true)}}, "n3"},
		{"carried for some tenants here and there: this host when first", self{ID: "n2", Partly: unservedHere},
			view{Alive: map[string]hostView{"n1": partlyPeer(false)}}, "n2"},
		{"a host that carries it for all is preferred to a holder that does not", self{ID: "n1", Partly: unservedHere, Holding: held},
			view{Alive: map[string]hostView{"n2": partlyPeer(false), "n3": peer(false, true)}}, "n3"},
		{"this host carries it for all: preferred to the first in the ranking", self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": partlyPeer(true), "n3": partlyPeer(false)}}, "n1"},
		{"not ready at all is no candidate, even among the partly ready", self{ID: "n1", NotReady: map[netip.Addr]string{a: "down"}},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Direct: true, Holdings: true, NotReady: held}, "n3": partlyPeer(false)}}, "n3"},
		{"a peer of an earlier version never says partly ready: not a candidate", self{ID: "n1", Partly: unservedHere},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Direct: true, NotReady: held}}}, "n1"},
		// Its heartbeats say it is not ready for any address (its
		// not-ready list does not fit): its peers count it for none, and
		// so does it.
		{"not ready for any in its heartbeats: no candidate, even for what it holds", self{ID: "n2", NotReadyAll: true, Holding: held},
			view{Alive: map[string]hostView{"n1": peer(false, true)}}, "n1"},
		{"not ready for any in its heartbeats: no candidate among the partly ready either", self{ID: "n2", NotReadyAll: true, Partly: unservedHere, Holding: held},
			view{Alive: map[string]hostView{"n1": partlyPeer(false)}}, "n1"},
		// Its heartbeats leave out what it holds (the list does not fit):
		// its peers rank it alone, and so does it.
		{"held list left out, ranked lower: what it holds counts for nothing", self{ID: "n1", HoldingUnsent: true, Holding: held},
			view{Alive: map[string]hostView{"n2": peer(false, true)}}, "n2"},
		{"held list left out, ranked first: it takes it from a lower-ranked holder", self{ID: "n2", HoldingUnsent: true},
			view{Alive: map[string]hostView{"n3": peer(true, true)}}, "n2"},
		{"held list left out, keep-only and first: keeps what it holds", self{ID: "n2", KeepOnly: true, HoldingUnsent: true, Holding: held},
			view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n2"},
		{"held list left out, rejoining: keeps nothing", self{ID: "n2", Rejoining: true, HoldingUnsent: true, Holding: held},
			view{Alive: map[string]hostView{"n3": peer(false, true)}}, "n3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := holderOf(a, ranked, tt.me, tt.v); got != tt.want {
				t.Errorf("holder %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRestartTakesBackOnlyWhenUnbalanced: a host back from a restart (its
// rebalance window open) takes a VIP it ranks first for back only from a
// holder with more than its fair share plus one: one VIP on three hosts
// stays where it moved (it moves once in a rolling upgrade), while with 30
// VIPs whose share piled up on one holder it takes back what that holder
// has of its own, and nothing from the holder of its fair share.
func TestRestartTakesBackOnlyWhenUnbalanced(t *testing.T) {
	hosts := []string{"n1", "n2", "n3"}
	for _, n := range []int{1, 2, 3, 30} {
		t.Run(fmt.Sprint(n, " VIPs"), func(t *testing.T) {
			holding := map[string]map[netip.Addr]bool{"n1": {}, "n2": {}, "n3": {}}
			ranks := map[netip.Addr][]string{}
			window := map[netip.Addr]bool{}
			for i := range n {
				a := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})
				r := rank(a, hosts)
				ranks[a] = r
				window[a] = true
				// n2 was drained and restarted: its VIPs went to the next.
				h := r[0]
				if h == "n2" {
					h = r[1]
				}
				holding[h][a] = true
			}
			v := view{Alive: map[string]hostView{}}
			for _, h := range []string{"n1", "n3"} {
				v.Alive[h] = hostView{Eligible: true, Direct: true, Holdings: true, Holding: holding[h]}
			}
			me := self{ID: "n2", Rebalance: window, Holding: map[netip.Addr]bool{}}
			fair := (n + 2) / 3
			after := map[string]int{}
			for a, r := range ranks {
				was := r[0]
				if was == "n2" {
					was = r[1]
				}
				want := was
				if r[0] == "n2" && len(holding[was]) > fair+1 {
					want = "n2"
				}
				got := holderOf(a, r, me, v)
				if got != want {
					t.Errorf("%s (ranking %v) held by %s, which holds %d of %d: holder %s, want %s", a, r, was, len(holding[was]), n, got, want)
				}
				after[got]++
			}
			if n == 1 && after["n2"] != 0 {
				t.Errorf("one VIP moved back to the restarted host")
			}
			if n == 30 && after["n2"] == 0 {
				t.Errorf("30 VIPs: the restarted host took none back; holdings %v", after)
			}
			t.Logf("held before n2's return: n1 %d, n3 %d; after: %v", len(holding["n1"]), len(holding["n3"]), after)
		})
	}
}

// TestPartitionReleasesNoLaterThanTakeover pins the ordering that keeps
// the two sides of a partition from holding a VIP at once: the host that
// is cut off lets go of its VIPs (after its hold-down) no later than its
// peers consider it dead and take them.
func TestPartitionReleasesNoLaterThanTakeover(t *testing.T) {
	cut := t0
	counted := []string{"n1", "n2", "n3"}
	// At the cut, every host has just heard every other.
	isolated := map[string]*peerState{"n2": reports(cut, 0, "n1", "n3"), "n3": reports(cut, 0, "n1", "n2")}
	other := map[string]*peerState{"n1": reports(cut, 0, "n2", "n3"), "n3": reports(cut, 0, "n1", "n2")}
	var lost, released, takenOver time.Duration
	for d := time.Duration(0); d <= 2*dead; d += time.Millisecond {
		now := cut.Add(d)
		// n2 and n3 keep hearing each other.
		other["n3"].Heard = now
		other["n3"].Sightings = []sighting{{ID: "n1", Age: d, Settled: true}, {ID: "n2", Settled: true}}
		vi := computeView(lab("n1", counted, now, isolated))
		vo := computeView(lab("n2", counted, now, other))
		if lost == 0 && !vi.Quorum {
			lost = d
		}
		if released == 0 && !vi.Quorum && !vi.Keep {
			released = d
		}
		if _, ok := vo.Alive["n1"]; takenOver == 0 && !ok {
			takenOver = d
		}
	}
	if released == 0 || takenOver == 0 || released > takenOver {
		t.Fatalf("isolated host released at %s, peers declared it dead at %s: want the release no later", released, takenOver)
	}
	if lost != quorum || released-lost != dead-quorum {
		t.Errorf("isolated host lost its majority at %s and released at %s, want %s and a hold-down of %s", lost, released, quorum, dead-quorum)
	}
}

// TestMajorityBlipKeepsTheVIP: on a loaded machine both peers' reports
// of the holder arrive a few milliseconds too late for one evaluation.
// The holder keeps its VIP, takes none, and holds it as before once the
// reports are fresh again; a loss that lasts past the hold-down releases.
func TestMajorityBlipKeepsTheVIP(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.10")
	b := netip.MustParseAddr("192.0.2.11")
	counted := []string{"n1", "n2", "n3"}
	ranked := []string{"n1", "n2", "n3"}
	// n1 holds a; nobody holds b, for which n1 also ranks first.
	held := func(ids ...string) *peerState {
		p := reports(t0, 0, ids...)
		p.Holding = map[netip.Addr]bool{}
		return p
	}
	run := func(late time.Duration) (decision, decision, view) {
		// Their heartbeats arrived 25ms ago and say they heard n1 late
		// before sending them.
		peers := map[string]*peerState{"n2": held("n1", "n3"), "n3": held("n1", "n2")}
		for _, p := range peers {
			p.Heard = t0.Add(-25 * time.Millisecond)
			p.Sightings[0].Age = late
		}
		v := computeView(lab("n1", counted, t0, peers))
		me := self{ID: "n1", NotReady: map[netip.Addr]string{}, Holding: map[netip.Addr]bool{a: true}}.withMajority(v)
		da := decide(vipSpec{Addr: a, Mode: ModeARP}, ranked, me, v, peers, dead, "n1")
		db := decide(vipSpec{Addr: b, Mode: ModeARP}, ranked, me, v, peers, dead, "")
		return da, db, v
	}
	// Steady: the contact is 45ms old.
	if da, _, v := run(20 * time.Millisecond); !v.Quorum || !da.Hold {
		t.Fatalf("steady state: quorum %t, hold %t (%s)", v.Quorum, da.Hold, da.Reason)
	}
	// The blip: the contact is 85ms old, past the quorum window (80ms).
	da, db, v := run(60 * time.Millisecond)
	if v.Quorum {
		t.Fatalf("a contact %s old still makes a majority: the blip is not reproduced", 85*time.Millisecond)
	}
	if !da.Hold || !v.Keep || !v.HoldDown {
		t.Errorf("blip: the holder lets go (hold %t, keep %t, hold-down %t): %s", da.Hold, v.Keep, v.HoldDown, da.Reason)
	}
	if want := t0.Add(dead - 85*time.Millisecond); !v.Until.Equal(want) || !v.Next.Equal(want) {
		t.Errorf("hold-down until %s, next evaluation %s, want both at %s", v.Until.Sub(t0), v.Next.Sub(t0), want.Sub(t0))
	}
	if db.Hold || !strings.Contains(da.Reason, "hold-down") {
		t.Errorf("blip: takes the unheld VIP %t (want false); reason for the held one %q", db.Hold, da.Reason)
	}
	// Fresh reports again: it holds a as before, and takes b.
	if da, db, v := run(5 * time.Millisecond); !v.Quorum || !da.Hold || !db.Hold {
		t.Errorf("after the blip: quorum %t, holds a %t, takes b %t", v.Quorum, da.Hold, db.Hold)
	}
	// A loss that outlasts the hold-down (the contact is 100ms old: the
	// peers take n1 for dead now) releases.
	if da, _, v := run(75 * time.Millisecond); v.Keep || da.Hold {
		t.Errorf("a loss past the hold-down: keep %t, hold %t (%s)", v.Keep, da.Hold, da.Reason)
	}
}

func TestRankIsStableAndSpread(t *testing.T) {
	hosts := []string{"n1", "n2", "n3"}
	reversed := slices.Clone(hosts)
	slices.Reverse(reversed)
	count := map[string]int{}
	for i := range 300 {
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if i >= 256 {
			a = netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i))
		}
		r := rank(a, hosts)
		if !slices.Equal(r, rank(a, reversed)) {
			t.Fatalf("%s: ranking depends on the order of the hosts", a)
		}
		count[r[0]]++
		// Without n2, the order of the others is unchanged: only n2's
		// VIPs move.
		without := rank(a, []string{"n1", "n3"})
		rest := slices.DeleteFunc(slices.Clone(r), func(h string) bool { return h == "n2" })
		if !slices.Equal(without, rest) {
			t.Fatalf("%s: removing n2 reorders the others: %v -> %v", a, r, without)
		}
	}
	for _, h := range hosts {
		if count[h] < 70 || count[h] > 130 {
			t.Errorf("%s ranks first for %d of 300 VIPs, want about 100: %v", h, count[h], count)
		}
	}
	// Pinned values: the ranking must not change between versions.
	pinned := map[string]string{"192.0.2.10": "n3 n2 n1", "192.0.2.11": "n2 n3 n1", "2001:db8::10": "n2 n3 n1"}
	for a, want := range pinned {
		if got := strings.Join(rank(netip.MustParseAddr(a), hosts), " "); got != want {
			t.Errorf("rank(%s) = %s, want %s", a, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.10")
	ranked := []string{"n2", "n1", "n3"}
	arp := vipSpec{Addr: a, Mode: ModeARP}
	live := func(ids ...string) view {
		v := view{Alive: map[string]hostView{}, Quorum: true}
		for _, id := range ids {
			v.Alive[id] = hostView{Eligible: true, Direct: true}
		}
		return v
	}
	peers := map[string]*peerState{
		"n2": {Heard: t0.Add(-time.Second)},
		"n3": {Heard: t0},
	}
	tests := []struct {
		name   string
		vs     vipSpec
		me     self
		v      view
		prev   string
		hold   bool
		holder string
		reason string
		local  bool
	}{
		{"first in the ranking is alive", arp, self{ID: "n1"}, live("n2", "n3"), "n2", false, "n2", "n2 ranks first", false},
		{"first in the ranking died", arp, self{ID: "n1"}, live("n3"), "n2", true, "n1", "took over: no heartbeat from n2 for 100ms", false},
		{"first in the ranking is not eligible", arp, self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": {}, "n3": {Eligible: true}}, Quorum: true}, "n2", true, "n1", "took over: n2 lost its majority or its interface", false},
		{"first in the ranking handed its clients over", arp, self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": {Handover: true}, "n3": {Eligible: true}}, Quorum: true}, "n2", true, "n1", "took over: n2 handed its clients over (drained or stopping)", false},
		{"first in the ranking is not ready", arp, self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": {Eligible: true, NotReady: map[netip.Addr]bool{a: true}}}, Quorum: true}, "n2", true, "n1", "took over: n2 is not ready to serve it", false},
		{"first in the ranking came back a moment ago, heard of through a report: the holder keeps it", arp, self{ID: "n1", Holding: map[netip.Addr]bool{a: true}},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Returning: true}, "n3": {Eligible: true, Direct: true}}, Quorum: true}, "n1", true, "n1", "holds it among the live hosts", false},
		{"first in the ranking came back a moment ago and holds nothing", arp, self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": {Eligible: true, Direct: true, Holdings: true, Returning: true}}, Quorum: true}, "n2", true, "n1", "took over: n2 came back less than 100ms ago and does not hold it", false},
		{"first in the ranking is not ready for anything", arp, self{ID: "n1"},
			view{Alive: map[string]hostView{"n2": {Eligible: true, NotReadyAll: true}}, Quorum: true}, "", true, "n1", "ranks first among the live hosts", false},
		{"its heartbeats say not ready for any", arp, self{ID: "n1", NotReadyAll: true, Holding: map[netip.Addr]bool{a: true}}, live("n3"), "n1", false, "n3",
			"its heartbeats say it is not ready for any address: the list of those it is not ready for does not fit in them", true},
		{"no majority", arp, self{ID: "n1", Problem: "sees 1 of the cluster's hosts, needs 2"}, live(), "n1", false, "", "sees 1 of the cluster's hosts, needs 2", true},
		{"not ready here, the next one takes it", arp, self{ID: "n1", NotReady: map[netip.Addr]string{a: "no listener"}}, live("n3"), "", false, "n3", "not ready: no listener", true},
		{"an unknown host is skipped", vipSpec{Addr: a, Mode: ModeARP}, self{ID: "n1"}, live("n3"), "", true, "n1", "ranks first among the live hosts", false},
		{"bgp: every ready host announces", vipSpec{Addr: a, Mode: ModeBGP}, self{ID: "n1"}, live("n2"), "", true, "", "ready, and the state is current", false},
		// The heartbeats' majority is not a bgp rule: a host that hears no
		// peer but is ready, in session and current keeps its route.
		{"bgp: no peer heard, still announced", vipSpec{Addr: a, Mode: ModeBGP}, self{ID: "n1"}, view{Alive: map[string]hostView{}}, "", true, "", "ready, and the state is current", false},
		{"bgp: stale state, no route", vipSpec{Addr: a, Mode: ModeBGP}, self{ID: "n1", Problem: staleProblem(t0, t0.Add(-11*time.Second), 10*time.Second)}, live(), "", false, "",
			"no contact with the Raft leader for 11s (the state may be stale; allowed 10s)", true},
		{"bgp: not ready", vipSpec{Addr: a, Mode: ModeBGP}, self{ID: "n1", NotReady: map[netip.Addr]string{a: "x"}}, live(), "", false, "", "not ready: x", true},
		{"static: bound even without a majority", vipSpec{Addr: a, Mode: ModeStatic}, self{ID: "n1", Problem: "sees 1 of the cluster's hosts, needs 2"}, live(), "", true, "", "static pool: bound here; the network routes it", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ranked
			if tt.name == "an unknown host is skipped" {
				r = []string{"n9", "n1", "n3"}
			}
			d := decide(tt.vs, r, tt.me, tt.v, peers, dead, tt.prev)
			if d.Hold != tt.hold || d.Holder != tt.holder || d.Reason != tt.reason || d.Local != tt.local {
				t.Errorf("decide = %+v, want hold %t holder %q reason %q local %t", d, tt.hold, tt.holder, tt.reason, tt.local)
			}
		})
	}
}

// TestDisagreementResolves shows the rule when two hosts briefly see the
// cluster differently: n2 missed n1's heartbeats for a moment, so both
// n1 and n2 pick themselves; as soon as n2 hears n1 again it releases,
// without any message between them.
func TestDisagreementResolves(t *testing.T) {
	var a netip.Addr
	for i := range 256 {
		a = netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if r := rank(a, []string{"n1", "n2", "n3"}); r[0] == "n1" && r[1] == "n2" {
			break
		}
	}
	ranked := rank(a, []string{"n1", "n2", "n3"})
	vs := vipSpec{Addr: a, Mode: ModeARP}
	full := view{Alive: map[string]hostView{"n2": {Eligible: true}, "n3": {Eligible: true}}, Quorum: true}
	missedN1 := view{Alive: map[string]hostView{"n3": {Eligible: true}}, Quorum: true}
	n1 := decide(vs, ranked, self{ID: "n1"}, full, nil, dead, "")
	n2 := decide(vs, ranked, self{ID: "n2"}, missedN1, nil, dead, "n1")
	if !n1.Hold || !n2.Hold {
		t.Fatalf("during the disagreement: n1 holds %t, n2 holds %t; want both (the brief overlap)", n1.Hold, n2.Hold)
	}
	n2 = decide(vs, ranked, self{ID: "n2"}, view{Alive: map[string]hostView{"n1": {Eligible: true}, "n3": {Eligible: true}}, Quorum: true}, nil, dead, "n2")
	if n2.Hold || n2.Holder != "n1" {
		t.Fatalf("after n2 hears n1 again: %+v, want n2 to release to n1", n2)
	}
}

func TestQuorumProblem(t *testing.T) {
	if got := quorumProblem(view{Mutual: 1, Need: 2}); got != "sees 1 of the cluster's hosts, needs 2" {
		t.Errorf("quorumProblem = %q", got)
	}
	if got := quorumProblem(view{Quorum: true}); got != "" {
		t.Errorf("quorumProblem with a majority = %q", got)
	}
}

func TestNotReady(t *testing.T) {
	vs := vipSpec{LBs: []string{"acme/a", "acme/b"}}
	tests := []struct {
		name      string
		ready     map[string]string
		haveReady bool
		want      string
	}{
		{"no report yet", nil, false, "the data plane has not reported yet"},
		{"one of two ready", map[string]string{"acme/a": "listeners[0]: cannot listen", "acme/b": ""}, true, ""},
		{"none ready", map[string]string{"acme/a": "listeners[0]: cannot listen"}, true,
			"acme/a: listeners[0]: cannot listen; acme/b: not served by the data plane yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := notReady(vs, tt.ready, tt.haveReady); got != tt.want {
				t.Errorf("notReady = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSyncStep pins down when a starting host may hold anything: only
// after it heard the leader since it started, plus a detection time.
func TestSyncStep(t *testing.T) {
	start := syncState{started: t0}
	// behind is the state's revision until caughtUp after t0, then 9;
	// the peers act on peers.
	type revs struct {
		behind, peers uint64
		caughtUp      time.Duration
	}
	tests := []struct {
		name    string
		contact time.Time // what the consensus layer reports at each step
		revs    revs
		steps   []time.Duration
		synced  time.Duration // after t0; -1: never
	}{
		{"never heard the leader", time.Time{}, revs{}, []time.Duration{0, time.Second, time.Minute}, -1},
		{"only an old contact (before the restart)", t0.Add(-time.Millisecond), revs{}, []time.Duration{0, time.Second}, -1},
		{"heard the leader, then a full detection time", t0.Add(5 * time.Millisecond), revs{}, []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 109 * time.Millisecond, 110 * time.Millisecond}, 110 * time.Millisecond},
		{"heard the leader, peers on the same revision", t0.Add(5 * time.Millisecond), revs{9, 9, 0}, []time.Duration{10 * time.Millisecond, 110 * time.Millisecond}, 110 * time.Millisecond},
		{"state behind its peers' until it catches up", t0.Add(5 * time.Millisecond), revs{5, 9, 300 * time.Millisecond},
			[]time.Duration{10 * time.Millisecond, 110 * time.Millisecond, 200 * time.Millisecond, 299 * time.Millisecond, 300 * time.Millisecond}, 300 * time.Millisecond},
		{"state that never catches up: synced at the bound", t0.Add(5 * time.Millisecond), revs{5, 9, time.Hour},
			[]time.Duration{10 * time.Millisecond, 110 * time.Millisecond, 5 * time.Second, 10 * time.Second}, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start
			got := time.Duration(-1)
			for _, d := range tt.steps {
				var wake time.Time
				rev := uint64(9)
				if d < tt.revs.caughtUp {
					rev = tt.revs.behind
				}
				s, wake = syncStep(s, t0.Add(d), tt.contact, rev, tt.revs.peers, dead, 20*time.Millisecond, 10*time.Second-10*time.Millisecond)
				if !s.synced.IsZero() {
					got = s.synced.Sub(t0)
					break
				}
				if !wake.After(t0.Add(d)) {
					t.Fatalf("step at %s: wake %s is not later", d, wake.Sub(t0))
				}
			}
			if got != tt.synced {
				t.Errorf("synced at %s, want %s", got, tt.synced)
			}
		})
	}
}

func TestStaleProblem(t *testing.T) {
	if p := staleProblem(t0, t0.Add(-9*time.Second), 10*time.Second); p != "" {
		t.Errorf("9s old contact: %q, want current", p)
	}
	if p := staleProblem(t0, time.Time{}, 10*time.Second); p == "" {
		t.Error("no contact at all counts as current")
	}
}

// TestDrainedHostHandsOff: a drained host whose clients were handed over
// keeps each arp VIP it holds until the host that takes it over says it
// holds it, then lets it go; without HandOff it lets go at once.
func TestDrainedHostHandsOff(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.10")
	ranked := []string{"n1", "n2", "n3"}
	peer := func(holding bool) hostView {
		hv := hostView{Eligible: true, Direct: true, Holdings: true, Holding: map[netip.Addr]bool{}}
		hv.Holding[a] = holding
		return hv
	}
	drained := self{ID: "n1", Problem: problemDrained, HandOff: true, NotReady: map[netip.Addr]string{}, Holding: map[netip.Addr]bool{a: true}}
	v := view{Alive: map[string]hostView{"n2": peer(false), "n3": peer(false)}, Quorum: true}
	d := decide(vipSpec{Addr: a, Mode: ModeARP}, ranked, drained, v, nil, dead, "n1")
	if !d.Hold || d.Holder != "n2" || !strings.Contains(d.Reason, "until n2 holds it") {
		t.Errorf("before n2 holds it: hold %t, holder %q (%s); want it kept for n2", d.Hold, d.Holder, d.Reason)
	}
	v.Alive["n2"] = peer(true)
	if d := decide(vipSpec{Addr: a, Mode: ModeARP}, ranked, drained, v, nil, dead, "n2"); d.Hold {
		t.Errorf("n2 holds it: still kept (%s)", d.Reason)
	}
	v.Alive["n2"] = peer(false)
	drained.HandOff = false
	if d := decide(vipSpec{Addr: a, Mode: ModeARP}, ranked, drained, v, nil, dead, "n1"); d.Hold {
		t.Errorf("past the hand-off: still kept (%s)", d.Reason)
	}
	// A VIP it does not hold it never takes.
	drained.HandOff, drained.Holding = true, map[netip.Addr]bool{}
	if d := decide(vipSpec{Addr: a, Mode: ModeARP}, ranked, drained, v, nil, dead, ""); d.Hold {
		t.Errorf("took a VIP while drained (%s)", d.Reason)
	}
}
