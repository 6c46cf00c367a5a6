package tenantbgp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/vip/bfd"
)

// A speaker whose BFD flaps (Down, Init, Up, Down: three packets a
// cycle) has its BGP session reset once per ResetHold, counted once, and
// wakes the loop once per ResetHold; a speaker that says AdminDown has
// its BGP session left alone.
func TestBFDFlapHeld(t *testing.T) {
	t.Parallel()
	peer, a := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("127.0.1.1")
	b := bfdState{downs: map[string]uint64{}, errs: map[string]error{}, held: map[bfdPeer]bfdHold{},
		keys:        map[string]map[netip.Addr]netip.Addr{"a": {peer: a}},
		established: map[netip.Addr]bool{a: true}}
	hold := 30 * time.Second
	now := time.Unix(1000, 0)
	resets, pokes := 0, 0
	cycle := func() {
		for _, st := range []bfd.Status{{State: bfd.Init, Prev: bfd.Down, Remote: bfd.Down}, {State: bfd.Up, Prev: bfd.Init, Remote: bfd.Up}, {State: bfd.Down, Prev: bfd.Up, Remote: bfd.Down}} {
			d := b.change("a", peer, st, now, hold)
			if d.reset {
				resets++
				if d.addr != a {
					t.Fatalf("reset %s, want %s", d.addr, a)
				}
			}
			if d.poke {
				pokes++
			}
			now = now.Add(10 * time.Millisecond)
		}
	}
	// 10 s of flapping, the BGP session read established at every pass.
	for range 333 {
		cycle()
		b.established[a] = true
	}
	if resets != 1 || pokes != 2 || b.downs["a"] != 1 {
		t.Fatalf("in 10 s of flapping: %d resets (%d counted), %d wake-ups; want 1, 1, 2", resets, b.downs["a"], pokes)
	}
	// After the hold, once more.
	now = now.Add(hold)
	cycle()
	if resets != 2 || pokes != 4 || b.downs["a"] != 2 {
		t.Fatalf("after the hold: %d resets (%d counted), %d wake-ups; want 2, 2, 4", resets, b.downs["a"], pokes)
	}
	// Not established (as read by the last pass): nothing to reset.
	now = now.Add(hold)
	b.established[a] = false
	cycle()
	if resets != 2 {
		t.Fatalf("a session not established was reset")
	}

	// AdminDown from the speaker: its BGP session is left alone.
	now = now.Add(hold)
	b.established[a] = true
	if d := b.change("a", peer, bfd.Status{State: bfd.Down, Prev: bfd.Up, Remote: bfd.AdminDown, Diag: bfd.DiagNeighborDown}, now, hold); d.reset {
		t.Fatal("the BGP session of a speaker that said AdminDown was reset")
	}
}
