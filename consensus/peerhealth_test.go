package consensus

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/adminserver"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A host whose API came back a moment ago (restarted, perhaps on another
// release) is asked for its level by the feature gate, not taken for
// unreachable while the connection to it waits out its reconnect backoff:
// an unreachable host counts with the level its Node object recorded,
// which for a host just downgraded is the level of the release it ran
// before.
func TestFeatureGateAsksAHostThatJustCameBack(t *testing.T) {
	// Not parallel: the reconnect it waits for must fit in the gate's
	// 700 ms ask, which other tests' hosts starting at once can outlast.
	h1 := startHost(t, Config{NodeID: "n1", Version: "v-new"})
	tok, err := h1.node.CreateJoinToken(ctxT(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h2 := startHost(t, Config{NodeID: "n2", Join: h1.cfg.APIAddr, Token: tok.Token, Version: "v-new"})
	waitFor(t, "2 voters", func() bool { return h1.node.voters() == 2 })
	waitFor(t, "n2's API address recorded", func() bool {
		h1.node.fsm.mu.RLock()
		defer h1.node.fsm.mu.RUnlock()
		return h1.node.fsm.st.get(api.KindNode, "n2").GetNode().GetApiAddr() == h2.cfg.APIAddr
	})
	peer := raft.Server{ID: "n2", Address: raft.ServerAddress(h2.cfg.RaftAddr)}
	if ns := h1.node.peerHealthNow(ctxT(t), peer); ns.GetState() == "unreachable" {
		t.Fatalf("n2 unreachable before its API stopped: %s", ns.GetError())
	}
	for attempt := 1; ; attempt++ {
		// n2's API goes away; asking it meanwhile leaves the connection
		// in transient failure with a backoff that grows to a second.
		h2.srv.Stop()
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			h1.node.peerHealth(ctxT(t), peer)
			time.Sleep(50 * time.Millisecond)
		}
		ln, err := net.Listen("tcp", h2.cfg.APIAddr)
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(h2.node.ServerTLS())), grpc.ChainUnaryInterceptor(adminserver.DefaultRules.Unary()))
		pb.RegisterClusterServer(srv, h2.node.ClusterService())
		go srv.Serve(ln)
		h2.srv = srv
		h1.node.peers.mu.Lock()
		state := h1.node.peers.conns[h2.cfg.APIAddr].GetState()
		h1.node.peers.mu.Unlock()
		if state != connectivity.TransientFailure {
			// The backoff ran out before the API came back: nothing
			// was shown; try again.
			if attempt == 3 {
				t.Fatalf("the connection to n2 was %v, never in transient failure, when its API came back", state)
			}
			continue
		}
		ns := h1.node.peerHealthNow(ctxT(t), peer)
		if ns.GetState() == "unreachable" || ns.GetFeatureLevel() != FeatureLevel {
			t.Fatalf("n2 answered again, but the gate saw %q (%s), level %d", ns.GetState(), ns.GetError(), ns.GetFeatureLevel())
		}
		return
	}
}
