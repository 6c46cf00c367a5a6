package consensus

import (
	"bufio"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Timings of the peer-failure rate limit of Raft's log.
const (
	// peerQuiet: a peer whose failures stop for this long is back to
	// normal; its next failure is logged again.
	peerQuiet = 10 * time.Second
	// peerSummary: while a peer keeps failing, one summary line per
	// period counts the lines held back.
	peerSummary = time.Minute
)

// raftLogWriter carries hashicorp/raft's log lines into slog. Lines about
// a failing peer (heartbeats, appendEntries, votes, contact) repeat many
// times a second while a host is down; each peer gets one WARN line when
// it starts failing and a summary per peerSummary while it keeps failing.
type raftLogWriter struct {
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	peers map[string]*peerFailures
}

type peerFailures struct {
	first, last, summary time.Time
	held                 int
	example              string
}

func newRaftLogWriter(log *slog.Logger, now func() time.Time) *raftLogWriter {
	return &raftLogWriter{log: log, now: now, peers: map[string]*peerFailures{}}
}

// peerField finds the peer a line is about.
var peerField = regexp.MustCompile(`\b(?:peer|target|server-id)=("[^"]*"|\S+)`)

// noLeaderYet matches raft's election line of a follower that has heard
// no leader ("last-leader-addr=" empty).
var noLeaderYet = regexp.MustCompile(`^raft: heartbeat timeout reached, starting election: last-leader-addr=(\s|$)`)

func (w *raftLogWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		line := sc.Text()
		level := slog.LevelInfo
		switch {
		case strings.Contains(line, "[ERROR]"):
			level = slog.LevelError
		case strings.Contains(line, "[WARN]"):
			level = slog.LevelWarn
		case strings.Contains(line, "[DEBUG]"), strings.Contains(line, "[TRACE]"):
			level = slog.LevelDebug
		}
		if i := strings.Index(line, "]"); i >= 0 && i+1 < len(line) {
			line = strings.TrimSpace(line[i+1:])
		}
		if level >= slog.LevelWarn && strings.Contains(line, `error="transport shutdown"`) {
			// This host's own transport is closing (a stop): a
			// connection still being read ends, which is no fault.
			level = slog.LevelDebug
		}
		if level == slog.LevelWarn && noLeaderYet.MatchString(line) {
			// No leader heard since this process started: an election is
			// how a starting host finds or becomes the leader (every
			// bootstrap and every restart of a one-host cluster), no
			// fault. A host that loses a leader it heard still warns.
			level = slog.LevelInfo
		}
		if level >= slog.LevelWarn && strings.HasPrefix(line, "raft: failed to") {
			if m := peerField.FindStringSubmatch(line); m != nil {
				w.peerFailure(strings.Trim(m[1], `"`), line)
				continue
			}
		}
		w.log.Log(context.Background(), level, line)
	}
	return len(p), nil
}

// peerFailure logs the first failure of an episode and then a summary
// per peerSummary; an episode ends after peerQuiet without failures.
func (w *raftLogWriter) peerFailure(peer string, line string) {
	now := w.now()
	w.mu.Lock()
	f := w.peers[peer]
	if f == nil || now.Sub(f.last) >= peerQuiet {
		f = &peerFailures{first: now, summary: now}
		w.peers[peer] = f
		f.last = now
		w.mu.Unlock()
		// A peer that cannot be reached is a warning: the cluster
		// carries on while a majority remains.
		w.log.Log(context.Background(), slog.LevelWarn, line, "peer", peer,
			"note", "further failures of this peer are summarised every "+peerSummary.String())
		return
	}
	f.last = now
	f.held++
	f.example = line
	if now.Sub(f.summary) < peerSummary {
		w.mu.Unlock()
		return
	}
	held, example, since := f.held, f.example, f.first
	f.held, f.summary = 0, now
	w.mu.Unlock()
	w.log.Warn("peer still failing", "peer", peer, "since", since.UTC().Format(time.RFC3339),
		"lines_held_back", held, "last", example)
}

// peerRecovered ends the failure episodes of the peer with this id and
// address and logs it once.
func (w *raftLogWriter) peerRecovered(id, addr string) {
	w.mu.Lock()
	var episodes []*peerFailures
	for k, f := range w.peers {
		if k == id || (addr != "" && strings.Contains(k, addr)) {
			episodes = append(episodes, f)
			delete(w.peers, k)
		}
	}
	w.mu.Unlock()
	if len(episodes) > 0 {
		w.log.Info("peer reachable again", "peer", id, "down_for", w.now().Sub(episodes[0].first).Round(time.Millisecond).String())
	}
}
