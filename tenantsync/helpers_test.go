package tenantsync_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/pki"
	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// host is a one-node cluster with the API server wired as serve wires it.
type host struct {
	node *consensus.Node
	addr string
	ts   *tenantsync.Server
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return porttest.Addr(t, "127.0.0.1")
}

func logger() *slog.Logger {
	if os.Getenv("TEAPOT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startHost(t testing.TB, cfg tenantsync.Config) *host {
	t.Helper()
	api := freeAddr(t)
	ln, err := net.Listen("tcp", api)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := consensus.Open(ctx, consensus.Config{
		DataDir: t.TempDir(), NodeID: "n1", RaftAddr: freeAddr(t), APIAddr: api, Logger: logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Logger = node, logger()
	ts := tenantsync.New(cfg)
	rules := adminserver.DefaultRules
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(node.ServerTLS())),
		grpc.ChainUnaryInterceptor(rules.Unary()),
		grpc.ChainStreamInterceptor(rules.Stream()),
	)
	pb.RegisterAdminServer(srv, adminserver.New(node))
	pb.RegisterClusterServer(srv, node.ClusterService())
	pb.RegisterTenantSyncServer(srv, ts)
	pb.RegisterTenantCredentialsServer(srv, ts.Credentials())
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
	return &host{node: node, addr: api, ts: ts}
}

// seed stores a pool and tenants acme (10.20.0.0/16, acme.example) and
// beta (10.30.0.0/16, beta.example).
func (h *host) seed(t *testing.T) {
	t.Helper()
	objs := []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28"}, Mode: "static"}),
		api.Wrap(&pb.Tenant{Name: "acme", Domains: []string{"acme.example"}, Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}),
		api.Wrap(&pb.Tenant{Name: "beta", Domains: []string{"beta.example"}, Networks: []string{"10.30.0.0/16", "127.0.0.0/8"}, Pools: []string{"public"}}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: objs}, false); err != nil {
		t.Fatal(err)
	}
}

// dial connects with a certificate of identity id.
func (h *host) dial(t testing.TB, id pki.Identity) *grpc.ClientConn {
	t.Helper()
	cert, key, err := h.node.CA().Issue(pki.IssueRequest{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ClientTLS(h.node.CA().CertPEM, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// uid returns the stored tenant's uid, which its credentials carry.
func (h *host) uid(t testing.TB, tenant string) string {
	t.Helper()
	o, err := h.node.Get(context.Background(), &pb.ObjectRef{Kind: api.KindTenant, Name: tenant})
	if err != nil {
		t.Fatalf("tenant %s: %v", tenant, err)
	}
	return o.GetTenant().GetUid()
}

// agentStream is a test agent's stream.
type agentStream struct {
	t       testing.TB
	stream  pb.TenantSync_SyncClient
	cancel  context.CancelFunc
	welcome *pb.SyncWelcome
	seq     uint64
}

func (h *host) open(t testing.TB, tenant string) *agentStream {
	t.Helper()
	cc := h.dial(t, pki.Identity{Role: pki.RoleTenant, Name: tenant, UID: h.uid(t, tenant)})
	// The stream's whole life, hundreds of writes on a loaded 2-core CI
	// machine included (TestLargeWritesDoNotDelayANeighbour took 2.9
	// minutes at a load of 30); a test that hangs still ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := pb.NewTenantSyncClient(cc).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Hello{Hello: &pb.SyncHello{Agent: "test"}}}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatalf("welcome: %v", err)
	}
	if m.GetWelcome() == nil {
		t.Fatalf("first message is %v, want a welcome", m)
	}
	return &agentStream{t: t, stream: s, cancel: cancel, welcome: m.GetWelcome()}
}

// recvWithin receives the stream's next message; it returns nil when none
// comes within d, and fails the test on a stream error.
func (a *agentStream) recvWithin(d time.Duration) *pb.SyncResponse {
	a.t.Helper()
	type got struct {
		m   *pb.SyncResponse
		err error
	}
	c := make(chan got, 1)
	go func() {
		m, err := a.stream.Recv()
		c <- got{m, err}
	}()
	select {
	case g := <-c:
		if g.err != nil {
			a.t.Fatalf("receive: %v", g.err)
		}
		return g.m
	case <-time.After(d):
		// Ends the Recv above; the stream is of no further use.
		a.cancel()
		return nil
	}
}

// change sends one change and returns its ack, skipping status pushes.
func (a *agentStream) change(ch *pb.SyncChange) *pb.SyncAck {
	a.t.Helper()
	a.seq++
	ch.Seq = a.seq
	if err := a.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
		a.t.Fatal(err)
	}
	for {
		m, err := a.stream.Recv()
		if err != nil {
			a.t.Fatalf("wait for ack %d: %v", ch.Seq, err)
		}
		if ack := m.GetAck(); ack != nil {
			if ack.GetSeq() != ch.Seq {
				a.t.Fatalf("ack for %d, want %d", ack.GetSeq(), ch.Seq)
			}
			return ack
		}
	}
}

func upsert(lbs ...*pb.LoadBalancer) *pb.SyncChange {
	ch := &pb.SyncChange{}
	for _, lb := range lbs {
		ch.Upserts = append(ch.Upserts, &pb.SyncUpsert{LoadBalancer: lb, Version: syncspec.Version(lb)})
	}
	return ch
}

// tcpLB is a load balancer on port 80 with the given members.
func tcpLB(name string, vip *pb.VIPRequest, members ...string) *pb.LoadBalancer {
	bp := &pb.BackendPool{}
	for _, m := range members {
		bp.Members = append(bp.Members, &pb.Member{Address: m})
	}
	return &pb.LoadBalancer{
		Name: name, Vip: vip,
		Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
		Pools:     map[string]*pb.BackendPool{"web": bp},
	}
}

func result(t *testing.T, ack *pb.SyncAck, name string) *pb.ObjectStatus {
	t.Helper()
	for _, r := range ack.GetResults() {
		if r.GetName() == name {
			return r
		}
	}
	t.Fatalf("ack has no result for %s: %v", name, ack)
	return nil
}
