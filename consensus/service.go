package consensus

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ClusterService is the gRPC service LB hosts speak to each other. The
// caller's identity is checked by the server's interceptor (a node
// certificate for everything but Join); methods check what is theirs.
func (n *Node) ClusterService() pb.ClusterServer { return &clusterService{n: n} }

type clusterService struct {
	pb.UnimplementedClusterServer
	n *Node
}

var nodeIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

func (s *clusterService) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	resp, err := s.n.handleJoin(ctx, req)
	return resp, api.ToStatus(err)
}

func (s *clusterService) Promote(ctx context.Context, req *pb.PromoteRequest) (*pb.PromoteResponse, error) {
	id, _ := pki.FromContext(ctx)
	if id.Role != pki.RoleNode || id.Name != req.GetNodeId() {
		return nil, status.Error(codes.PermissionDenied, "a node may only ask for its own promotion")
	}
	if !s.n.IsLeader() {
		return nil, status.Error(codes.Unavailable, "not the leader")
	}
	return &pb.PromoteResponse{}, api.ToStatus(s.n.promote(req.GetNodeId()))
}

func (s *clusterService) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	if !s.n.IsLeader() {
		return nil, status.Error(codes.Unavailable, "not the leader")
	}
	// A host of an earlier release forwards what it does not check.
	if err := s.n.checkFeatures(ctx, req); err != nil {
		return nil, api.ToStatus(err)
	}
	resp, err := s.n.local(ctx, req)
	if retryable(err) {
		return nil, status.Error(codes.Unavailable, "leadership changed")
	}
	return resp, api.ToStatus(err)
}

func (s *clusterService) ReadIndex(ctx context.Context, _ *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	if !s.n.IsLeader() {
		return nil, status.Error(codes.Unavailable, "not the leader")
	}
	idx, err := s.n.leaderReadIndex(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, "leadership not confirmed")
	}
	return &pb.ReadIndexResponse{Index: idx}, nil
}

func (s *clusterService) Health(ctx context.Context, _ *pb.HealthRequest) (*pb.NodeStatus, error) {
	return s.n.health(), nil
}

// handleJoin admits a new host: it checks the token, signs the host's
// certificate request, records its Node object and adds it as a non-voter.
// Only the leader changes the configuration; others pass the call on.
func (n *Node) handleJoin(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	tok, err := pki.ParseJoinToken(req.GetToken())
	if err != nil || tok.CAFingerprint != n.creds.ca.Fingerprint() {
		return nil, fmt.Errorf("join token is not valid for this cluster: %w", api.ErrForbidden)
	}
	if !nodeIDPattern.MatchString(req.GetNodeId()) {
		return nil, fmt.Errorf("node id %q: use lower-case letters, digits, '.' and '-': %w", req.GetNodeId(), api.ErrInvalid)
	}
	for _, a := range []string{req.GetRaftAddr(), req.GetApiAddr()} {
		if ap, err := netip.ParseAddrPort(a); err != nil || ap.Addr().IsUnspecified() {
			return nil, fmt.Errorf("address %q: must be a dialable IP:port: %w", a, api.ErrInvalid)
		}
	}
	if !n.IsLeader() {
		_, addr := n.leaderAPI()
		if addr == "" {
			return nil, ErrNoLeader
		}
		c, err := n.peers.cluster(addr)
		if err != nil {
			return nil, err
		}
		return c.Join(ctx, req)
	}
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	n.fsm.mu.RLock()
	stored := n.fsm.st.get(api.KindJoinToken, tok.ID).GetJoinToken()
	n.fsm.mu.RUnlock()
	if stored == nil || !tok.MatchesHash(stored.GetSecretSha256()) || time.Now().After(stored.GetExpires().AsTime()) {
		return nil, fmt.Errorf("join token is unknown or expired; create one with `teapot-lb cluster join-token`: %w", api.ErrForbidden)
	}
	cfg := Config{NodeID: req.GetNodeId(), RaftAddr: req.GetRaftAddr(), APIAddr: req.GetApiAddr()}
	cert, err := n.creds.ca.SignCSR(req.GetCsrPem(), nodeCertRequest(cfg))
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, api.ErrInvalid)
	}
	node := &pb.Node{Id: req.GetNodeId(), RaftAddr: req.GetRaftAddr(), ApiAddr: req.GetApiAddr(), Suffrage: "nonvoter"}
	if _, err := n.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(node)}}, true); err != nil {
		return nil, fmt.Errorf("record node: %w", err)
	}
	if err := n.r().AddNonvoter(raft.ServerID(node.Id), raft.ServerAddress(node.RaftAddr), 0, 10*time.Second).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			// Leadership moved after this host found it led: the joining
			// host asks again (Unavailable), and reaches the new leader.
			return nil, fmt.Errorf("add non-voter: %v: %w", err, ErrNoLeader)
		}
		return nil, fmt.Errorf("add non-voter: %w", err)
	}
	n.log.Info("node joined as non-voter", "node", node.Id, "raft", node.RaftAddr, "api", node.ApiAddr)
	return &pb.JoinResponse{
		CaCertPem:    n.creds.ca.CertPEM,
		CaKeyPem:     n.creds.ca.KeyPEM,
		NodeCertPem:  cert,
		ClusterId:    n.creds.clusterID,
		CatchUpIndex: n.r().LastIndex(),
		Servers:      n.apiAddrs(),
	}, nil
}

// apiAddrs lists every host's API address, this host's first.
func (n *Node) apiAddrs() []string {
	out := []string{n.cfg.APIAddr}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	for _, o := range n.fsm.st.list(api.KindNode, "") {
		if a := o.GetNode().GetApiAddr(); a != n.cfg.APIAddr {
			out = append(out, a)
		}
	}
	return out
}

// APIAddrs lists every host's API address, this host's first.
func (n *Node) APIAddrs() []string { return n.apiAddrs() }

// CreateJoinToken stores a new join token valid for ttl.
func (n *Node) CreateJoinToken(ctx context.Context, ttl time.Duration) (*pb.CreateJoinTokenResponse, error) {
	if ttl <= 0 {
		ttl = time.Hour
	}
	if ttl > 7*24*time.Hour {
		return nil, fmt.Errorf("ttl %s: at most 168h: %w", ttl, api.ErrInvalid)
	}
	tok := pki.NewJoinToken(n.creds.ca.Fingerprint())
	expires := timestamppb.New(time.Now().Add(ttl))
	jt := &pb.JoinToken{Id: tok.ID, SecretSha256: tok.SecretHash(), Expires: expires}
	if _, err := n.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(jt)}}, true); err != nil {
		return nil, err
	}
	return &pb.CreateJoinTokenResponse{Token: tok.String(), Expires: expires, Servers: n.apiAddrs()}, nil
}

// RemoveNode takes a host out of the cluster.
func (n *Node) RemoveNode(ctx context.Context, id string) error {
	_, err := n.write(ctx, &pb.ForwardRequest{Write: &pb.ForwardRequest_RemoveNode{RemoveNode: &pb.RemoveNodeRequest{Id: id}}, Internal: true})
	return err
}

// removeNode runs on the leader. A leader removing itself hands leadership
// over first and lets the new leader do it.
func (n *Node) removeNode(ctx context.Context, id string) error {
	f := n.r().GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	found := false
	for _, s := range f.Configuration().Servers {
		found = found || string(s.ID) == id
	}
	n.fsm.mu.RLock()
	obj := n.fsm.st.get(api.KindNode, id)
	n.fsm.mu.RUnlock()
	if !found && obj == nil {
		return fmt.Errorf("node %q is not in the cluster: %w", id, api.ErrNotFound)
	}
	if found {
		if id == n.cfg.NodeID {
			if n.voters() < 2 {
				return fmt.Errorf("node %q is the only voter; removing it would end the cluster: %w", id, api.ErrConflict)
			}
			if err := n.r().LeadershipTransfer().Error(); err != nil {
				return fmt.Errorf("hand leadership over: %w", err)
			}
			return errRetry
		}
		if err := n.r().RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("remove %s: %w", id, err)
		}
		n.log.Info("removed node from the cluster", "node", id)
	}
	if obj != nil {
		ref := &pb.ObjectRef{Kind: api.KindNode, Name: id}
		if _, err := n.Delete(ctx, &pb.DeleteRequest{Ref: ref}, true); err != nil {
			return fmt.Errorf("forget node %s: %w", id, err)
		}
	}
	return nil
}

// health is this host's view of Raft.
func (n *Node) health() *pb.NodeStatus {
	st := n.r().State()
	leaderAddr, _ := n.r().LeaderWithID()
	ns := &pb.NodeStatus{
		Id:           n.cfg.NodeID,
		RaftAddr:     n.cfg.RaftAddr,
		ApiAddr:      n.cfg.APIAddr,
		State:        stateName(st),
		AppliedIndex: n.r().AppliedIndex(),
		Term:         n.r().CurrentTerm(),
		Version:      n.cfg.Version,
		Features:     api.Features(),
		FeatureLevel: n.featureLevel(),
	}
	switch st {
	case raft.Leader:
		ns.LastContact = "0s"
		ns.Healthy = true
	case raft.Follower:
		if lc := n.r().LastContact(); !lc.IsZero() {
			ago := time.Since(lc)
			ns.LastContact = ago.Round(time.Millisecond).String()
			ns.Healthy = leaderAddr != "" && ago < 3*n.cfg.HeartbeatTimeout
		} else {
			ns.LastContact = "never"
		}
	}
	if !ns.Healthy && leaderAddr == "" {
		ns.Error = "no leader known"
	}
	if n.cfg.Describe != nil {
		n.cfg.Describe(ns)
	}
	return ns
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

// Status reports the cluster as this host sees it, asking every member
// for its own view.
func (n *Node) Status(ctx context.Context) (*pb.ClusterStatusResponse, error) {
	f := n.r().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	_, leaderID := n.r().LeaderWithID()
	out := &pb.ClusterStatusResponse{
		ClusterId:        n.creds.clusterID,
		LeaderId:         string(leaderID),
		Term:             n.r().CurrentTerm(),
		CommitIndex:      n.r().CommitIndex(),
		Revision:         n.Revision(),
		HeartbeatTimeout: n.cfg.HeartbeatTimeout.String(),
		ElectionTimeout:  n.cfg.ElectionTimeout.String(),
		FeatureLevel:     n.ClusterFeatureLevel(),
	}
	servers := f.Configuration().Servers
	results := make([]*pb.NodeStatus, len(servers))
	done := make(chan struct{}, len(servers))
	for i, s := range servers {
		go func() {
			defer func() { done <- struct{}{} }()
			results[i] = n.peerHealth(ctx, s)
		}()
	}
	for range servers {
		<-done
	}
	out.Nodes = results
	// The hosts that answered count with the level they report (a host
	// downgraded to a release that leaves its Node object alone).
	n.fsm.mu.RLock()
	for _, ns := range results {
		level, _ := hostLevel(n.fsm.st.get(api.KindNode, ns.GetId()).GetNode(), ns)
		out.FeatureLevel = min(out.FeatureLevel, level)
	}
	out.Problems = api.NetworkOverlaps(catalog{r: n.fsm.st})
	n.fsm.mu.RUnlock()
	return out, nil
}

func (n *Node) peerHealth(ctx context.Context, s raft.Server) *pb.NodeStatus {
	return n.askPeerHealth(ctx, s, false)
}

// peerHealthNow is peerHealth for a decision that must not take a stale
// answer for the host's: a connection to a peer that restarted a moment
// ago (and may run another release now) is retried at once rather than
// after its reconnect backoff, and the call waits for it (within the same
// 700 ms) instead of failing fast.
func (n *Node) peerHealthNow(ctx context.Context, s raft.Server) *pb.NodeStatus {
	return n.askPeerHealth(ctx, s, true)
}

func (n *Node) askPeerHealth(ctx context.Context, s raft.Server, now bool) *pb.NodeStatus {
	id := string(s.ID)
	var ns *pb.NodeStatus
	if id == n.cfg.NodeID {
		ns = n.health()
	} else {
		n.fsm.mu.RLock()
		apiAddr := n.fsm.st.get(api.KindNode, id).GetNode().GetApiAddr()
		n.fsm.mu.RUnlock()
		ns = &pb.NodeStatus{Id: id, RaftAddr: string(s.Address), ApiAddr: apiAddr, State: "unreachable"}
		if apiAddr == "" {
			ns.Error = "API address unknown"
		} else if c, err := n.peers.cluster(apiAddr); err != nil {
			ns.Error = err.Error()
		} else {
			var opts []grpc.CallOption
			if now {
				n.peers.reconnectNow(apiAddr)
				opts = append(opts, grpc.WaitForReady(true))
			}
			hctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
			got, err := c.Health(hctx, &pb.HealthRequest{}, opts...)
			cancel()
			if err != nil {
				ns.Error = status.Convert(err).Message()
			} else {
				ns = got
			}
		}
	}
	ns.Suffrage = suffrageOf(s.Suffrage)
	n.fsm.mu.RLock()
	ns.Draining = n.fsm.st.get(api.KindNode, id).GetNode().GetDraining()
	n.fsm.mu.RUnlock()
	return ns
}

// DrainNode sets or clears a host's draining flag: a draining host gives up
// its VIPs and keeps serving what it has.
func (n *Node) DrainNode(ctx context.Context, id string, draining bool) (*pb.Node, error) {
	o, err := n.Get(ctx, &pb.ObjectRef{Kind: api.KindNode, Name: id})
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", id, err)
	}
	node := clone(o).GetNode()
	node.Draining = draining
	resp, err := n.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(node)}}, true)
	if err != nil {
		return nil, err
	}
	return resp.GetObjects()[0].GetNode(), nil
}
