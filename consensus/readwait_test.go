package consensus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// heavyLB is a tenant's load balancer at the per-object bounds a tenant
// meets: 1,000 members and 1,000 routes.
func heavyLB(ten, name string) *pb.Object {
	ms := make([]*pb.Member, 1000)
	for j := range ms {
		ms[j] = &pb.Member{Address: fmt.Sprintf("%s.%d.%d:30080", tenantNet(ten), j/250, j%250+1)}
	}
	rs := make([]*pb.Route, 1000)
	for i := range rs {
		rs[i] = &pb.Route{Host: ten + ".example", Path: fmt.Sprintf("/p%d", i), Pool: "web"}
	}
	return api.Wrap(&pb.LoadBalancer{
		Name: name, Tenant: ten, Vip: &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
		Routes:    rs,
		Pools:     map[string]*pb.BackendPool{"web": {Members: ms}},
	})
}

// An admin read does not queue behind the apply of a tenant's write that
// is committed but not yet applied: that write is not acknowledged, so a
// linearizable read need not show it. The tenant's entry (a load
// balancer of 1,000 members and 1,000 routes) is held at the start of
// its apply; the admin List and Get answer meanwhile, without it, and
// once the write is acknowledged the next List shows it.
func TestReadsDoNotWaitForAnApplyInFlight(t *testing.T) {
	t.Parallel()
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	admin := adminserver.New(n)
	apply(t, n, pool("public", "192.0.2.0/24"), tenant("a", "public"), tenant("b", "public"))
	apply(t, n, lb("a", "shop", "public"))

	entered := make(chan uint64, 1)
	release := make(chan struct{})
	var once sync.Once
	// Only b's entry is held (the host may write its own records).
	isB := func(l *raft.Log) bool {
		var cmd pb.Command
		if proto.Unmarshal(l.Data, &cmd) != nil {
			return false
		}
		for _, txn := range cmd.GetTxns() {
			for _, op := range txn.GetOps() {
				if lb := op.GetPut().GetLoadBalancer(); lb.GetTenant() == "b" && lb.GetName() == "big" {
					return true
				}
			}
		}
		return false
	}
	hold := func(l *raft.Log) {
		held := false
		if isB(l) {
			once.Do(func() { held = true })
		}
		if held {
			entered <- l.Index
			<-release
		}
	}
	n.fsm.beforeApply.Store(&hold)
	var released sync.Once
	unhold := func() { released.Do(func() { close(release) }) }
	defer unhold()

	written := make(chan error, 1)
	go func() {
		_, err := n.Apply(context.Background(), &pb.ApplyRequest{Objects: []*pb.Object{heavyLB("b", "big")}}, false)
		written <- err
	}()
	var idx uint64
	select {
	case idx = <-entered:
	case err := <-written:
		t.Fatalf("b's write returned before its apply: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("b's write was never committed")
	}
	if got := n.r().CommitIndex(); got < idx {
		t.Fatalf("held entry %d is not committed (commit index %d)", idx, got)
	}

	// Generous for a loaded machine; without the change both calls wait
	// for the held apply until their deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := admin.List(ctx, &pb.ListRequest{Kind: "lb"})
	if err != nil {
		t.Fatalf("admin List while b's write is applied: %v", err)
	}
	if len(list.GetObjects()) != 1 || list.GetObjects()[0].GetLoadBalancer().GetName() != "shop" {
		t.Fatalf("admin List while b's write is applied: got %d load balancers, want a/shop alone", len(list.GetObjects()))
	}
	if _, err := admin.Get(ctx, &pb.GetRequest{Ref: &pb.ObjectRef{Kind: "lb", Tenant: "a", Name: "shop"}}); err != nil {
		t.Fatalf("admin Get while b's write is applied: %v", err)
	}
	select {
	case err := <-written:
		t.Fatalf("b's write was acknowledged before its apply: %v", err)
	default:
	}

	unhold()
	if err := <-written; err != nil {
		t.Fatalf("b's write: %v", err)
	}
	list, err = admin.List(ctxT(t), &pb.ListRequest{Kind: "lb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetObjects()) != 2 {
		t.Fatalf("after b's write was acknowledged: %d load balancers listed, want 2", len(list.GetObjects()))
	}
}

// A host alone writes one Raft entry per write: the barrier that tells
// followers at once that a write committed has no follower to tell, and
// would cost a second log write during which reads wait.
func TestLoneHostWritesOneEntryPerWrite(t *testing.T) {
	t.Parallel()
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/24"), tenant("b", "public"))
	before := n.r().LastIndex()
	for i := range 5 {
		apply(t, n, lb("b", fmt.Sprintf("lb%d", i), "public"))
	}
	// A barrier sent after the last write would land here; one more
	// write and a read (which waits for nothing of it) leave room for it.
	apply(t, n, lb("b", "last", "public"))
	if _, _, err := n.List(ctxT(t), api.KindLoadBalancer, "b"); err != nil {
		t.Fatal(err)
	}
	if got := n.r().LastIndex() - before; got != 6 {
		t.Fatalf("6 writes of a host alone added %d Raft entries, want 6", got)
	}
}

// heldLogs is a Raft log store whose next log write, once armed, waits
// until released: Raft's leader loop, which writes the leader's log,
// stands still meanwhile.
type heldLogs struct {
	raft.LogStore
	armed   chan struct{} // closed: the next StoreLogs holds
	entered chan struct{} // closed when a write is held
	release chan struct{}
	once    sync.Once
}

func newHeldLogs() *heldLogs {
	return &heldLogs{armed: make(chan struct{}), entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldLogs) wrap(s raft.LogStore) raft.LogStore { h.LogStore = s; return h }

func (h *heldLogs) StoreLogs(logs []*raft.Log) error {
	select {
	case <-h.armed:
		held := false
		h.once.Do(func() { held = true })
		if held {
			close(h.entered)
			<-h.release
		}
	default:
	}
	return h.LogStore.StoreLogs(logs)
}

func (h *heldLogs) StoreLog(l *raft.Log) error { return h.StoreLogs([]*raft.Log{l}) }

// A host alone answers an admin read without Raft's leader loop, which
// writes (and syncs) the log: a tenant's write whose log write is held
// there does not hold the admin's List and Get. The write is not
// acknowledged, so the read need not show it; once it is, the next List
// does.
func TestLoneLeaderReadsDoNotWaitForTheLog(t *testing.T) {
	t.Parallel()
	logs := newHeldLogs()
	h := startHost(t, Config{NodeID: "n1", wrapLogs: logs.wrap})
	n := h.node
	admin := adminserver.New(n)
	apply(t, n, pool("public", "192.0.2.0/24"), tenant("a", "public"), tenant("b", "public"))
	apply(t, n, lb("a", "shop", "public"))
	// The term's first read (its barrier) is behind us.
	if _, err := admin.List(ctxT(t), &pb.ListRequest{Kind: "lb"}); err != nil {
		t.Fatal(err)
	}

	close(logs.armed)
	var released sync.Once
	unhold := func() { released.Do(func() { close(logs.release) }) }
	defer unhold()
	written := make(chan error, 1)
	go func() {
		_, err := n.Apply(context.Background(), &pb.ApplyRequest{Objects: []*pb.Object{heavyLB("b", "big")}}, false)
		written <- err
	}()
	select {
	case <-logs.entered:
	case err := <-written:
		t.Fatalf("b's write returned before its log write: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("b's write never reached the log")
	}

	// Generous for a loaded machine; a read through VerifyLeader waits
	// for the held log write until its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := admin.List(ctx, &pb.ListRequest{Kind: "lb"})
	if err != nil {
		unhold()
		t.Fatalf("admin List while b's log write is held: %v", err)
	}
	if len(list.GetObjects()) != 1 || list.GetObjects()[0].GetLoadBalancer().GetName() != "shop" {
		t.Fatalf("admin List while b's log write is held: got %d load balancers, want a/shop alone", len(list.GetObjects()))
	}
	if _, err := admin.Get(ctx, &pb.GetRequest{Ref: &pb.ObjectRef{Kind: "lb", Tenant: "a", Name: "shop"}}); err != nil {
		unhold()
		t.Fatalf("admin Get while b's log write is held: %v", err)
	}
	select {
	case err := <-written:
		t.Fatalf("b's write was acknowledged while its log write was held: %v", err)
	default:
	}

	unhold()
	if err := <-written; err != nil {
		t.Fatalf("b's write: %v", err)
	}
	list, err = admin.List(ctxT(t), &pb.ListRequest{Kind: "lb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetObjects()) != 2 {
		t.Fatalf("after b's write was acknowledged: %d load balancers listed, want 2", len(list.GetObjects()))
	}
}
