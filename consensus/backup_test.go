package consensus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A backup read through a follower holds every write acknowledged before
// it; a host restored from it starts a new cluster with the same CA,
// objects and revision, which new hosts join and write to.
func TestBackupFromFollowerRestoresIntoNewCluster(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	l := leaderOf(t, hosts)
	var follower *Node
	for _, h := range hosts {
		if h != l {
			follower = h.node
		}
	}
	apply(t, l.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	if err := l.node.StoragePut(ctxT(t), "uploaded/acme/shop", []byte("chain and key")); err != nil {
		t.Fatal(err)
	}
	if err := l.node.StorageLock(ctxT(t), "issue_cert_x", "n1", time.Hour); err != nil {
		t.Fatal(err)
	}
	last := apply(t, l.node, lb("acme", "last", "public")) // acknowledged just before the backup
	b, err := follower.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if b.GetState().GetRevision() < last.GetRevision() {
		t.Fatalf("backup at revision %d misses the write acknowledged at %d", b.GetState().GetRevision(), last.GetRevision())
	}
	if b.GetClusterId() != l.node.ClusterID() || b.GetNodeId() != follower.ID() {
		t.Fatalf("backup of cluster %q read on %q", b.GetClusterId(), b.GetNodeId())
	}
	before, _ := l.node.Objects()
	for _, h := range hosts {
		h.stop()
	}

	r := startHost(t, Config{NodeID: "r1", Restore: b})
	if r.node.ClusterID() != b.GetClusterId() || r.node.CA().Fingerprint() != l.node.CA().Fingerprint() {
		t.Fatal("the restored cluster has another identity or CA")
	}
	waitFor(t, "the restored host's Node object", func() bool {
		_, err := r.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindNode, Name: "r1"})
		return err == nil
	})
	after, rev := r.node.Objects()
	if rev < b.GetState().GetRevision() {
		t.Fatalf("restored revision %d, backup's %d", rev, b.GetState().GetRevision())
	}
	want := map[string]*pb.Object{}
	for _, o := range before {
		switch api.RefOf(o).GetKind() {
		case api.KindNode, api.KindJoinToken, api.KindStorageLock:
		default:
			want[api.RefString(api.RefOf(o))] = o
		}
	}
	got := map[string]*pb.Object{}
	for _, o := range after {
		k := api.RefOf(o).GetKind()
		if k == api.KindStorageLock || k == api.KindJoinToken {
			t.Errorf("restored %s of the old cluster", api.RefString(api.RefOf(o)))
		}
		if k == api.KindNode {
			if o.GetNode().GetId() != "r1" {
				t.Errorf("restored the old cluster's node %s", o.GetNode().GetId())
			}
			continue
		}
		got[api.RefString(api.RefOf(o))] = o
	}
	for k, o := range want {
		if !proto.Equal(o, got[k]) {
			t.Errorf("%s: restored %v, want %v", k, got[k], o)
		}
	}
	if len(got) != len(want) {
		t.Errorf("restored %d objects, want %d", len(got), len(want))
	}

	// New hosts join the restored cluster, and it takes writes.
	tok, err := r.node.CreateJoinToken(ctxT(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r2 := startHost(t, Config{NodeID: "r2", Join: r.cfg.APIAddr, Token: tok.Token})
	resp := apply(t, r2.node, lb("acme", "after", "public"))
	if resp.GetRevision() <= rev {
		t.Fatalf("write after restore at revision %d, not after %d", resp.GetRevision(), rev)
	}
	if _, err := r2.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}); err != nil {
		t.Fatalf("a joined host does not see the restored objects: %v", err)
	}
}

// A restore never lands on a data dir that holds a cluster.
func TestRestoreRefusesUsedDataDir(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	b, err := h.node.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := h.cfg.DataDir
	h.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Open(ctx, Config{NodeID: "n1", DataDir: dir, RaftAddr: freeAddr(t), APIAddr: freeAddr(t), Restore: b, Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "already holds a cluster's state") || !strings.Contains(err.Error(), "empty --data-dir") {
		t.Fatalf("restore into a used data dir: %v", err)
	}
	_, err = Open(ctx, Config{NodeID: "n9", DataDir: t.TempDir(), RaftAddr: freeAddr(t), APIAddr: freeAddr(t), Restore: b, Join: "127.0.0.1:1", Token: "x", Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("restore with --join: %v", err)
	}
}

// A restore that is interrupted before the backup's state is loaded leaves
// the data dir marked: no later start (with or without --restore) runs it
// empty under the backup's cluster id and CA; once the dir is emptied, the
// restore runs again and the marker is gone.
func TestInterruptedRestoreRefusesToStart(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	h := startHost(t, Config{NodeID: "n1"})
	apply(t, h.node, pool("public", "192.0.2.0/28"))
	b, err := h.node.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	h.stop()

	dir := t.TempDir()
	cfg := Config{NodeID: "r1", DataDir: dir, RaftAddr: freeAddr(t), APIAddr: freeAddr(t), Restore: b, Logger: testLogger()}
	interrupted, cancel := context.WithCancel(context.Background())
	cancel() // the restore is stopped while it waits to lead its new cluster
	if _, err := Open(interrupted, cfg); err == nil {
		t.Fatal("a restore with a cancelled context succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, fileRestorePending)); err != nil {
		t.Fatalf("the interrupted restore left no marker: %v", err)
	}
	for _, restore := range []*pb.Backup{nil, b} {
		c := cfg
		c.Restore, c.RaftAddr, c.APIAddr = restore, freeAddr(t), freeAddr(t)
		_, err := Open(ctxT(t), c)
		if err == nil || !strings.Contains(err.Error(), "did not finish") || !strings.Contains(err.Error(), "serve --restore FILE") {
			t.Fatalf("start (restore %v) on an interrupted restore's data dir: %v", restore != nil, err)
		}
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	r := startHost(t, Config{NodeID: "r1", DataDir: dir, Restore: b})
	if _, err := os.Stat(filepath.Join(dir, fileRestorePending)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the marker outlived a finished restore: %v", err)
	}
	if _, err := r.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindVIPPool, Name: "public"}); err != nil {
		t.Fatalf("restored host lacks the backup's pool: %v", err)
	}
}
