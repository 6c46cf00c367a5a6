package consensus

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ObserveTimeout bounds how long Observe waits for one host.
const ObserveTimeout = 2 * time.Second

func (s *clusterService) Observe(_ context.Context, req *pb.ObserveRequest) (*pb.HostObservation, error) {
	return s.n.observeLocal(req), nil
}

func (n *Node) observeLocal(req *pb.ObserveRequest) *pb.HostObservation {
	var h *pb.HostObservation
	if n.cfg.Observe != nil {
		h = n.cfg.Observe(req)
	}
	if h == nil {
		h = &pb.HostObservation{Reachable: true, Time: timestamppb.Now()}
	}
	h.NodeId = n.cfg.NodeID
	n.fsm.mu.RLock()
	h.Draining = n.fsm.st.get(api.KindNode, n.cfg.NodeID).GetNode().GetDraining()
	n.fsm.mu.RUnlock()
	return h
}

// Observe gathers what every host of the configuration sees, asking them
// in parallel; a host that does not answer within ObserveTimeout is
// reported unreachable with the reason. req.Node limits it to one host.
func (n *Node) Observe(ctx context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	f := n.r().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var servers []raft.Server
	for _, s := range f.Configuration().Servers {
		if req.GetNode() == "" || string(s.ID) == req.GetNode() {
			servers = append(servers, s)
		}
	}
	out := &pb.ObserveResponse{Revision: n.Revision(), Time: timestamppb.Now(), Hosts: make([]*pb.HostObservation, len(servers))}
	done := make(chan struct{}, len(servers))
	for i, s := range servers {
		go func() {
			defer func() { done <- struct{}{} }()
			out.Hosts[i] = n.observePeer(ctx, s, req)
		}()
	}
	for range servers {
		<-done
	}
	return out, nil
}

func (n *Node) observePeer(ctx context.Context, s raft.Server, req *pb.ObserveRequest) *pb.HostObservation {
	id := string(s.ID)
	if id == n.cfg.NodeID {
		return n.observeLocal(req)
	}
	n.fsm.mu.RLock()
	node := n.fsm.st.get(api.KindNode, id).GetNode()
	n.fsm.mu.RUnlock()
	h := &pb.HostObservation{NodeId: id, Draining: node.GetDraining()}
	if node.GetApiAddr() == "" {
		h.Error = "API address unknown"
		return h
	}
	c, err := n.peers.cluster(node.GetApiAddr())
	if err != nil {
		h.Error = err.Error()
		return h
	}
	octx, cancel := context.WithTimeout(ctx, ObserveTimeout)
	defer cancel()
	got, err := c.Observe(octx, req)
	if err != nil {
		h.Error = status.Convert(err).Message()
		return h
	}
	got.NodeId, got.Reachable = id, true
	return got
}

// watchLeader records an event each time this host sees the leader change.
func (n *Node) watchLeader() {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.observe(obs)
	defer n.unobserve(obs)
	// A leader learned before the observer was registered is reported too.
	_, id := n.r().LeaderWithID()
	leading := string(id) == n.cfg.NodeID
	if id != "" && n.cfg.Event != nil {
		n.cfg.Event(&pb.Event{Type: observe.EventLeaderChange, Severity: observe.Info, Message: "leader is now " + string(id)})
	}
	for {
		select {
		case <-n.stop:
			return
		case o := <-ch:
			lo := o.Data.(raft.LeaderObservation)
			if string(lo.LeaderID) == n.cfg.NodeID {
				leading = true
			} else if leading {
				// It led until now (LeaderContact).
				leading = false
				n.led.Store(time.Now().UnixNano())
			}
			if n.cfg.Event == nil {
				continue
			}
			ev := &pb.Event{Type: observe.EventLeaderChange, Severity: observe.Info, Message: "leader is now " + string(lo.LeaderID)}
			if lo.LeaderID == "" {
				ev.Severity, ev.Message = observe.Warning, "no leader known"
			}
			n.cfg.Event(ev)
		}
	}
}
