package observe

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// view is a reader's copy of a Plane, built from what Next returns.
type view map[string]LBState

func (v view) apply(ch PlaneChange) {
	if ch.Reset {
		clear(v)
	}
	maps.Copy(v, ch.LBs)
	for _, lb := range ch.Gone {
		delete(v, lb)
	}
}

func ready(i int) map[string]LBState {
	return map[string]LBState{"t/lb": {Ready: strconv.Itoa(i)}}
}

// TestPlaneReaderMissesNoChange: a writer sets eight load balancers'
// state as fast as it can (removing one now and then) while a reader
// follows with a watcher. Each Next returns revisions after the last one
// and a state no older than the reader had; once the writer stops, the
// reader's copy is the plane's final state, whatever it coalesced or
// reset on the way.
func TestPlaneReaderMissesNoChange(t *testing.T) {
	t.Parallel()
	const writes, lbs = 20000, 8
	p := NewPlane()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= writes; i++ {
			lb := fmt.Sprintf("t/lb-%d", i%lbs)
			if i%97 == 0 {
				p.Set(nil, []string{lb})
				continue
			}
			p.Set(map[string]LBState{lb: {Ready: strconv.Itoa(i), Members: []Member{
				{Pool: "web", Addr: netip.MustParseAddrPort("10.0.0.1:80"), Healthy: i%2 == 0}}}}, nil)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a loaded 2-core machine under -race
	defer cancel()
	// A Next waits for the next change; the writer's end wakes one that
	// waits when the last change was read already.
	writing, wrote := context.WithCancel(ctx)
	defer wrote()
	go func() { <-done; wrote() }()
	w := p.Watch(0)
	got := view{}
	var last uint64
	nexts, resets := 0, 0
	take := func(ch PlaneChange) {
		t.Helper()
		nexts++
		if ch.Reset {
			resets++
		}
		if ch.Revision <= last {
			t.Fatalf("revision %d after %d", ch.Revision, last)
		}
		for lb, s := range ch.LBs {
			if old, ok := got[lb]; ok && !ch.Reset {
				o, _ := strconv.Atoi(old.Ready)
				n, _ := strconv.Atoi(s.Ready)
				if n <= o {
					t.Fatalf("%s went back from %s to %s at revision %d", lb, old.Ready, s.Ready, ch.Revision)
				}
			}
		}
		got.apply(ch)
		last = ch.Revision
	}
	for writing.Err() == nil {
		ch, err := w.Next(writing)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("Next after revision %d: %v", last, err)
			}
			break // the writer ended
		}
		take(ch)
	}
	// Every change is written: read what is left.
	for last != p.Revision() {
		ch, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("Next after revision %d (the plane's last %d): %v", last, p.Revision(), err)
		}
		take(ch)
	}
	want := view{}
	for i := range lbs {
		if s, ok := p.Get(fmt.Sprintf("t/lb-%d", i)); ok {
			want[fmt.Sprintf("t/lb-%d", i)] = s
		}
	}
	if !maps.EqualFunc(got, want, LBState.Equal) {
		t.Fatalf("the reader has %v at revision %d, the plane %v", got, last, want)
	}
	t.Logf("%d writes read in %d Nexts (%d resets)", writes, nexts, resets)
}

// TestPlaneReaderBehindTheHistoryGetsAReset: a reader further behind than
// PlaneHistory revisions gets every load balancer at once, removed ones
// left out; one within it gets the changes alone.
func TestPlaneReaderBehindTheHistoryGetsAReset(t *testing.T) {
	t.Parallel()
	p := NewPlane()
	p.Set(map[string]LBState{"t/a": {}, "t/b": {Ready: "down"}}, nil)
	near, far := p.Watch(p.Revision()), p.Watch(p.Revision())
	ctx := context.Background()
	p.Set(ready(1), nil)
	ch, err := near.Next(ctx)
	if err != nil || ch.Reset || len(ch.LBs) != 1 || ch.LBs["t/lb"].Ready != "1" {
		t.Fatalf("one revision behind: %+v, %v; want t/lb alone", ch, err)
	}
	p.Set(ready(2), nil)
	p.Set(nil, []string{"t/a"})
	ch, err = near.Next(ctx)
	if err != nil || ch.Reset || len(ch.LBs) != 1 || ch.LBs["t/lb"].Ready != "2" || len(ch.Gone) != 1 || ch.Gone[0] != "t/a" {
		t.Fatalf("within the history: %+v, %v; want t/lb and t/a gone", ch, err)
	}
	for i := 3; i <= PlaneHistory+3; i++ {
		p.Set(ready(i), nil)
	}
	ch, err = far.Next(ctx)
	if err != nil || !ch.Reset || len(ch.LBs) != 2 || ch.LBs["t/lb"].Ready != strconv.Itoa(PlaneHistory+3) || ch.LBs["t/b"].Ready != "down" {
		t.Fatalf("behind the history: %+v, %v; want a Reset with t/b and t/lb", ch, err)
	}
}

// TestPlaneSetsThatChangeNothing: a state set again as it was is no
// revision and wakes no reader; the first Set is one even when empty, so
// that readers learn the data plane has reported.
func TestPlaneSetsThatChangeNothing(t *testing.T) {
	t.Parallel()
	p := NewPlane()
	if r := p.Set(nil, nil); r != 1 {
		t.Fatalf("first empty Set: revision %d, want 1", r)
	}
	w := p.Watch(0)
	if ch, err := w.Next(context.Background()); err != nil || !ch.Reset || len(ch.LBs) != 0 {
		t.Fatalf("first Next: %+v, %v; want an empty Reset", ch, err)
	}
	p.Set(ready(1), nil)
	if r := p.Set(ready(1), []string{"t/never"}); r != 2 {
		t.Fatalf("the same state again: revision %d, want 2", r)
	}
	if _, err := w.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if ch, err := w.Next(ctx); err == nil {
		t.Fatalf("no change, yet Next returned %+v", ch)
	}
}

// TestPlaneWatcherOnlyOneTenant: a watcher of one tenant passes over the
// revisions of the others and is told of its own.
func TestPlaneWatcherOnlyOneTenant(t *testing.T) {
	t.Parallel()
	p := NewPlane()
	p.Set(map[string]LBState{"a/x": {}, "b/x": {}}, nil)
	w := p.Watch(0).Only("a/")
	ch, err := w.Next(context.Background())
	if err != nil || !ch.Reset || len(ch.LBs) != 1 {
		t.Fatalf("first Next: %+v, %v; want a Reset with a/x alone", ch, err)
	}
	p.Set(map[string]LBState{"b/x": {Ready: "down"}}, nil)
	p.Set(map[string]LBState{"ab/x": {Ready: "down"}}, nil)
	p.Set(map[string]LBState{"a/x": {Ready: "down"}}, nil)
	ch, err = w.Next(context.Background())
	if err != nil || ch.Reset || len(ch.LBs) != 1 || ch.LBs["a/x"].Ready != "down" || ch.Revision != 4 {
		t.Fatalf("%+v, %v; want a/x at revision 4", ch, err)
	}
}
