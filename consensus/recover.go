package consensus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Recovery from a lost majority: when most voters are gone for good, the
// survivor (started with Config.Recover) rewrites its Raft configuration
// to itself alone, with everything in its log, and carries on as a
// one-host cluster that new hosts join. It refuses while it can reach any
// other voter: two halves of one cluster must never both go on alone.

// recoverProbeTimeout bounds each check that another voter is alive.
const recoverProbeTimeout = 2 * time.Second

// recoverAlone runs before Raft starts. store and snaps are this host's.
func (n *Node) recoverAlone(rc *raft.Config, store interface {
	raft.LogStore
	raft.StableStore
}, snaps raft.SnapshotStore, trans raft.Transport,
) error {
	quiet := newFSM(slog.New(slog.NewTextHandler(io.Discard, nil)))
	probe := *rc
	_, inmem := raft.NewInmemTransport("")
	conf, err := raft.GetConfiguration(&probe, quiet, store, store, snaps, inmem)
	if err != nil {
		return fmt.Errorf("--recover: read the cluster configuration: %w", err)
	}
	var others []raft.Server
	for _, s := range conf.Servers {
		if string(s.ID) != n.cfg.NodeID {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		n.log.Warn("--recover: this host is the only member already; starting normally (remove --recover)")
		return nil
	}
	state := newFSM(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := replay(state, store, snaps); err != nil {
		return fmt.Errorf("--recover: read the state: %w", err)
	}
	if alive := n.aliveVoters(others, state); len(alive) > 0 {
		return fmt.Errorf("--recover refused: %s; a majority is not lost for good while other hosts run. "+
			"Fix the network or start those hosts again; recover only once they are gone for good (stopped, their disks lost)",
			strings.Join(alive, "; "))
	}
	alone := raft.Configuration{Servers: []raft.Server{{
		ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.cfg.RaftAddr), Suffrage: raft.Voter,
	}}}
	rcopy := *rc
	if err := raft.RecoverCluster(&rcopy, newFSM(slog.New(slog.NewTextHandler(io.Discard, nil))), store, store, snaps, trans, alone); err != nil {
		return fmt.Errorf("--recover: %w", err)
	}
	var gone []string
	for _, s := range others {
		gone = append(gone, string(s.ID))
	}
	n.recovered = gone
	n.log.Warn("recovered from a lost majority: this host is now a one-host cluster with the state in its log",
		"forgotten_voters", gone, "revision", state.st.revision)
	return nil
}

// aliveVoters describes each other voter that still answers: its API
// (a node-authenticated health call) or its Raft port.
func (n *Node) aliveVoters(others []raft.Server, state *fsm) []string {
	var alive []string
	for _, s := range others {
		if c, err := net.DialTimeout("tcp", string(s.Address), recoverProbeTimeout); err == nil {
			c.Close()
			alive = append(alive, fmt.Sprintf("%s answers on its Raft address %s", s.ID, s.Address))
			continue
		}
		addr := state.st.get(api.KindNode, string(s.ID)).GetNode().GetApiAddr()
		if addr == "" {
			continue
		}
		cl, err := n.peers.cluster(addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), recoverProbeTimeout)
		_, err = cl.Health(ctx, &pb.HealthRequest{})
		cancel()
		if err == nil {
			alive = append(alive, fmt.Sprintf("%s answers on its API address %s", s.ID, addr))
		}
	}
	return alive
}

// replay applies the newest snapshot and the log after it to f, without
// changing either.
func replay(f *fsm, logs raft.LogStore, snaps raft.SnapshotStore) error {
	metas, err := snaps.List()
	if err != nil {
		return err
	}
	next := uint64(1)
	if len(metas) > 0 {
		meta, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			return err
		}
		if err := f.Restore(rc); err != nil {
			return err
		}
		next = meta.Index + 1
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	next = max(next, first)
	for i := next; i <= last && last > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return err
		}
		f.Apply(&l)
	}
	return nil
}

// forgetRecovered deletes the Node objects of the voters a recovery left
// behind, once this host leads its one-host cluster.
func (n *Node) forgetRecovered(ctx context.Context) {
	for _, id := range n.recovered {
		err := n.RemoveNode(ctx, id)
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			n.log.Warn("forget a host left behind by the recovery", "node", id, "err", err)
			continue
		}
		n.log.Info("forgot a host left behind by the recovery", "node", id)
	}
}
