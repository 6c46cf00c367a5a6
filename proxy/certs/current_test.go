package certs

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// replayStore is a store whose state is still being replayed: its barrier
// returns only when the test releases it, with the state it then holds.
type replayStore struct {
	*memStore
	release chan struct{}
	mu      sync.Mutex
	final   []*pb.Object
}

func (s *replayStore) ReadBarrier(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *replayStore) Objects() ([]*pb.Object, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final, 1
}

var _ Current = (*replayStore)(nil)

// logLines collects a logger's lines.
type logLines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A restarting host replays its log: a state on the way still holds a load
// balancer deleted since. Its names are never handed to certmagic (no
// order, no "storage is probably misconfigured" while the store cannot be
// written yet), and no status is written from that state; once the state
// is current, the names of the load balancers that exist are managed.
func TestReplayedStateManagesNoName(t *testing.T) {
	t.Parallel()
	store := &replayStore{memStore: newMemStore(), release: make(chan struct{})}
	var logs logLines
	m, err := New(Config{Store: store, Host: "h1", CA: "https://127.0.0.1:1/dir",
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)

	tenant := acmeTenant("acme", 10, "acme.example")
	// The replay passes a state that holds the deleted load balancer.
	m.Update([]*pb.Object{tenant, acmeLB("acme", "gone", "gone.acme.example")})
	// Run has woken for it and must not act: poll the wake channel empty.
	deadline := time.Now().Add(5 * time.Second)
	for len(m.wake) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// The state the replay reaches: the load balancer is gone, another exists.
	final := []*pb.Object{tenant, acmeLB("acme", "kept", "kept.acme.example")}
	store.mu.Lock()
	store.final = final
	store.mu.Unlock()
	close(store.release)
	m.Update(final) // as the feed of committed states would

	waitFor(t, "the existing load balancer's name managed", func() bool {
		return strings.Contains(logs.String(), "kept.acme.example")
	})
	if strings.Contains(logs.String(), "gone.acme.example") {
		t.Errorf("the deleted load balancer's name reached certmagic:\n%s", logs.String())
	}
	store.memStore.mu.Lock()
	defer store.memStore.mu.Unlock()
	for k := range store.objects {
		if strings.Contains(k, "gone") {
			t.Errorf("a status was written from a replayed state: %s", k)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
