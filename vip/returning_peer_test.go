package vip

import (
	"net/netip"
	"strings"
	"testing"
)

// TestHolderKeepsWhatItTookUntilTheReturningHostHoldsIt: n3 stalls for
// longer than the detection time, and n1 and n2 take the VIPs it held.
// When n3 runs again, its first heartbeat reaches n2 but not yet n1,
// and n2's next heartbeat says to n1 that it hears n3 (with the
// eligibility n2 last heard of). n1 keeps the VIPs it took: n3 ranks
// first for each of them but, back a moment ago, takes nothing and is
// heard of only through n2, so it is no candidate; n3 itself let its own
// copies go (it lost its majority while stopped). Before, n1 let them go
// at once ("n3 ranks first", as if n3 were a host of an earlier version
// that takes what it ranks first for), and nobody held them until n1
// took them back once n3's own heartbeat came (TestVIPSoak, on a loaded
// machine). Once n3's heartbeats come through, saying it holds nothing,
// the VIPs stay with n1 and n2: a VIP moves once.
func TestHolderKeepsWhatItTookUntilTheReturningHostHoldsIt(t *testing.T) {
	l := newPeerLoop(t, 60)
	m, st := l.m, &l.m.loop
	mine := map[netip.Addr]bool{}
	for a := range l.holding["n3"] {
		if rank(a, []string{"n1", "n2"})[0] == "n2" {
			l.holding["n2"][a] = true
		} else {
			mine[a] = true
		}
	}
	if len(mine) == 0 {
		t.Fatal("the ranking gives n1 none of n3's VIPs: pick other addresses")
	}
	n3held := l.holding["n3"]

	// The stall: n3 sends nothing; n1 takes its share at the detection time.
	l.alive["n3"] = false
	stalled := l.now
	for l.now.Sub(stalled) < m.dead+3*m.cfg.HeartbeatInterval {
		l.tick()
	}
	for a := range n3held {
		if mine[a] != st.holding[a] {
			t.Fatalf("%s after n3's stall: n1 holds it %t, want %t (%s)", a, st.holding[a], mine[a], st.records[a].reason)
		}
	}

	// n3 runs again, holds nothing, and n1 hears of it only through n2.
	l.holding["n3"] = map[netip.Addr]bool{}
	l.alive["n3"], l.quiet["n3"] = true, true
	for range 3 {
		l.tick()
		if _, ok := st.alive["n3"]; !ok {
			t.Fatal("n3 not alive through n2's report: the case is not reproduced")
		}
		for a := range n3held {
			if mine[a] && !st.holding[a] {
				t.Fatalf("n3 back, heard of through n2: n1 let %s go (%s) to a host that does not take it", a, st.records[a].reason)
			}
		}
	}
	// Its own heartbeats come through, past the detection time after it
	// came back: nothing moves.
	l.quiet["n3"] = false
	back := l.now
	for l.now.Sub(back) < 3*m.dead {
		l.tick()
		for a := range n3held {
			if mine[a] != st.holding[a] {
				t.Fatalf("%s after n3 came back: n1 holds it %t, want %t (%s)", a, st.holding[a], mine[a], st.records[a].reason)
			}
		}
	}
	for a := range n3held {
		if r := st.records[a].reason; mine[a] && !strings.HasPrefix(r, "holds it among the live hosts") {
			t.Errorf("%s: reason %q", a, r)
		}
	}
}
