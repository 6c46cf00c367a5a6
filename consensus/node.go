package consensus

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Defaults for a LAN. A follower notices a dead leader between one and two
// heartbeat timeouts after its last contact; see DESIGN.md for the figures.
const (
	DefaultHeartbeatTimeout   = 250 * time.Millisecond
	DefaultElectionTimeout    = 250 * time.Millisecond
	DefaultLeaderLeaseTimeout = 200 * time.Millisecond
	// MaxVoters is the size of the voting group; further hosts stay
	// non-voters and receive the same state.
	MaxVoters = 5
)

// Errors.
var (
	ErrClosed   = errors.New("node is shut down")
	ErrNoLeader = fmt.Errorf("no leader reachable: %w", api.ErrUnavailable)
	errRetry    = errors.New("leader changed; retry")
	// ErrLocked: a storage lock is held by another owner.
	ErrLocked = api.ErrLocked
)

// Config configures a Node.
type Config struct {
	DataDir string
	NodeID  string
	// RaftAddr is where Raft listens and what peers dial (IP:port).
	RaftAddr string
	// APIAddr is where this host's gRPC API is reachable (IP:port).
	APIAddr string
	// Join and Token make a new host join an existing cluster through the
	// API of one of its hosts.
	Join  string
	Token string

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration

	// HeartbeatAddr and VIPInterface are recorded in this host's Node
	// object for the VIP failure detector.
	HeartbeatAddr string
	VIPInterface  string
	// Services and Addresses are this host's other services (metrics,
	// dashboard, BGP) and its addresses, recorded in its Node object so
	// that the leader refuses members and health checks that reach them
	// (api.HostPorts).
	Services  []*pb.NodeService
	Addresses []string
	// Describe adds what other parts of the host know (VIPs held, peers
	// seen) to this host's health report.
	Describe func(*pb.NodeStatus)
	// Observe reports what this host sees (Cluster.Observe, and this
	// host's part of Node.Observe); nil reports only the host's id.
	Observe func(*pb.ObserveRequest) *pb.HostObservation
	// Event records an event of this host (a leader change); nil drops it.
	Event func(*pb.Event)

	Logger  *slog.Logger
	Version string

	// Restore bootstraps a new cluster from a backup (the data dir must be
	// empty): its CA, cluster id and objects.
	Restore *pb.Backup
	// Recover makes this host a one-host cluster with the state in its log
	// when the other voters are gone for good (it refuses while any of
	// them answers).
	Recover bool

	// featureLevel, when set, is the level this host records and reports
	// instead of FeatureLevel (a host of an earlier release, in tests).
	featureLevel uint32
	// wrapLogs, when set (tests only), wraps the Raft log store the host
	// starts with: a test holds a log write there.
	wrapLogs func(raft.LogStore) raft.LogStore
}

// Node is one LB host's member of the Raft cluster.
type Node struct {
	cfg Config
	log *slog.Logger
	fsm *fsm
	// raftp is the running Raft instance: a recovery in place
	// (RecoverInPlace) replaces it while the host runs; r() reads it.
	raftp atomic.Pointer[raft.Raft]
	// readTerm is the term in which this host, as leader, saw an entry of
	// its own committed (see leaderReadIndex); 0: none yet.
	readTerm atomic.Uint64
	// led is when this host last was the leader (UnixNano; 0: not since
	// it started), for LeaderContact once it steps down.
	led    atomic.Int64
	snaps  raft.SnapshotStore
	store  *raftboltdb.BoltStore
	transp atomic.Pointer[raft.NetworkTransport]
	// recoverMu keeps Close and RecoverInPlace apart.
	recoverMu sync.Mutex
	// observers are registered with every Raft instance the host runs.
	obsMu     sync.Mutex
	observers []*raft.Observer
	creds     *hostCreds
	peers     *peerPool
	metrics   *raftMetrics
	raftLog   *raftLogWriter

	// features caches what the hosts answered about their feature
	// levels (hostsBelow).
	features featureCache
	// budgets are the tenants' write budgets (writebudget.go).
	budgets writeBudgets

	writes      chan *writeReq
	barrierTerm atomic.Uint64
	ready       chan struct{}
	readyOnce   sync.Once
	stop        chan struct{}
	stopOnce    sync.Once
	wg          sync.WaitGroup
	// recovered are the voters a recovery left behind (Config.Recover).
	recovered []string
}

// Open starts this host's Raft member: it bootstraps a new cluster when the
// data directory is empty and no join address is given, joins one when it
// is, and otherwise carries on from what is on disk.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = DefaultElectionTimeout
	}
	if cfg.LeaderLeaseTimeout == 0 {
		cfg.LeaderLeaseTimeout = min(DefaultLeaderLeaseTimeout, cfg.HeartbeatTimeout)
	}
	if err := checkAddrs(cfg); err != nil {
		return nil, err
	}
	if err := checkTimeouts(cfg); err != nil {
		return nil, err
	}
	if err := checkDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "consensus"),
		writes: make(chan *writeReq, 1024),
		ready:  make(chan struct{}),
		stop:   make(chan struct{}),

		metrics: newRaftMetrics(),
	}
	n.fsm = newFSM(n.log)

	if cfg.Recover && cfg.Restore != nil {
		return nil, errors.New("--recover and --restore exclude each other: recover keeps a survivor's state, restore starts a new cluster from a backup")
	}
	if err := checkNoRestorePending(cfg.DataDir); err != nil {
		return nil, err
	}
	if cfg.Restore != nil {
		if err := checkEmptyForRestore(cfg); err != nil {
			return nil, err
		}
		if err := markRestorePending(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	creds, err := loadCredentials(cfg.DataDir)
	bootstrap := false
	switch {
	case err == nil:
		if creds.nodeID != cfg.NodeID {
			return nil, fmt.Errorf("data dir %s belongs to node %q, not %q", cfg.DataDir, creds.nodeID, cfg.NodeID)
		}
		if cfg.Join != "" {
			n.log.Info("data dir holds cluster state already; ignoring --join", "cluster", creds.clusterID)
		}
		if db := filepath.Join(cfg.DataDir, "raft", "raft.db"); !exists(db) {
			return nil, damaged("raft log", db, os.ErrNotExist)
		}
	case errors.Is(err, os.ErrNotExist) && cfg.Recover:
		return nil, fmt.Errorf("--recover: data dir %s holds no cluster state to recover; give the data dir of a surviving host", cfg.DataDir)
	case errors.Is(err, os.ErrNotExist) && cfg.Restore != nil:
		if creds, err = restoreCredentials(cfg, cfg.Restore); err != nil {
			return nil, err
		}
		bootstrap = true
	case errors.Is(err, os.ErrNotExist) && cfg.Join != "":
		if creds, err = n.join(ctx); err != nil {
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist):
		if creds, err = newClusterCredentials(cfg); err != nil {
			return nil, err
		}
		bootstrap = true
	default:
		return nil, err
	}
	n.creds = creds
	n.peers = newPeerPool(creds.clientTLS)

	if err := n.startRaft(bootstrap); err != nil {
		n.peers.close()
		return nil, err
	}
	if cfg.Restore != nil {
		if err := n.restore(ctx, cfg.Restore); err != nil {
			n.abort()
			return nil, err
		}
		if err := clearRestorePending(cfg.DataDir); err != nil {
			n.abort()
			return nil, err
		}
	}
	n.observeLeaders()
	n.wg.Add(3)
	go n.runWrites()
	go n.runMembership()
	go n.watchLeader()
	return n, nil
}

func checkAddrs(cfg Config) error {
	if cfg.NodeID == "" {
		return errors.New("node id must not be empty")
	}
	for flag, a := range map[string]string{"raft-addr": cfg.RaftAddr, "api-addr": cfg.APIAddr} {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return fmt.Errorf("--%s %q: must be IP:port (for example 127.0.0.1:7300)", flag, a)
		}
		if ap.Addr().IsUnspecified() {
			return fmt.Errorf("--%s %q: peers need an address they can dial, not %s", flag, a, ap.Addr())
		}
	}
	return nil
}

// commitTimeout is raft.Config.CommitTimeout (see raftConfig); a
// variable so that a test can lengthen it.
var commitTimeout = 5 * time.Millisecond

// raftConfig is the Raft configuration of a host started with cfg.
func raftConfig(cfg Config) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	// A follower learns that an entry committed from the leader's next
	// AppendEntries, which hashicorp/raft sends when new entries come or
	// after CommitTimeout to 2×CommitTimeout without any: that wait is
	// part of the way to the followers' data planes of a change that
	// no barrier follows (commitBatch sends one after each write). 5ms
	// keeps it short for the cost of an empty AppendEntries per follower
	// every 5–10ms.
	rc.CommitTimeout = commitTimeout
	rc.SnapshotThreshold = 8192
	rc.SnapshotInterval = 60 * time.Second
	rc.TrailingLogs = 10240
	return rc
}

// minRaftTimeout is the shortest timeout Raft accepts.
const minRaftTimeout = 5 * time.Millisecond

// checkTimeouts names the flag of a timeout Raft would refuse, before
// anything is written to the data dir.
func checkTimeouts(cfg Config) error {
	switch {
	case cfg.HeartbeatTimeout < minRaftTimeout:
		return fmt.Errorf("--raft-heartbeat-timeout %s: must be at least %s (default %s)", cfg.HeartbeatTimeout, minRaftTimeout, DefaultHeartbeatTimeout)
	case cfg.ElectionTimeout < minRaftTimeout:
		return fmt.Errorf("--raft-election-timeout %s: must be at least %s (default %s)", cfg.ElectionTimeout, minRaftTimeout, DefaultElectionTimeout)
	case cfg.ElectionTimeout < cfg.HeartbeatTimeout:
		return fmt.Errorf("--raft-election-timeout %s is shorter than --raft-heartbeat-timeout %s: give an election timeout at least as long as the heartbeat timeout",
			cfg.ElectionTimeout, cfg.HeartbeatTimeout)
	case cfg.LeaderLeaseTimeout < minRaftTimeout || cfg.LeaderLeaseTimeout > cfg.HeartbeatTimeout:
		return fmt.Errorf("leader lease timeout %s: must be between %s and --raft-heartbeat-timeout %s", cfg.LeaderLeaseTimeout, minRaftTimeout, cfg.HeartbeatTimeout)
	}
	if err := raft.ValidateConfig(raftConfig(cfg)); err != nil {
		return fmt.Errorf("raft configuration: %w (check the --raft-* flags)", err)
	}
	return nil
}

func (n *Node) startRaft(bootstrap bool) error {
	rc := raftConfig(n.cfg)
	n.raftLog = newRaftLogWriter(n.cfg.Logger.With("component", "raft"), time.Now)
	rc.Logger = newHCLogger(n.raftLog)

	dir := filepath.Join(n.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create raft dir: %w", err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return fmt.Errorf("open raft log: %s is in use by another teapot-lb process", dir)
		}
		return storeError("raft log", filepath.Join(dir, "raft.db"), err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, rc.Logger)
	if err != nil {
		store.Close()
		return storeError("raft snapshot store", filepath.Join(dir, "snapshots"), err)
	}
	layer, err := newTLSStreamLayer(n.cfg.RaftAddr, n.creds.serverTLS, n.creds.clientTLS)
	if err != nil {
		store.Close()
		return err
	}
	trans := newTransport(layer, rc.Logger)
	if n.cfg.Recover {
		if err := n.recoverAlone(rc, store, snaps, trans); err != nil {
			trans.Close()
			store.Close()
			return err
		}
	}
	var logs raft.LogStore = store
	if n.cfg.wrapLogs != nil {
		logs = n.cfg.wrapLogs(store)
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return storeError("raft state", dir, err)
	}
	n.raftp.Store(r)
	n.store, n.snaps = store, snaps
	n.transp.Store(trans)
	if bootstrap {
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: raft.ServerAddress(n.cfg.RaftAddr), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap cluster: %w", err)
		}
		n.log.Info("bootstrapped a new cluster", "cluster", n.creds.clusterID, "node", n.cfg.NodeID)
	}
	return nil
}

// Ready is closed once this host is a full member: it is in the cluster's
// configuration, its Node object is stored, and a leader is known.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// LeaderContact returns when this host last knew its committed state to
// be current: now while it is the leader, else when it last heard from
// the leader or was the leader itself, whichever is later (zero: neither
// since the process started).
func (n *Node) LeaderContact() time.Time {
	r := n.r()
	return leaderContact(r.State() == raft.Leader, r.LastContact, &n.led, time.Now())
}

// leaderContact is LeaderContact's rule. Raft sets its last contact as
// a leader steps down, but only after it has left the leader state: in
// between, a host that was never a follower has none, and its state
// would look as old as the process (the VIP layer withdrew its routes
// for "no contact with the Raft leader for 2562047h"). led, kept while
// it leads, covers that moment.
func leaderContact(leading bool, lastContact func() time.Time, led *atomic.Int64, now time.Time) time.Time {
	if leading {
		led.Store(now.UnixNano())
		return now
	}
	last := lastContact()
	if l := led.Load(); l != 0 && time.Unix(0, l).After(last) {
		return time.Unix(0, l)
	}
	return last
}

// ID returns this host's node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// ClusterID returns the id of the cluster this host belongs to.
func (n *Node) ClusterID() string { return n.creds.clusterID }

// CA returns the cluster CA (every host holds it so that any host can sign
// credentials).
func (n *Node) CA() *pki.CA { return n.creds.ca }

// ServerTLS is the TLS config for this host's API listener.
func (n *Node) ServerTLS() *tls.Config { return n.creds.serverTLS.Clone() }

// IsLeader reports whether this host leads the cluster now.
func (n *Node) IsLeader() bool { return n.r().State() == raft.Leader }

// r is the running Raft instance.
func (n *Node) r() *raft.Raft { return n.raftp.Load() }

// observe registers obs with the running Raft instance and the ones a
// recovery in place starts later.
func (n *Node) observe(obs *raft.Observer) {
	n.obsMu.Lock()
	defer n.obsMu.Unlock()
	n.observers = append(n.observers, obs)
	n.r().RegisterObserver(obs)
}

func (n *Node) unobserve(obs *raft.Observer) {
	n.obsMu.Lock()
	defer n.obsMu.Unlock()
	n.observers = slices.DeleteFunc(n.observers, func(o *raft.Observer) bool { return o == obs })
	n.r().DeregisterObserver(obs)
}

// Close stops the member. A leader hands leadership to another voter first
// so that writes resume without waiting for an election.
func (n *Node) Close() error {
	var err error
	n.stopOnce.Do(func() {
		if n.r().State() == raft.Leader && n.voters() > 1 {
			if e := n.r().LeadershipTransfer().Error(); e != nil {
				n.log.Warn("leadership transfer failed", "err", e)
			} else {
				n.log.Info("handed leadership over before shutting down")
			}
		}
		close(n.stop)
		n.wg.Wait()
		n.recoverMu.Lock()
		defer n.recoverMu.Unlock()
		if e := n.r().Shutdown().Error(); e != nil {
			err = fmt.Errorf("shut down raft: %w", e)
		}
		n.transp.Load().Close()
		if e := n.store.Close(); e != nil && err == nil {
			err = fmt.Errorf("close raft log: %w", e)
		}
		n.peers.close()
	})
	return err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// abort stops Raft when Open fails after it started.
func (n *Node) abort() {
	_ = n.r().Shutdown().Error()
	n.transp.Load().Close()
	n.store.Close()
	n.peers.close()
}

func (n *Node) voters() int {
	f := n.r().GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// leaderAPI returns the API address of the current leader ("" if unknown).
func (n *Node) leaderAPI() (id, addr string) {
	_, lid := n.r().LeaderWithID()
	if lid == "" {
		return "", ""
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return string(lid), n.fsm.st.get(api.KindNode, string(lid)).GetNode().GetApiAddr()
}

// waitRetry sleeps a little before another attempt, or returns ctx's error.
func (n *Node) waitRetry(ctx context.Context, cause error) error {
	select {
	case <-ctx.Done():
		if cause == nil {
			cause = ErrNoLeader
		}
		return fmt.Errorf("%w (%v)", ErrNoLeader, cause)
	case <-n.stop:
		return ErrClosed
	case <-time.After(15 * time.Millisecond):
		return nil
	}
}

// runMembership registers this host's Node object and, on a host that
// joined as a non-voter, asks for promotion once it has caught up.
func (n *Node) runMembership() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-n.stop; cancel() }()
	for {
		err := n.ensureMember(ctx)
		if err == nil {
			n.readyOnce.Do(func() { close(n.ready) })
			if len(n.recovered) > 0 {
				n.forgetRecovered(ctx)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Debug("not a full member yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) ensureMember(ctx context.Context) error {
	f := n.r().GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	var me *raft.Server
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
		if string(s.ID) == n.cfg.NodeID {
			s := s
			me = &s
		}
	}
	if me == nil {
		return errors.New("not in the cluster configuration yet")
	}
	if _, addr := n.leaderAPI(); addr == "" && n.r().State() != raft.Leader {
		return errors.New("no leader known yet")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.ReadBarrier(wctx); err != nil {
		return err
	}
	if me.Suffrage != raft.Voter && voters < MaxVoters {
		if err := n.requestPromotion(wctx); err != nil {
			return fmt.Errorf("promotion: %w", err)
		}
	}
	want := &pb.Node{
		Id: n.cfg.NodeID, RaftAddr: n.cfg.RaftAddr, ApiAddr: n.cfg.APIAddr, Suffrage: suffrageOf(me.Suffrage),
		HeartbeatAddr: n.cfg.HeartbeatAddr, VipInterface: n.cfg.VIPInterface,
		Version: n.cfg.Version, FeatureLevel: n.featureLevel(),
		Services: n.cfg.Services, Addresses: n.cfg.Addresses,
	}
	n.fsm.mu.RLock()
	have := n.fsm.st.get(api.KindNode, n.cfg.NodeID).GetNode()
	n.fsm.mu.RUnlock()
	want.Draining = have.GetDraining() // an operator's drain outlives a restart
	if have.GetRaftAddr() != want.RaftAddr || have.GetApiAddr() != want.ApiAddr ||
		have.GetHeartbeatAddr() != want.HeartbeatAddr || have.GetVipInterface() != want.VipInterface ||
		have.GetVersion() != want.Version || have.GetFeatureLevel() != want.FeatureLevel ||
		!sameServices(have, want) {
		if _, err := n.Apply(wctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(want)}}, true); err != nil {
			return fmt.Errorf("register node: %w", err)
		}
	}
	return nil
}

// sameServices reports whether two Node records publish the same own
// services and addresses.
func sameServices(a, b *pb.Node) bool {
	return slices.Equal(a.GetAddresses(), b.GetAddresses()) &&
		slices.EqualFunc(a.GetServices(), b.GetServices(), func(x, y *pb.NodeService) bool {
			return x.GetName() == y.GetName() && x.GetAddr() == y.GetAddr()
		})
}

func suffrageOf(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "nonvoter"
}

func (n *Node) requestPromotion(ctx context.Context) error {
	if n.r().State() == raft.Leader {
		return n.promote(n.cfg.NodeID)
	}
	_, addr := n.leaderAPI()
	if addr == "" {
		return ErrNoLeader
	}
	c, err := n.peers.cluster(addr)
	if err != nil {
		return err
	}
	_, err = c.Promote(ctx, &pb.PromoteRequest{NodeId: n.cfg.NodeID})
	return err
}

// promote makes a caught-up non-voter a voter (leader only).
func (n *Node) promote(id string) error {
	f := n.r().GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != id {
			continue
		}
		if s.Suffrage == raft.Voter {
			return nil
		}
		if n.voters() >= MaxVoters {
			return nil
		}
		if err := n.r().AddVoter(s.ID, s.Address, 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("add voter %s: %w", id, err)
		}
		n.log.Info("promoted node to voter", "node", id)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.fsm.mu.RLock()
		node := clone(n.fsm.st.get(api.KindNode, id))
		n.fsm.mu.RUnlock()
		if node != nil {
			node.GetNode().Suffrage = "voter"
			_, err := n.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{node}}, true)
			return err
		}
		return nil
	}
	return fmt.Errorf("node %q is not in the cluster: %w", id, api.ErrNotFound)
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// peerPool keeps one gRPC connection per peer API address.
type peerPool struct {
	mu    sync.Mutex
	tls   *tls.Config
	conns map[string]*grpc.ClientConn
}

func newPeerPool(t *tls.Config) *peerPool {
	return &peerPool{tls: t, conns: make(map[string]*grpc.ClientConn)}
}

func (p *peerPool) cluster(addr string) (pb.ClusterClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return pb.NewClusterClient(c), nil
	}
	c, err := dialPeer(addr, p.tls)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return pb.NewClusterClient(c), nil
}

// reconnectNow makes the connection to addr, if it is waiting out a
// reconnect backoff, try again at once.
func (p *peerPool) reconnectNow(addr string) {
	p.mu.Lock()
	c := p.conns[addr]
	p.mu.Unlock()
	if c != nil && c.GetState() == connectivity.TransientFailure {
		c.ResetConnectBackoff()
	}
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.Close()
		delete(p.conns, a)
	}
}

func hostIP(addr string) net.IP {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil
	}
	return net.IP(ap.Addr().AsSlice())
}
