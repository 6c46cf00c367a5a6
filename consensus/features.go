package consensus

import (
	"github.com/teapot-lb/teapot-lb/api"
)

// FeatureLevel is the highest cluster feature level this release
// understands. Every host records its level in its Node object; the
// cluster's level is the lowest of them. A release that adds a command
// version or a model field the state machine must understand raises
// FeatureLevel, and its proposer accepts writes that use the addition only
// once ClusterFeatureLevel has reached it, that is once the last host runs
// the release. Level 1 is the model and command version 1 of this release
// and of every release before levels existed.
const FeatureLevel = 1

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
