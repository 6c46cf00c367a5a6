package tenantsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// TestIndependentChangesShareRaftEntries sends 20 changes of 256 new load
// balancers without waiting for acks, as an agent's first sync does. Written
// one after the other they would take 20 revisions; with several in flight
// the leader folds the changes waiting for it into one entry. Every ack
// comes, in order, with every load balancer stored.
func TestIndependentChangesShareRaftEntries(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	const changes = 20
	n := changes * tenantsync.DefaultMaxBatch
	h := startHost(t, tenantsync.Config{})
	h.seedBulk(t, n)
	a := h.open(t, "bulk")
	rev0 := h.node.Revision()
	d := firstSync(t, a, n)
	revs := h.node.Revision() - rev0
	t.Logf("%d load balancers in %d changes: %d revisions, %s", n, changes, revs, d.Round(time.Millisecond))
	if objs, _ := h.node.LocalList(api.KindLoadBalancer); len(objs) != n {
		t.Fatalf("%d load balancers stored, want %d", len(objs), n)
	}
	// One after the other is 20; 15 leaves room for a leader that
	// happens to finish an entry before the next change reaches it.
	if revs > 15 {
		t.Fatalf("%d changes took %d revisions: they were written one after the other", changes, revs)
	}
}

// TestDependentChangesWaitForTheChangesBefore sends, without waiting for
// acks, changes that only make sense in their order: a removal of a load
// balancer created by the change before, a new version of one still in
// flight, a create again after the removal. Each meets the state the
// earlier changes left, and the acks come in order.
func TestDependentChangesWaitForTheChangesBefore(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seedBulk(t, 1000)
	a := h.open(t, "bulk")

	var first, second []*pb.LoadBalancer
	for i := range tenantsync.DefaultMaxBatch {
		first = append(first, bulkLB(i))
		second = append(second, bulkLB(tenantsync.DefaultMaxBatch+i))
	}
	changed := bulkLB(1)
	changed.Pools["web"].Members = changed.Pools["web"].Members[:3]
	again := bulkLB(0)
	again.Pools["web"].Members = again.Pools["web"].Members[:5]
	sends := []*pb.SyncChange{
		upsert(first...),
		upsert(second...),
		{Removals: []string{"svc-bulk-00000"}},
		upsert(changed),
		upsert(again),
	}
	acks := make(chan *pb.SyncAck, len(sends))
	errs := make(chan error, 1)
	go func() {
		defer close(acks)
		for range sends {
			for {
				m, err := a.stream.Recv()
				if err != nil {
					errs <- err
					return
				}
				if ack := m.GetAck(); ack != nil {
					acks <- ack
					break
				}
			}
		}
	}()
	for _, ch := range sends {
		a.seq++
		ch.Seq = a.seq
		if err := a.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []*pb.SyncAck
	for ack := range acks {
		got = append(got, ack)
	}
	select {
	case err := <-errs:
		t.Fatalf("after %d acks: %v", len(got), err)
	default:
	}
	for i, ack := range got {
		if ack.GetSeq() != uint64(i+1) {
			t.Fatalf("ack %d is for change %d: acks out of order", i+1, ack.GetSeq())
		}
		for _, r := range ack.GetResults() {
			if r.GetError() != "" {
				t.Fatalf("change %d: %s: %s", i+1, r.GetName(), r.GetError())
			}
		}
	}
	if r := result(t, got[2], "svc-bulk-00000"); !r.GetRemoved() {
		t.Fatalf("the removal after the create: %v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, members := range map[string]int{"svc-bulk-00000": 5, "svc-bulk-00001": 3, "svc-bulk-00002": 10} {
		o, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "bulk", Name: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := len(o.GetLoadBalancer().GetPools()["web"].GetMembers()); got != members {
			t.Errorf("%s has %d members, want %d (the last change naming it)", name, got, members)
		}
	}
	if objs, _ := h.node.LocalList(api.KindLoadBalancer); len(objs) != 2*tenantsync.DefaultMaxBatch {
		t.Errorf("%d load balancers stored, want %d", len(objs), 2*tenantsync.DefaultMaxBatch)
	}
}
