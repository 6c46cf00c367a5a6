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
	apiAddrs := map[raft.ServerID]string{}
	state.mu.RLock()
	for _, s := range others {
		apiAddrs[s.ID] = state.st.get(api.KindNode, string(s.ID)).GetNode().GetApiAddr()
	}
	state.mu.RUnlock()
	var alive []string
	for _, s := range others {
		if c, err := net.DialTimeout("tcp", string(s.Address), recoverProbeTimeout); err == nil {
			c.Close()
			alive = append(alive, fmt.Sprintf("%s answers on its Raft address %s", s.ID, s.Address))
			continue
		}
		addr := apiAddrs[s.ID]
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
func (n *Node) forgetRecovered(ctx context.Context) { n.forgetVoters(ctx, n.recovered) }

func (n *Node) forgetVoters(ctx context.Context, ids []string) {
	for _, id := range ids {
		err := n.RemoveNode(ctx, id)
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			n.log.Warn("forget a host left behind by the recovery", "node", id, "err", err)
			continue
		}
		n.log.Info("forgot a host left behind by the recovery", "node", id)
	}
}

// ErrAlone: the host is the only voter already; there is nothing to
// recover.
var ErrAlone = errors.New("this host is the only voter already")

// RecoverInPlace turns this running host into a one-host cluster with
// the state it holds, as Config.Recover does at start, without stopping
// the host: its data plane and every watcher go on with the state they
// have (no reset, no revision going back), and only Raft is restarted
// underneath. It refuses while any other voter of the configuration
// answers, and returns the voters it left behind, whose Node objects it
// deletes once it leads.
//
// Raft is stopped, the entries of the log that the state has not applied
// yet (appended, never known to be committed) are applied to it, the
// configuration is rewritten to this host alone (raft.RecoverCluster,
// which leaves a snapshot of that state and an empty log), and a new Raft
// instance starts from that snapshot without restoring it into the state
// it already holds.
func (n *Node) RecoverInPlace(ctx context.Context) ([]string, error) {
	n.recoverMu.Lock()
	defer n.recoverMu.Unlock()
	select {
	case <-n.stop:
		return nil, ErrClosed
	default:
	}
	old := n.r()
	f := old.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("recover: read the cluster configuration: %w", err)
	}
	var others []raft.Server
	me := false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.NodeID {
			me = s.Suffrage == raft.Voter
			continue
		}
		if s.Suffrage == raft.Voter {
			others = append(others, s)
		}
	}
	if !me {
		return nil, fmt.Errorf("recover: this host is not a voter; recover a surviving voter: %w", api.ErrConflict)
	}
	if len(others) == 0 {
		return nil, fmt.Errorf("recover: %w", ErrAlone)
	}
	if alive := n.aliveVoters(others, n.fsm); len(alive) > 0 {
		return nil, fmt.Errorf("recover refused: %s; a majority is not lost for good while other hosts run. "+
			"Fix the network or start those hosts again; recover only once they are gone for good (stopped, their disks lost): %w",
			strings.Join(alive, "; "), api.ErrConflict)
	}
	n.log.Warn("recovering in place from a lost majority: restarting Raft as a one-host cluster; the data plane keeps serving")
	if err := old.Shutdown().Error(); err != nil {
		return nil, fmt.Errorf("recover: stop raft: %w", err)
	}
	n.transp.Load().Close()
	restart := func() error {
		if err := applyRest(n.fsm, n.store); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		rc := raftConfig(n.cfg)
		rc.Logger = newHCLogger(n.raftLog)
		layer, err := newTLSStreamLayer(n.cfg.RaftAddr, n.creds.serverTLS, n.creds.clientTLS)
		if err != nil {
			return err
		}
		trans := newTransport(layer, rc.Logger)
		alone := raft.Configuration{Servers: []raft.Server{{
			ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.cfg.RaftAddr), Suffrage: raft.Voter,
		}}}
		quiet := newFSM(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := raft.RecoverCluster(rc, quiet, n.store, n.store, n.snaps, trans, alone); err != nil {
			trans.Close()
			return err
		}
		// The state holds everything the new snapshot holds.
		rc.NoSnapshotRestoreOnStart = true
		r, err := raft.NewRaft(rc, n.fsm, n.store, n.store, n.snaps, trans)
		if err != nil {
			trans.Close()
			return err
		}
		n.obsMu.Lock()
		n.raftp.Store(r)
		n.transp.Store(trans)
		for _, o := range n.observers {
			r.RegisterObserver(o)
		}
		n.obsMu.Unlock()
		return nil
	}
	if err := restart(); err != nil {
		// Raft is down and the host cannot write or follow: stop loudly
		// rather than serve on without a control plane that works.
		n.log.Error("recovery in place failed; Raft is stopped: stop the host and start it with --recover", "err", err)
		return nil, fmt.Errorf("recover: %w; Raft is stopped: stop the host and start it with serve --recover", err)
	}
	var gone []string
	for _, s := range others {
		gone = append(gone, string(s.ID))
	}
	n.log.Warn("recovered from a lost majority in place: this host is now a one-host cluster with the state in its log",
		"forgotten_voters", gone, "revision", n.Revision())
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for n.r().State() != raft.Leader {
		select {
		case <-wctx.Done():
			return gone, nil // it leads soon; the Node objects stay until a later removal
		case <-time.After(10 * time.Millisecond):
		}
	}
	n.forgetVoters(wctx, gone)
	return gone, nil
}

// applyRest applies to f the commands of the log after the last one it
// applied.
func applyRest(f *fsm, logs raft.LogStore) error {
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	for i := f.applied.Load() + 1; i <= last && last > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return err
		}
		if l.Type == raft.LogCommand {
			f.Apply(&l)
		}
	}
	return nil
}
