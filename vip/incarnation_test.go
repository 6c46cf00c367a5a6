package vip

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// TestRecordedHeartbeatOfAnEarlierProcessOfADeadPeer: n2 restarts (a
// new process, with a greater incarnation), then dies. Heartbeats of its
// earlier process, recorded and sent again, are refused: n2 stays dead
// and n1 keeps the VIPs it took over from it. Before, a heartbeat of
// another incarnation was refused only while the process heard still
// sent, so the recording had the dead n2 look alive again, holding its
// VIPs. A heartbeat of n2's latest process sent again is refused by its
// sequence, and n2's next process is taken at once. n1's own heartbeats
// say that its incarnation is ordered.
func TestRecordedHeartbeatOfAnEarlierProcessOfADeadPeer(t *testing.T) {
	l := newPeerLoop(t, 30)
	m, st := l.m, &l.m.loop
	if p := m.beats.plan.Load(); p == nil || !p.hb.Ordered {
		t.Fatal("n1's own heartbeats do not say that its incarnation is ordered")
	}
	l.ordered = true
	mine := map[netip.Addr]bool{}
	for a := range l.holding["n2"] {
		if rank(a, []string{"n1", "n3"})[0] == "n1" {
			mine[a] = true
		}
	}
	if len(mine) == 0 {
		t.Fatal("the ranking gives n1 none of n2's VIPs: pick other addresses")
	}
	// n2's first process, recorded.
	from := len(l.sent)
	for range 20 {
		l.tick()
	}
	var recorded []*heartbeat
	for _, r := range l.sent[from:] {
		if r.hb.ID == "n2" {
			recorded = append(recorded, r.hb)
		}
	}

	// n2 restarts without saying so, is taken at its next incarnation
	// once the first is silent for the dead time, then dies.
	l.alive["n2"] = false
	for range int(m.dead/m.cfg.HeartbeatInterval) + 2 {
		l.tick()
	}
	l.alive["n2"], l.inc["n2"], l.seq["n2"] = true, 2, 0
	from = len(l.sent)
	for range 20 {
		l.tick()
	}
	if last := st.lastSeq["n2"]; last[0] != 2 {
		t.Fatalf("n2's second process not taken: %v", last)
	}
	var latest []*heartbeat
	for _, r := range l.sent[from:] {
		if r.hb.ID == "n2" {
			latest = append(latest, r.hb)
		}
	}
	l.alive["n2"] = false
	died := l.now
	for l.now.Sub(died) < m.dead+3*m.cfg.HeartbeatInterval {
		l.tick()
	}
	for a := range mine {
		if !st.holding[a] {
			t.Fatalf("%s: n1 did not take it over from the dead n2 (%s)", a, st.records[a].reason)
		}
	}

	// Both recordings sent again, for longer than the dead time.
	heard := st.peers["n2"].Heard
	refused := st.refusedIncarnations
	for i, hb := range append(recorded, latest...) {
		l.now = l.now.Add(m.cfg.HeartbeatInterval)
		m.receive(received{at: l.now, hb: hb})
		l.tick()
		if p := st.peers["n2"]; !p.Heard.Equal(heard) {
			t.Fatalf("replayed heartbeat %d (incarnation %d, seq %d) taken: the dead n2 heard again", i, hb.Incarnation, hb.Seq)
		}
		for a := range mine {
			if !st.holding[a] {
				t.Fatalf("replayed heartbeat %d: n1 let %s go to the dead n2 (%s)", i, a, st.records[a].reason)
			}
		}
	}
	if got := st.refusedIncarnations - refused; got != uint64(len(recorded)) {
		t.Errorf("%d heartbeats counted as refused, want the %d of the earlier process", got, len(recorded))
	}

	// n2's next process is taken at once.
	l.alive["n2"], l.inc["n2"], l.seq["n2"] = true, 3, 0
	l.tick()
	if last := st.lastSeq["n2"]; last[0] != 3 || st.peers["n2"].Heard.Equal(heard) {
		t.Fatalf("n2's third process not taken: %v", last)
	}
}

// TestHeartbeatsOfAnEarlierVersionTakenAsBefore: a host of an earlier
// version, or one rolled back to it, sends heartbeats without Ordered,
// with a random incarnation. They are taken as before: after the dead
// time when the process heard (ordered or not) did not say it leaves, at
// once when it did, whatever the number; and within one process only
// with a greater sequence.
func TestHeartbeatsOfAnEarlierVersionTakenAsBefore(t *testing.T) {
	l := newPeerLoop(t, 30)
	m, st := l.m, &l.m.loop
	l.ordered, l.inc["n2"] = true, 1<<62
	l.alive["n2"] = false
	for range int(m.dead/m.cfg.HeartbeatInterval) + 2 {
		l.tick()
	}
	l.alive["n2"] = true
	l.tick()
	if last := st.lastSeq["n2"]; last[0] != 1<<62 || st.topIncarnation["n2"] != 1<<62 {
		t.Fatalf("n2's ordered process not taken: %v, top %d", last, st.topIncarnation["n2"])
	}

	// Rolled back: silent for the dead time, then a random incarnation
	// below the ordered one.
	l.alive["n2"] = false
	for range int(m.dead/m.cfg.HeartbeatInterval) + 2 {
		l.tick()
	}
	l.ordered, l.alive["n2"], l.inc["n2"], l.seq["n2"] = false, true, 5, 0
	l.tick()
	if last := st.lastSeq["n2"]; last[0] != 5 {
		t.Fatalf("n2 rolled back to an earlier version not taken: %v", last)
	}
	heard := st.peers["n2"].Heard
	l.now = l.now.Add(m.cfg.HeartbeatInterval)
	m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: 5, Seq: l.seq["n2"], Eligible: true}})
	if !st.peers["n2"].Heard.Equal(heard) {
		t.Fatal("a heartbeat without Ordered whose sequence is not newer taken")
	}
	// It stops and says so; its next process, of a lower random number,
	// is taken at once.
	m.receive(received{at: l.now, hb: &heartbeat{ID: "n2", Incarnation: 5, Seq: l.seq["n2"] + 1, Leaving: true}})
	l.inc["n2"], l.seq["n2"] = 3, 0
	l.tick()
	if last := st.lastSeq["n2"]; last[0] != 3 || st.peers["n2"].Left {
		t.Fatalf("n2's process after one that said it leaves not taken at once: %v, left %v", last, st.peers["n2"].Left)
	}
}

// TestArrivalNotesNoEarlierProcess: the reader notes a heartbeat's
// arrival (which this host's own heartbeats report as the time it heard
// the peer) only for a newer one: not for a heartbeat of an earlier
// process than the latest ordered one noted, nor one of the same
// process that is not newer, nor one that says the peer leaves.
func TestArrivalNotesNoEarlierProcess(t *testing.T) {
	steps := []struct {
		name string
		hb   heartbeat
		want bool
	}{
		{"first", heartbeat{Incarnation: 10, Seq: 1, Ordered: true}, true},
		{"next", heartbeat{Incarnation: 10, Seq: 2, Ordered: true}, true},
		{"same again", heartbeat{Incarnation: 10, Seq: 2, Ordered: true}, false},
		{"older of the same process", heartbeat{Incarnation: 10, Seq: 1, Ordered: true}, false},
		{"leaving", heartbeat{Incarnation: 10, Seq: 3, Ordered: true, Leaving: true}, false},
		{"a later process", heartbeat{Incarnation: 11, Seq: 1, Ordered: true}, true},
		{"an earlier process", heartbeat{Incarnation: 10, Seq: 9, Ordered: true}, false},
		{"an earlier version's, random", heartbeat{Incarnation: 7, Seq: 1}, true},
		{"an earlier process after it", heartbeat{Incarnation: 10, Seq: 10, Ordered: true}, false},
		{"a later process after it", heartbeat{Incarnation: 12, Seq: 1, Ordered: true}, true},
	}
	var a peerArrival
	for _, s := range steps {
		if got := a.note(&s.hb); got != s.want {
			t.Errorf("%s: noted %v, want %v", s.name, got, s.want)
		}
	}
}

// TestNextIncarnation: each process of a host has a greater incarnation
// than the last, kept in its state directory, also when the clock was
// set back; without a directory the clock gives it. A file that does not
// hold a number is refused, saying what to do.
func TestNextIncarnation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	first, err := nextIncarnation(dir, now)
	if err != nil || first != uint64(now.UnixNano()) {
		t.Fatalf("first = %d, %v; want the clock, %d", first, err, now.UnixNano())
	}
	second, err := nextIncarnation(dir, now.Add(-time.Hour))
	if err != nil || second != first+1 {
		t.Fatalf("after the clock was set back: %d, %v; want %d", second, err, first+1)
	}
	third, err := nextIncarnation(dir, now.Add(time.Second))
	if err != nil || third != uint64(now.Add(time.Second).UnixNano()) {
		t.Fatalf("later: %d, %v; want the clock", third, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, incarnationFile)); err != nil || strings.TrimSpace(string(b)) != strconv.FormatUint(third, 10) {
		t.Fatalf("kept %q, %v; want %d", b, err, third)
	}
	missing := filepath.Join(t.TempDir(), "not-yet")
	if inc, err := nextIncarnation(missing, now); err != nil || inc != uint64(now.UnixNano()) {
		t.Fatalf("a data dir not made yet: %d, %v; want the clock, %d", inc, err, now.UnixNano())
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the data dir was made (%v): its store makes and checks it", err)
	}
	if inc, err := nextIncarnation("", now); err != nil || inc != uint64(now.UnixNano()) {
		t.Fatalf("without a directory: %d, %v", inc, err)
	}
	if err := os.WriteFile(filepath.Join(dir, incarnationFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := nextIncarnation(dir, now); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "remove the file") {
		t.Fatalf("a file of garbage: %v; want ErrConfig saying what to do", err)
	}
}
