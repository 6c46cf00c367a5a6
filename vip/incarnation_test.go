package vip

import (
	"testing"
)

// TestHeartbeatOfAnotherProcessWhileThePeerIsHeard: a heartbeat of
// another incarnation of a peer (a datagram of an earlier process of it,
// recorded and sent again) is refused while the peer's process is heard:
// a replayed "leaving" no longer has this host take a live peer's VIPs,
// nor a replayed heartbeat stand for the peer. A peer that restarts is
// taken at its new incarnation once its earlier process is silent for
// the dead time, or at once after that process said it leaves.
func TestHeartbeatOfAnotherProcessWhileThePeerIsHeard(t *testing.T) {
	l := newPeerLoop(t, 30)
	m, st := l.m, &l.m.loop
	if len(l.holding["n2"]) == 0 {
		t.Fatal("n2 holds none of the VIPs: pick other addresses")
	}
	held := func() int {
		n := 0
		for a := range l.holding["n2"] {
			if st.holding[a] {
				n++
			}
		}
		return n
	}
	// A recorded "leaving" of n2's earlier process, and one of its
	// ordinary heartbeats that holds nothing, sent again while n2 runs.
	for i := range 20 {
		l.tick()
		m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: 77, Seq: uint64(1000 + i), Leaving: true}})
		m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: 78, Seq: uint64(1000 + i), Eligible: true, Holdings: true, HoldingSent: true}})
		m.beatTick(l.now)
		if p := st.peers["n2"]; p.Left || len(p.Holding) != len(l.holding["n2"]) {
			t.Fatalf("tick %d: replayed heartbeats of another process stood for the live peer n2: left %v, holding %d of %d", i, p.Left, len(p.Holding), len(l.holding["n2"]))
		}
		if n := held(); n != 0 {
			t.Fatalf("tick %d: this host took %d of live n2's VIPs after a replayed heartbeat", i, n)
		}
	}
	if st.refusedIncarnations == 0 {
		t.Fatal("no heartbeat counted as refused")
	}

	// n2 restarts without saying so: its new process is taken once the
	// earlier one is silent for the dead time.
	l.alive["n2"] = false
	for range int(m.dead/m.cfg.HeartbeatInterval) + 2 {
		l.tick()
	}
	l.alive["n2"], l.inc["n2"], l.seq["n2"] = true, 2, 0
	l.tick()
	if last := st.lastSeq["n2"]; last[0] != 2 {
		t.Fatalf("n2's new process (incarnation 2) not taken after its earlier one fell silent: %v", last)
	}

	// n2 stops and says so; its next process is taken at once.
	l.tick()
	m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: 2, Seq: l.seq["n2"] + 1, Leaving: true}})
	l.inc["n2"], l.seq["n2"] = 3, 0
	l.tick()
	if last := st.lastSeq["n2"]; last[0] != 3 || st.peers["n2"].Left {
		t.Fatalf("n2's process after one that said it leaves not taken at once: %v, left %v", last, st.peers["n2"].Left)
	}
}
