package tenantsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// storedMembers is the member addresses of the tenant's load balancer as
// the leader has them.
func storedMembers(t *testing.T, h *host, tenant, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: tenant, Name: name})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	var out []string
	for _, m := range o.GetLoadBalancer().GetPools()["web"].GetMembers() {
		out = append(out, m.GetAddress())
	}
	return out
}

// expectEnd sends ch on a stream and expects the stream to end, with no
// ack, because the fence refused the change.
func expectEnd(t *testing.T, a *agentStream, ch *pb.SyncChange) {
	t.Helper()
	a.seq++
	ch.Seq = a.seq
	if err := a.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := a.stream.Recv()
		if err != nil {
			if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "since this stream read it") {
				t.Fatalf("the stream ended with %v, want Aborted saying the load balancer changed since the stream read it", err)
			}
			return
		}
		if ack := m.GetAck(); ack != nil {
			t.Fatalf("change %d was acked (%v): a stream wrote over a load balancer changed since it read it", ack.GetSeq(), ack)
		}
	}
}

// TestAnOutdatedStreamCannotPutBackAnOlderSpec: an agent's stream still
// holds a change (it waited for the write budget, for the change before
// it, or for a leader) when the agent has moved to another stream, which
// writes a newer member set of the same load balancer. The change the
// old stream held must not put the older set back: the leader refuses
// it (the load balancer is no longer at the revision that stream knew),
// nothing is written and the old stream ends. The new stream's writes,
// one after the other, go on; a write by the operator in between ends
// the stream that did not see it, and the agent's next stream writes.
func TestAnOutdatedStreamCannotPutBackAnOlderSpec(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	vip := &pb.VIPRequest{Pool: "public"}
	old := h.open(t, "acme")
	if r := result(t, old.change(upsert(tcpLB("svc-ns-a", vip, "10.20.0.1:80"))), "svc-ns-a"); r.GetError() != "" {
		t.Fatalf("create: %s", r.GetError())
	}

	newer := h.open(t, "acme")
	for _, m := range []string{"10.20.0.3:80", "10.20.0.4:80"} {
		if r := result(t, newer.change(upsert(tcpLB("svc-ns-a", vip, m))), "svc-ns-a"); r.GetError() != "" {
			t.Fatalf("the newer stream's write of %s: %s", m, r.GetError())
		}
	}
	expectEnd(t, old, upsert(tcpLB("svc-ns-a", vip, "10.20.0.2:80")))
	if got := storedMembers(t, h, "acme", "svc-ns-a"); len(got) != 1 || got[0] != "10.20.0.4:80" {
		t.Fatalf("members %v after the outdated stream's change, want the newer stream's [10.20.0.4:80]", got)
	}

	// The operator writes the load balancer: the stream that did not see
	// it ends at its next write of it, and the agent's next stream, which
	// reads the state as it is, writes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op := tcpLB("svc-ns-a", vip, "10.20.0.5:80")
	op.Tenant = "acme"
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(op)}}, false); err != nil {
		t.Fatal(err)
	}
	expectEnd(t, newer, upsert(tcpLB("svc-ns-a", vip, "10.20.0.6:80")))
	again := h.open(t, "acme")
	if r := result(t, again.change(upsert(tcpLB("svc-ns-a", vip, "10.20.0.6:80"))), "svc-ns-a"); r.GetError() != "" {
		t.Fatalf("the agent's next stream: %s", r.GetError())
	}
	if got := storedMembers(t, h, "acme", "svc-ns-a"); len(got) != 1 || got[0] != "10.20.0.6:80" {
		t.Fatalf("members %v, want [10.20.0.6:80]", got)
	}

	// A write that finds the load balancer already stored with the very
	// spec it writes (its own earlier attempt reached a leader that lost
	// its place before answering, and the retry on the next one comes
	// after it) is not refused: the stream goes on.
	same := tcpLB("svc-ns-a", vip, "10.20.0.7:80")
	op = tcpLB("svc-ns-a", vip, "10.20.0.7:80")
	op.Tenant = "acme"
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(op)}}, false); err != nil {
		t.Fatal(err)
	}
	if r := result(t, again.change(upsert(same)), "svc-ns-a"); r.GetError() != "" {
		t.Fatalf("a write of the spec already stored: %s", r.GetError())
	}
	if r := result(t, again.change(upsert(tcpLB("svc-ns-a", vip, "10.20.0.8:80"))), "svc-ns-a"); r.GetError() != "" {
		t.Fatalf("the write after it: %s", r.GetError())
	}
	if got := storedMembers(t, h, "acme", "svc-ns-a"); len(got) != 1 || got[0] != "10.20.0.8:80" {
		t.Fatalf("members %v, want [10.20.0.8:80]", got)
	}
}
