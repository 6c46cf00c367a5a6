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

// fileRestorePending marks a data dir whose restore has begun and not yet
// finished. A host whose restore failed or was interrupted holds the
// backup's cluster id and CA but not its state; the marker keeps it from
// ever starting like that, empty under the old identity.
const fileRestorePending = "restore-pending"

func markRestorePending(dataDir string) error {
	p := filepath.Join(dataDir, fileRestorePending)
	if err := os.WriteFile(p, []byte("a --restore into this data dir has not finished\n"), 0o600); err != nil {
		return fmt.Errorf("--restore: write %s: %w; %s", p, err, remedy(err))
	}
	return syncDir(dataDir)
}

func clearRestorePending(dataDir string) error {
	p := filepath.Join(dataDir, fileRestorePending)
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("--restore: remove %s after the restore: %w; %s", p, err, remedy(err))
	}
	return syncDir(dataDir)
}

// checkNoRestorePending refuses a data dir left behind by a restore that
// did not finish.
func checkNoRestorePending(dataDir string) error {
	p := filepath.Join(dataDir, fileRestorePending)
	if _, err := os.Stat(p); err == nil {
		return fmt.Errorf("data dir %s holds a --restore that did not finish (%s exists), so its state is not the backup's: "+
			"empty the data dir (move it away), then run \"teapot-lb serve --restore FILE\" again", dataDir, p)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir %s: %w; %s", dataDir, err, remedy(err))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w; %s", dir, err, remedy(err))
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
	for n.r().State() != raft.Leader {
		if time.Now().After(deadline) {
			return errors.New("--restore: this host did not become the leader of its new one-host cluster within 30s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Raft refuses a user snapshot until the bootstrap configuration entry
	// is applied; a barrier waits for it.
	if err := n.r().Barrier(30 * time.Second).Error(); err != nil {
		return fmt.Errorf("--restore: wait for the new cluster's first entry: %w", err)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(restoredState(b))
	if err != nil {
		return err
	}
	data = append(append([]byte{}, snapshotMagic...), data...)
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(data))}
	if err := n.r().Restore(meta, bytes.NewReader(data), 30*time.Second); err != nil {
		return fmt.Errorf("--restore: load the backup into the new cluster: %w", err)
	}
	n.log.Info("restored the state of a backup into a new cluster", "cluster", b.GetClusterId(),
		"revision", b.GetState().GetRevision(), "backup_of", b.GetNodeId(), "backup_created", b.GetCreated().AsTime())
	return nil
}
