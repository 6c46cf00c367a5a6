package consensus

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	"github.com/teapot-lb/teapot-lb/api/porttest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// testHost is one LB host in a test: a Node and its gRPC server, wired as
// `teapot-lb serve` wires them.
type testHost struct {
	cfg  Config
	node *Node
	srv  *grpc.Server
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return porttest.Addr(t, "127.0.0.1")
}

func testLogger() *slog.Logger {
	if os.Getenv("TEAPOT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startHost starts a host of cfg, on free addresses and in a temporary
// directory where cfg leaves them unset. A free address is only free when
// it is picked: a test running beside may take it before the host
// listens, and the host then starts again on others (at most 5 times).
func startHost(t testing.TB, cfg Config) *testHost {
	t.Helper()
	base := cfg
	var ln net.Listener
	var n *Node
	for attempt := 1; ; attempt++ {
		cfg = base
		if cfg.DataDir == "" {
			cfg.DataDir = t.TempDir()
		}
		if cfg.RaftAddr == "" {
			cfg.RaftAddr = freeAddr(t)
		}
		if cfg.APIAddr == "" {
			cfg.APIAddr = freeAddr(t)
		}
		cfg.Logger = testLogger()
		var err error
		ln, err = net.Listen("tcp", cfg.APIAddr)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			n, err = Open(ctx, cfg)
			cancel()
			if err != nil {
				ln.Close()
			}
		}
		if err == nil {
			break
		}
		// Only addresses this function picked may be picked again.
		taken := strings.Contains(err.Error(), "address already in use") && (base.RaftAddr == "" || base.APIAddr == "")
		if !taken || attempt == 5 {
			t.Fatalf("open %s: %v", cfg.NodeID, err)
		}
		t.Logf("open %s: %v; again on other addresses", cfg.NodeID, err)
	}
	rules := adminserver.DefaultRules
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(n.ServerTLS())), grpc.ChainUnaryInterceptor(rules.Unary()))
	pb.RegisterAdminServer(srv, adminserver.New(n))
	pb.RegisterClusterServer(srv, n.ClusterService())
	go srv.Serve(ln)
	h := &testHost{cfg: cfg, node: n, srv: srv}
	t.Cleanup(h.stop)
	select {
	case <-n.Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready in 30s", cfg.NodeID)
	}
	return h
}

func (h *testHost) stop() {
	if h.srv != nil {
		h.srv.Stop()
		h.node.Close()
		h.srv = nil
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tenant(name string, pools ...string) *pb.Object {
	return api.Wrap(&pb.Tenant{Name: name, Domains: []string{name + ".example"}, Networks: []string{tenantNet(name) + ".0.0/16"}, Pools: pools})
}

// tenantNet gives each test tenant a network of its own (tenants' networks
// may not overlap): acme's is 10.20.0.0/16, every other name's another.
func tenantNet(name string) string {
	if name == "acme" {
		return "10.20"
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("10.%d", 100+h.Sum32()%150)
}

func pool(name string, cidrs ...string) *pb.Object {
	return api.Wrap(&pb.VIPPool{Name: name, Cidrs: cidrs, Mode: "arp"})
}

func lb(ten, name, pl string) *pb.Object {
	return api.Wrap(&pb.LoadBalancer{
		Name: name, Tenant: ten, Vip: &pb.VIPRequest{Pool: pl},
		Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: tenantNet(ten) + ".0.11:30080"}}}},
	})
}

func apply(t testing.TB, n *Node, objs ...*pb.Object) *pb.ApplyResponse {
	t.Helper()
	resp, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: objs}, false)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return resp
}
