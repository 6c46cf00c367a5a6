package proxy

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// chanWatcher yields the revisions sent on it; closing it ends the watch.
type chanWatcher chan Revision

func (w chanWatcher) Next(ctx context.Context) (Revision, error) {
	select {
	case r, ok := <-w:
		if !ok {
			return Revision{}, errors.New("watch ended")
		}
		return r, nil
	case <-ctx.Done():
		return Revision{}, ctx.Err()
	}
}

// TestFeedFollow: every revision reaches the proxy and then the
// follower, in order; one that changes no kind the data plane reads is
// passed on with nothing touched; WaitApplied wakes at the revision
// waited for and not before; once the watch ends Alive fails and a wait
// ends with ErrNotFollowing.
func TestFeedFollow(t *testing.T) {
	t.Parallel()
	p, _ := newProxy(t, Config{})
	feed := NewFeed(p)
	w := make(chanWatcher)
	type seen struct {
		rev     uint64
		touched []string
	}
	got := make(chan seen, 8)
	go feed.Follow(context.Background(), w, func(r Revision, touched []string) { got <- seen{r.Revision, touched} })
	if err := feed.Alive(); err != nil {
		t.Fatalf("Alive while following: %v", err)
	}

	waited := make(chan error, 1)
	go func() { waited <- feed.WaitApplied(context.Background(), 3) }()

	w <- Revision{Revision: 1, Reset: true, Objects: labObjects()}
	lock := &pb.ObjectRef{Kind: api.KindStorageItem, Name: "lock"}
	w <- Revision{Revision: 2, Changes: []Change{{Ref: lock}}}
	if err := feed.WaitApplied(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		t.Fatalf("WaitApplied(3) returned %v at revision %d", err, feed.Applied())
	default:
	}
	lb := &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: l4LB("web", "127.0.0.1", freePort(t), "tcp", "127.0.0.1:1")}}
	w <- Revision{Revision: 3, Changes: []Change{{Ref: api.RefOf(lb), Object: lb}}}
	if err := <-waited; err != nil {
		t.Fatalf("WaitApplied(3) = %v", err)
	}
	for i, want := range []seen{{1, nil}, {2, nil}, {3, []string{"acme/web"}}} {
		s := <-got
		if s.rev != want.rev || !slices.Equal(s.touched, want.touched) {
			t.Errorf("follower's call %d: revision %d touched %v, want %d touched %v", i, s.rev, s.touched, want.rev, want.touched)
		}
	}
	if len(p.Members("acme/web")) != 1 {
		t.Errorf("revision 3 did not reach the proxy: members %v", p.Members("acme/web"))
	}

	close(w)
	if err := feed.WaitApplied(context.Background(), 99); !errors.Is(err, ErrNotFollowing) {
		t.Errorf("WaitApplied after the watch ended = %v, want ErrNotFollowing", err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 { // the select would pick either at random
		if err := feed.WaitApplied(ended, 99); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitApplied with its context ended = %v, want context.Canceled", err)
		}
	}
	if err := feed.Alive(); !errors.Is(err, ErrNotFollowing) {
		t.Errorf("Alive after the watch ended = %v, want ErrNotFollowing", err)
	}
}
