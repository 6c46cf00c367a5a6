package consensus

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRaftLogPeerFailuresRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newRaftLogWriter(slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	hb := func(peer string) {
		_, _ = w.Write([]byte(`2026-01-01T00:00:00.000Z [ERROR] raft: failed to heartbeat to: peer=` + peer + ` backoff time=10ms error="dial tcp ` + peer + `: connect: connection refused"` + "\n"))
	}
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}

	// 30 s of heartbeat failures to one peer every 10 ms, interleaved with
	// another peer's: one line per peer.
	for range 3000 {
		hb("127.0.0.1:7301")
		hb("127.0.0.1:7302")
		now = now.Add(10 * time.Millisecond)
	}
	if got := lines(); len(got) != 2 {
		t.Fatalf("after 30s of failures to two peers: %d lines, want 2:\n%s", len(got), buf.String())
	}
	// Past a minute: one summary per peer, counting what was held back.
	for range 3100 {
		hb("127.0.0.1:7301")
		now = now.Add(10 * time.Millisecond)
	}
	got := lines()
	if len(got) != 3 || !strings.Contains(got[2], "peer still failing") || !strings.Contains(got[2], "lines_held_back=") {
		t.Fatalf("after a minute: want a summary line as the third line, got:\n%s", buf.String())
	}
	// Recovery is logged once; the next failure is a new episode.
	w.peerRecovered("node2", "127.0.0.1:7301")
	hb("127.0.0.1:7301")
	got = lines()
	if len(got) != 5 || !strings.Contains(got[3], "peer reachable again") || !strings.Contains(got[4], "failed to heartbeat") {
		t.Fatalf("after recovery and a new failure: want a recovery line and the failure, got:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("a failing peer is logged as an ERROR:\n%s", buf.String())
	}
	// Other lines pass through unchanged, at their level.
	_, _ = w.Write([]byte("2026-01-01T00:00:00.000Z [INFO]  raft: entering follower state: follower=x\n"))
	if got = lines(); !strings.Contains(got[len(got)-1], "level=INFO") || !strings.Contains(got[len(got)-1], "entering follower state") {
		t.Fatalf("plain line: %s", got[len(got)-1])
	}
	// A connection read ending because this host's transport shuts down
	// is no error: it happens on every stop.
	before := buf.Len()
	_, _ = w.Write([]byte(`2026-01-01T00:00:00.000Z [ERROR] raft: failed to decode incoming command: error="transport shutdown"` + "\n"))
	if strings.Contains(buf.String()[before:], "level=ERROR") || strings.Contains(buf.String()[before:], "level=WARN") {
		t.Errorf("a transport shutdown is logged as a fault: %s", buf.String()[before:])
	}
}

// A host that starts and has heard no leader yet starts an election: that
// is how every bootstrap goes, logged as information. Losing a leader it
// had heard stays a warning.
func TestRaftLogFirstElectionIsNoWarning(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := newRaftLogWriter(slog.New(slog.NewTextHandler(&buf, nil)), time.Now)
	_, _ = w.Write([]byte("2026-01-01T00:00:00.000Z [WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr= last-leader-id=\n"))
	if got := buf.String(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "starting election") {
		t.Errorf("first election logged as %q, want INFO", got)
	}
	buf.Reset()
	_, _ = w.Write([]byte("2026-01-01T00:00:00.000Z [WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr=127.0.0.1:7301 last-leader-id=n1\n"))
	if got := buf.String(); !strings.Contains(got, "level=WARN") {
		t.Errorf("a lost leader logged as %q, want WARN", got)
	}
}
