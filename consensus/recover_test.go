package consensus

import (
	"context"
	"errors"
	"slices"
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
	t.Parallel() // hosts of its own, in temporary directories on free ports
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
	t.Parallel() // hosts of its own, in temporary directories on free ports
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

// The survivor of a lost majority becomes a one-host cluster while it
// runs: its watchers see no reset and no revision go back (the data plane
// keeps its state), writes resume, new hosts join, and a restart carries
// on from what the recovery wrote. Refused, and harmless, while others
// answer.
func TestRecoverInPlace(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	l := leaderOf(t, hosts)
	apply(t, l.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	last := apply(t, l.node, tenant("beta", "public"))
	survivor := hosts[2]
	waitFor(t, "the survivor to apply the last write", func() bool { return survivor.node.Revision() >= last.GetRevision() })

	if _, err := survivor.node.RecoverInPlace(ctxT(t)); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "answers") {
		t.Fatalf("recover while the others run: %v, want a refusal naming who answers", err)
	}
	apply(t, survivor.node, tenant("still-three", "public")) // Raft untouched

	before := survivor.node.Revision()
	w := survivor.node.Watch(before + 1)
	for _, h := range hosts[:2] {
		h.stop()
	}
	start := time.Now()
	gone, err := survivor.node.RecoverInPlace(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(gone)
	if !slices.Equal(gone, []string{"n1", "n2"}) {
		t.Fatalf("forgot %v, want n1 and n2", gone)
	}
	resp := apply(t, survivor.node, tenant("gamma", "public"))
	t.Logf("recover in place → first acknowledged write: %s", time.Since(start).Round(time.Millisecond))
	if resp.GetRevision() <= before {
		t.Fatalf("write after recovery at revision %d, want after %d", resp.GetRevision(), before)
	}
	// Every event since is a plain change, in order, up to that write.
	for rev := before; rev < resp.GetRevision(); {
		ev, err := w.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Reset || ev.Revision != rev+1 {
			t.Fatalf("watcher got revision %d (reset %v) after %d", ev.Revision, ev.Reset, rev)
		}
		rev = ev.Revision
	}
	if survivor.node.voters() != 1 || !survivor.node.IsLeader() {
		t.Fatalf("%d voters, leader %v after recovery", survivor.node.voters(), survivor.node.IsLeader())
	}
	waitFor(t, "the lost hosts' Node objects to go", func() bool {
		objs, _, err := survivor.node.List(ctxT(t), api.KindNode, "")
		return err == nil && len(objs) == 1 && objs[0].GetNode().GetId() == "n3"
	})
	if _, err := survivor.node.RecoverInPlace(ctxT(t)); !errors.Is(err, ErrAlone) {
		t.Fatalf("recover of a one-host cluster: %v", err)
	}
	tok, err := survivor.node.CreateJoinToken(ctxT(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	n4 := startHost(t, Config{NodeID: "n4", Join: survivor.cfg.APIAddr, Token: tok.Token})
	n5 := startHost(t, Config{NodeID: "n5", Join: survivor.cfg.APIAddr, Token: tok.Token})
	waitFor(t, "3 voters", func() bool { return survivor.node.voters() == 3 })
	apply(t, n5.node, tenant("delta", "public"))
	for _, name := range []string{"acme", "beta", "still-three", "gamma"} {
		if _, err := n4.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindTenant, Name: name}); err != nil {
			t.Fatalf("a new host lacks %s: %v", name, err)
		}
	}
	// The recovered host restarts from what the recovery wrote.
	cfg := survivor.cfg
	survivor.stop()
	again := startHost(t, cfg)
	waitFor(t, "the restarted survivor to have delta", func() bool {
		_, err := again.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindTenant, Name: "delta"})
		return err == nil
	})
}
