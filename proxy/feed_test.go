package proxy

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// logRecorder keeps the messages logged, with their "lb" attribute.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	msg := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "lb" {
			msg += " " + a.Value.String()
		}
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	return nil
}

// take returns the load balancer messages logged since the last take.
func (r *logRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if strings.HasPrefix(m, "load balancer ") {
			out = append(out, m)
		}
	}
	r.msgs = nil
	return out
}

// writes is one revision's writes as Feed.Apply takes them.
func writes(objs ...*pb.Object) func(func(*pb.ObjectRef, *pb.Object) bool) {
	return func(yield func(*pb.ObjectRef, *pb.Object) bool) {
		for _, o := range objs {
			if !yield(api.RefOf(o), o) {
				return
			}
		}
	}
}

// TestFeedLogsProblemTransitions: a load balancer's problems are logged
// once when they appear and "serving" once when they go, and a revision
// that changes nothing served (a write of a kind the data plane does not
// read) neither forgets what was logged nor logs anything.
func TestFeedLogsProblemTransitions(t *testing.T) {
	rec := &logRecorder{}
	p, _ := newProxy(t, Config{Logger: slog.New(rec)})
	feed := NewFeed(p)
	port := freePort(t)
	broken := l4LB("web", "127.0.0.1", port, "tcp", "127.0.0.1:1", "not-an-address")
	if err := feed.Reset(labObjects(broken), 1); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"load balancer has problems acme/web"}) {
		t.Fatalf("after Reset logged %q, want the problem of acme/web", got)
	}

	node := &pb.Object{Kind: &pb.Object_Node{Node: &pb.Node{Id: "n2"}}}
	for rev := uint64(2); rev <= 3; rev++ {
		touched, err := feed.Apply(writes(node), rev, time.Time{})
		if err != nil || len(touched) != 0 {
			t.Fatalf("revision %d of a host only: touched %q, err %v; want nothing", rev, touched, err)
		}
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a revision that changed nothing served logged %q", got)
	}

	// Still broken the same way: nothing new to log.
	still := clone(broken)
	still.Pools["app"].Members = append(still.Pools["app"].Members, &pb.Member{Address: "127.0.0.1:2"})
	touched, err := feed.Apply(writes(wrapLB(still)), 4, time.Time{})
	if err != nil || !slices.Equal(touched, []string{"acme/web"}) {
		t.Fatalf("touched %q, err %v; want acme/web", touched, err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("unchanged problems logged again: %q", got)
	}

	fixed := l4LB("web", "127.0.0.1", port, "tcp", "127.0.0.1:1")
	if _, err := feed.Apply(writes(wrapLB(fixed)), 5, time.Now()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"load balancer serving acme/web"}) {
		t.Fatalf("after the fix logged %q, want acme/web serving", got)
	}
}

// attrRecorder keeps the attributes of each "configuration applied" line.
type attrRecorder struct {
	mu    sync.Mutex
	lines []map[string]slog.Value
}

func (r *attrRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *attrRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *attrRecorder) WithGroup(string) slog.Handler            { return r }
func (r *attrRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "configuration applied" {
		return nil
	}
	attrs := map[string]slog.Value{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, attrs)
	r.mu.Unlock()
	return nil
}

// TestFeedLogsStageTimes: the line of a revision applied through the feed
// says how long it waited from its commit on this host (given) and how
// long it took to compile and to serve.
func TestFeedLogsStageTimes(t *testing.T) {
	rec := &attrRecorder{}
	p, _ := newProxy(t, Config{Logger: slog.New(rec)})
	feed := NewFeed(p)
	port := freePort(t)
	if err := feed.Reset(labObjects(l4LB("web", "127.0.0.1", port, "tcp", "127.0.0.1:1")), 1); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	committed := time.Now().Add(-50 * time.Millisecond)
	if _, err := feed.Apply(writes(wrapLB(l4LB("web", "127.0.0.1", port, "tcp", "127.0.0.1:2"))), 2, committed); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	last := rec.lines[len(rec.lines)-1]
	if last["revision"].Uint64() != 2 {
		t.Fatalf("last line is of revision %v, want 2", last["revision"])
	}
	for _, k := range []string{"waited_ms", "compile_ms", "serve_ms"} {
		v, ok := last[k]
		if !ok || v.Kind() != slog.KindFloat64 || v.Float64() < 0 {
			t.Errorf("%s = %v, want a duration in milliseconds", k, v)
		}
	}
	if w := last["waited_ms"].Float64(); w < 50 {
		t.Errorf("waited_ms %.3f; the revision was committed 50 ms before", w)
	}
}
