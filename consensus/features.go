package consensus

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// FeatureLevel is the highest cluster feature level this release
// understands (api.FeatureLevel). Every host records its level in its Node
// object and reports it in its health; writes that use a feature of a
// higher level than some host's are refused (checkFeatures).
const FeatureLevel = api.FeatureLevel

// ClusterFeatureLevel returns the lowest feature level of the hosts in
// the state (a host of a release before levels counts as level 1).
func (n *Node) ClusterFeatureLevel() uint32 {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return clusterFeatureLevel(n.fsm.st)
}

func clusterFeatureLevel(r reader) uint32 {
	level := uint32(FeatureLevel)
	for _, o := range r.list(api.KindNode, "") {
		l := max(o.GetNode().GetFeatureLevel(), 1)
		level = min(level, l)
	}
	return level
}

// featureLevel is the level this host records and reports.
func (n *Node) featureLevel() uint32 {
	if n.cfg.featureLevel != 0 {
		return n.cfg.featureLevel
	}
	return FeatureLevel
}

// featuresUsed returns what fw uses that needs a feature level above 1,
// and the highest level among them.
func featuresUsed(fw *pb.ForwardRequest) ([]api.FeatureUse, uint32) {
	apply, del := fw.GetApply(), fw.GetDelete()
	if c := fw.GetChecked(); c != nil {
		apply, del = c.GetApply(), c.GetDelete()
	}
	var uses []api.FeatureUse
	if apply.GetDryRun() || del.GetDryRun() {
		uses = append(uses, api.FeatureUse{Feature: api.FeatureDryRun, Field: "a dry run"})
	}
	if len(apply.GetPreconditions()) > 0 {
		uses = append(uses, api.FeatureUse{Feature: api.FeatureCheckedWrites, Field: "revision preconditions"})
	}
	for _, o := range apply.GetObjects() {
		uses = append(uses, api.FeaturesUsed(o)...)
	}
	return uses, api.LevelNeeded(uses)
}

// checkFeatures refuses fw, with api.ErrConflict, when it uses a feature
// that some host of the cluster does not have: a host of an earlier
// release would ignore the field (or the request option) and serve or
// decide differently from the others. A host's level is the one it
// reports when asked now (a host downgraded to a release that does not
// rewrite its Node object still reports its true level, and a host that
// joined or was upgraded a moment ago its new one); a host that does not
// answer counts with the level its Node object records. Writes that use
// no such feature never ask anyone.
func (n *Node) checkFeatures(ctx context.Context, fw *pb.ForwardRequest) error {
	uses, need := featuresUsed(fw)
	if need <= 1 {
		return nil
	}
	older, err := n.hostsBelow(ctx, need)
	if err != nil {
		return err
	}
	if len(older) == 0 {
		return nil
	}
	return api.FeatureRefusal(uses, need, older)
}

// hostsBelow describes the hosts of the cluster (the Raft configuration
// and the Node objects) whose feature level is below need.
func (n *Node) hostsBelow(ctx context.Context, need uint32) ([]string, error) {
	f := n.r().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	servers := f.Configuration().Servers
	recorded := map[string]*pb.Node{}
	n.fsm.mu.RLock()
	for _, o := range n.fsm.st.list(api.KindNode, "") {
		recorded[o.GetNode().GetId()] = o.GetNode()
	}
	n.fsm.mu.RUnlock()
	for id := range recorded {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(recorded[id].GetRaftAddr())})
		}
	}
	live := make([]*pb.NodeStatus, len(servers))
	done := make(chan struct{}, len(servers))
	for i, s := range servers {
		go func() {
			defer func() { done <- struct{}{} }()
			live[i] = n.peerHealth(ctx, s)
		}()
	}
	for range servers {
		<-done
	}
	var older []string
	for i, s := range servers {
		id := string(s.ID)
		rec, ok := recorded[id]
		level, version := hostLevel(rec, live[i])
		if level >= need {
			continue
		}
		d := api.DescribeHost(id, version, level)
		if !ok {
			d += " (not registered yet)"
		}
		older = append(older, d)
	}
	slices.Sort(older)
	return older, nil
}

// hostLevel is a host's feature level and version: what it reports when
// asked (ns), or, when it did not answer, what its Node object records.
// A release before levels reports none and counts as level 1.
func hostLevel(rec *pb.Node, ns *pb.NodeStatus) (uint32, string) {
	if ns != nil && ns.GetState() != "unreachable" {
		return api.HostLevel(ns), ns.GetVersion()
	}
	return max(rec.GetFeatureLevel(), 1), rec.GetVersion()
}
