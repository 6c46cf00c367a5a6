package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/cli"
	"github.com/teapot-lb/teapot-lb/api/client/clienttest"
)

// cancelWriter collects output and cancels a command once it has written
// a batch (a write that ends a line).
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel func()
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if bytes.HasSuffix(p, []byte("\n")) {
		w.cancel()
	}
	return n, err
}

func (w *cancelWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestEventsJSON: `events -o json` prints one JSON array, as `get -o
// json` does (an empty one without events), and `events -o json --watch`
// one object per line, so that each line parses as it arrives.
func TestEventsJSON(t *testing.T) {
	fake := seeded(t)
	fake.hosts = membersDown(fake)
	r := run(t, fake, "", "events", "-o", "json")
	var evs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &evs); err != nil || r.code != 0 {
		t.Fatalf("events -o json is not one JSON array (%v, exit %d):\n%s", err, r.code, r.stdout)
	}
	if len(evs) < 2 || evs[0]["type"] == nil {
		t.Fatalf("events -o json: %d events, the first %v; want the fake's events", len(evs), evs)
	}
	if r := run(t, seeded(t), "", "events", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("events -o json without events printed %q, want []", r.stdout)
	}

	env := clienttest.Start(t, fake)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := &cancelWriter{cancel: cancel}
	root := cli.NewRoot(cli.WithClock(func() time.Time { return t0 }))
	root.SetArgs([]string{"--config", env.WriteConfig(t), "events", "-o", "json", "--watch"})
	root.SetOut(out)
	root.SetErr(io.Discard)
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(evs) {
		t.Fatalf("events -o json --watch printed %d lines for %d events:\n%s", len(lines), len(evs), out.String())
	}
	for i, line := range lines {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev["message"] != evs[i]["message"] {
			t.Errorf("line %d is not event %d as one JSON object (%v): %s", i, i, err, line)
		}
	}
}
