package consensus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
)

// TestWatchOnlyPassesOverOtherKinds: a watcher restricted to the kinds
// the data plane reads is not woken by certificate storage lock refreshes
// and wakes for the next load balancer write, while an unrestricted
// watcher sees every revision.
func TestWatchOnlyPassesOverOtherKinds(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/24"), tenant("acme", "public"))
	start := n.Revision()
	only := n.Watch(start+1).Only(api.KindLoadBalancer, api.KindTenant, api.KindVIPPool)
	all := n.Watch(start + 1)

	const locks = 40
	for i := range locks {
		if err := n.StorageLock(ctxT(t), fmt.Sprintf("issue_cert_%d", i%4), "n1", time.Minute); err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
	}
	lockRevs := n.Revision() - start
	if lockRevs < locks/2 {
		t.Fatalf("%d lock writes made %d revisions; the test needs one revision per write", locks, lockRevs)
	}
	// Nothing the restricted watcher follows has changed: it must not wake.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if ev, err := only.Next(ctx); err == nil {
		t.Fatalf("woken by revision %d (%d changes, first %s) that touches no load balancer", ev.Revision, len(ev.Changes), ev.Changes[0].Ref.GetKind())
	}
	cancel()
	want := apply(t, n, lb("acme", "web", "public")).GetRevision()
	ev, err := only.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Reset || ev.Revision != want || ev.Changes[0].Ref.GetKind() != api.KindLoadBalancer {
		t.Errorf("got revision %d reset=%v, want the load balancer write at %d", ev.Revision, ev.Reset, want)
	}
	for ref, obj := range ev.Writes() {
		if ref.GetName() != "web" || obj.GetLoadBalancer().GetName() != "web" {
			t.Errorf("Writes yielded %v %v, want the load balancer web as written", ref, obj)
		}
	}
	for prev, next := range ev.Transitions() {
		if prev != nil || next.GetLoadBalancer().GetName() != "web" {
			t.Errorf("Transitions yielded %v -> %v, want nothing -> the load balancer web", prev, next)
		}
	}
	// Every revision between the first watched and the load balancer
	// write: the locks' and any background write's, none of them watched.
	if only.Skipped() != want-start-1 {
		t.Errorf("passed over %d revisions, want the %d before the load balancer write (%d of them locks)", only.Skipped(), want-start-1, lockRevs)
	}
	for i := uint64(0); i <= lockRevs; i++ {
		ev, err := all.Next(ctxT(t))
		if err != nil || ev.Revision != start+1+i {
			t.Fatalf("unrestricted watcher: revision %d err %v, want %d", ev.Revision, err, start+1+i)
		}
	}
}
