package consensus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Two of three voters are gone for good: the survivor, restarted with
// Recover, leads a one-host cluster with every committed object, forgets
// the lost hosts, takes writes and lets new hosts join.
func TestRecoverSurvivorOfLostMajority(t *testing.T) {
	hosts := threeHosts(t)
	l := leaderOf(t, hosts)
	apply(t, l.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	last := apply(t, l.node, tenant("beta", "public"))
	survivor := hosts[2]
	waitFor(t, "the survivor to apply the last write", func() bool { return survivor.node.Revision() >= last.GetRevision() })
	for _, h := range hosts[:2] {
		h.stop()
	}
	cfg := survivor.cfg
	survivor.stop()

	start := time.Now()
	cfg.Recover = true
	r := startHost(t, cfg)
	resp := apply(t, r.node, tenant("gamma", "public"))
	t.Logf("recover → first acknowledged write: %s", time.Since(start).Round(time.Millisecond))
	if resp.GetRevision() <= last.GetRevision() {
		t.Fatalf("write after recovery at revision %d, want after %d", resp.GetRevision(), last.GetRevision())
	}
	for _, name := range []string{"acme", "beta"} {
		if _, err := r.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindTenant, Name: name}); err != nil {
			t.Fatalf("tenant %s lost in the recovery: %v", name, err)
		}
	}
	if r.node.voters() != 1 {
		t.Fatalf("%d voters after recovery, want 1", r.node.voters())
	}
	waitFor(t, "the lost hosts' Node objects to go", func() bool {
		objs, _, err := r.node.List(ctxT(t), api.KindNode, "")
		return err == nil && len(objs) == 1 && objs[0].GetNode().GetId() == cfg.NodeID
	})
	tok, err := r.node.CreateJoinToken(ctxT(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	n4 := startHost(t, Config{NodeID: "n4", Join: r.cfg.APIAddr, Token: tok.Token})
	n5 := startHost(t, Config{NodeID: "n5", Join: r.cfg.APIAddr, Token: tok.Token})
	waitFor(t, "3 voters", func() bool { return r.node.voters() == 3 })
	apply(t, n5.node, tenant("delta", "public"))
	if _, err := n4.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindTenant, Name: "beta"}); err != nil {
		t.Fatalf("a new host lacks the recovered state: %v", err)
	}
}

// Recovery is refused while another voter answers, and leaves the host's
// data as it was.
func TestRecoverRefusedWhileOthersAnswer(t *testing.T) {
	hosts := threeHosts(t)
	h := hosts[2]
	cfg := h.cfg
	h.stop()
	cfg.Recover = true
	cfg.Logger = testLogger()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Open(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "--recover refused") || !strings.Contains(err.Error(), "n1 answers") {
		t.Fatalf("recover with two live voters: %v", err)
	}
	// It rejoins as before.
	cfg.Recover = false
	again := startHost(t, cfg)
	waitFor(t, "3 voters", func() bool { return again.node.voters() == 3 })
	apply(t, again.node, pool("after", "192.0.2.0/28"))

	if _, err := Open(ctx, Config{NodeID: "x", DataDir: t.TempDir(), RaftAddr: freeAddr(t), APIAddr: freeAddr(t), Recover: true, Logger: testLogger()}); err == nil ||
		!strings.Contains(err.Error(), "holds no cluster state") {
		t.Fatalf("recover of an empty data dir: %v", err)
	}
}
