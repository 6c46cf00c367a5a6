package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Backup returns a consistent copy of the replicated state, read on this
// host once it has applied every write acknowledged before the call, with
// the cluster CA that signed every credential (admin, tenants, hosts).
func (n *Node) Backup(ctx context.Context) (*pb.Backup, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	n.fsm.mu.RLock()
	st := n.fsm.st.toProto()
	n.fsm.mu.RUnlock()
	return &pb.Backup{
		ClusterId: n.creds.clusterID,
		CaCertPem: n.creds.ca.CertPEM,
		CaKeyPem:  n.creds.ca.KeyPEM,
		State:     st,
		Created:   timestamppb.Now(),
		NodeId:    n.cfg.NodeID,
		Version:   n.cfg.Version,
	}, nil
}

// restoreCredentials makes this host the first of a cluster restored from
// b: the backup's CA and cluster id, a new certificate for this host.
func restoreCredentials(cfg Config, b *pb.Backup) (*hostCreds, error) {
	ca, err := pki.LoadCA(b.GetCaCertPem(), b.GetCaKeyPem())
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	cert, key, err := ca.Issue(nodeCertRequest(cfg))
	if err != nil {
		return nil, err
	}
	c, err := buildCredentials(b.GetClusterId(), cfg.NodeID, ca, cert, key)
	if err != nil {
		return nil, err
	}
	return c, c.save(cfg.DataDir)
}

// checkEmptyForRestore refuses to restore into a data dir that holds
// anything of a cluster: a restore only ever starts a new one.
func checkEmptyForRestore(cfg Config) error {
	if cfg.Join != "" {
		return errors.New("--restore starts a new cluster; it cannot be combined with --join (start the other hosts with --join once this one serves)")
	}
	for _, p := range []string{filepath.Join(pkiDir(cfg.DataDir), fileNodeCert), filepath.Join(cfg.DataDir, "raft", "raft.db")} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("--restore: data dir %s already holds a cluster's state (%s); restore into an empty --data-dir, or start without --restore to keep this host's state", cfg.DataDir, p)
		}
	}
	return nil
}

// restoredState is the state a restored cluster starts from: the backup's
// objects without what belonged to the old cluster's hosts (their Node
// objects, join tokens, certificate-store locks). The revision carries on.
func restoredState(b *pb.Backup) *pb.State {
	st := proto.Clone(b.GetState()).(*pb.State)
	st.Nodes, st.JoinTokens, st.StorageLocks = nil, nil, nil
	st.AppliedIndex = 0
	return st
}

// restore feeds the backup's state to Raft as a snapshot once this newly
// bootstrapped host leads its one-host cluster.
func (n *Node) restore(ctx context.Context, b *pb.Backup) error {
	deadline := time.Now().Add(30 * time.Second)
	for n.raft.State() != raft.Leader {
		if time.Now().After(deadline) {
			return errors.New("--restore: this host did not become the leader of its new one-host cluster within 30s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(restoredState(b))
	if err != nil {
		return err
	}
	data = append(append([]byte{}, snapshotMagic...), data...)
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(data))}
	if err := n.raft.Restore(meta, bytes.NewReader(data), 30*time.Second); err != nil {
		return fmt.Errorf("--restore: load the backup into the new cluster: %w", err)
	}
	n.log.Info("restored the state of a backup into a new cluster", "cluster", b.GetClusterId(),
		"revision", b.GetState().GetRevision(), "backup_of", b.GetNodeId(), "backup_created", b.GetCreated().AsTime())
	return nil
}
