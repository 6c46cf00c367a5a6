package tenantsync_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/observe"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// startObservedHost is startHost with the host's events wired as serve
// wires them: the tenant stream's refusals go into the ring that the
// admin API's Events reads. with, when not nil, adds to the host's config.
func startObservedHost(t *testing.T, with func(*consensus.Config)) *host {
	t.Helper()
	addr := freeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs := observe.NewHost("n1")
	cfg := consensus.Config{
		DataDir: t.TempDir(), NodeID: "n1", RaftAddr: freeAddr(t), APIAddr: addr, Logger: logger(),
		Observe: obs.Observe, Event: obs.Events().Add,
	}
	if with != nil {
		with(&cfg)
	}
	node, err := consensus.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := tenantsync.New(tenantsync.Config{Store: node, Logger: logger(), Events: obs.Events().Add})
	rules := adminserver.DefaultRules
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(node.ServerTLS())),
		grpc.ChainUnaryInterceptor(rules.Unary()), grpc.ChainStreamInterceptor(rules.Stream()))
	pb.RegisterAdminServer(srv, adminserver.New(node))
	pb.RegisterClusterServer(srv, node.ClusterService())
	pb.RegisterTenantSyncServer(srv, ts)
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Stop()
		node.Close()
	})
	select {
	case <-node.Ready():
	case <-ctx.Done():
		t.Fatal("node not ready")
	}
	return &host{node: node, addr: addr, ts: ts}
}

// A tenant that sends values of 100 KB to be refused gets refusals that
// quote a short excerpt of each, and the host's events stay small: the
// admin API lists every one of 200 such refusals in one message.
func TestRefusalsQuoteAnExcerptOfLongValues(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startObservedHost(t, nil)
	h.seed(t)
	// The 20 MB of refused values are charged to acme's write budget; at
	// the default rate (256 KiB/s) the changes would wait some 75 s for
	// it, which TestWriteBudgetFollowsTheQuota shows. Here the budget is
	// high enough that none waits.
	h.setQuotas(t, "acme", &pb.Quotas{WriteBytesPerSecond: 64 << 20})
	acme := h.open(t, "acme")
	long := strings.Repeat("é", 50<<10) // 100 KB, two bytes a character
	bad := []func(i int) *pb.LoadBalancer{
		func(i int) *pb.LoadBalancer { // a listener protocol
			lb := tcpLB(fmt.Sprintf("svc-proto-%d", i), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")
			lb.Listeners[0].Protocol = long
			return lb
		},
		func(i int) *pb.LoadBalancer { // a pool's key
			lb := tcpLB(fmt.Sprintf("svc-key-%d", i), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")
			lb.Pools = map[string]*pb.BackendPool{long: {Algorithm: long}}
			return lb
		},
		func(i int) *pb.LoadBalancer { // the load balancer's own name
			return tcpLB(fmt.Sprintf("svc-%d-%s", i, long), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")
		},
		func(i int) *pb.LoadBalancer { // a name the agent does not manage
			return tcpLB(fmt.Sprintf("other-%d-%s", i, long), &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")
		},
	}
	const refusals, perChange = 200, 20
	for n := 0; n < refusals; n += perChange {
		var lbs []*pb.LoadBalancer
		for i := n; i < n+perChange; i++ {
			lbs = append(lbs, bad[i%len(bad)](i))
		}
		ack := acme.change(upsert(lbs...))
		for _, r := range ack.GetResults() {
			if r.GetError() == "" {
				t.Fatalf("%.40s accepted", r.GetName())
			}
			if len(r.GetError()) > 4096 {
				t.Fatalf("refusal of %.40s is %d bytes: %.200s", r.GetName(), len(r.GetError()), r.GetError())
			}
		}
	}

	admin := pb.NewAdminClient(h.dial(t, pki.Identity{Role: pki.RoleAdmin, Name: "ops"}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := admin.Events(ctx, &pb.EventsRequest{MaxEvents: observe.MaxEvents})
	if err != nil {
		t.Fatalf("events after %d refusals of 100 KB values: %v", refusals, err)
	}
	n := 0
	for _, ev := range resp.GetEvents() {
		if ev.GetType() != observe.EventTenantRefused {
			continue
		}
		n++
		if size := proto.Size(ev); size > 2048 {
			t.Errorf("event of %d bytes: %.200s", size, ev.GetMessage())
		}
		if !strings.Contains(ev.GetMessage(), "bytes)") && !strings.Contains(ev.GetLoadBalancer(), "bytes)") {
			t.Errorf("event does not name the length it cut: %.300s", ev.GetMessage())
		}
	}
	if n != refusals {
		t.Errorf("%d refusal events listed, want %d", n, refusals)
	}
	if size := proto.Size(resp); size > 1<<20 {
		t.Errorf("the events of %d refusals take %d bytes", refusals, size)
	}
	_ = api.MaxQuoted
}
