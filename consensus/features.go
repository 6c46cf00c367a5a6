package consensus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// answer counts with the level its Node object records; answers are
// cached (featureCache). Writes that use no such feature never ask anyone.
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
	key := membershipKey(f.Index(), servers, recorded, n.features.epoch.Load())
	if older, ok := n.features.get(key, need, time.Now()); ok {
		return older, nil
	}
	for id := range recorded {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(recorded[id].GetRaftAddr())})
		}
	}
	n.features.asked.Add(int64(len(servers)))
	live := make([]*pb.NodeStatus, len(servers))
	done := make(chan struct{}, len(servers))
	for i, s := range servers {
		go func() {
			defer func() { done <- struct{}{} }()
			live[i] = n.peerHealthNow(ctx, s)
		}()
	}
	for range servers {
		<-done
	}
	var older []string
	all, lowest := true, uint32(FeatureLevel)
	for i, s := range servers {
		id := string(s.ID)
		rec, ok := recorded[id]
		level, version := hostLevel(rec, live[i])
		if live[i] == nil || live[i].GetState() == "unreachable" {
			all = false
		}
		lowest = min(lowest, level)
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
	n.features.put(key, need, all, lowest, older, time.Now())
	return older, nil
}

// notYetFor is how long hostsBelow keeps an answer in which some host
// did not answer (each such write would wait for it); allFor how long it
// keeps "every host answered at level >= L" at most.
const (
	notYetFor = time.Second
	allFor    = 30 * time.Second
)

// featureCache keeps what the hosts answered about their feature levels,
// so that writes using a feature above level 1 do not ask every host
// each time. Once every host answered, "all at level >= L" holds until
// the membership changes (key: the Raft configuration, the Node objects'
// recorded levels and versions, and epoch, which Raft observations of a
// host failing, coming back or a new leader move on), for allFor at most.
// A host can only go below L by restarting on another release, which those
// observations see unless the restart falls between two heartbeats; allFor
// bounds that case. An answer in which a host did not answer is kept for
// notYetFor; one in which every host answered and some is below the level
// is not kept: a host just upgraded is seen at once.
type featureCache struct {
	epoch atomic.Uint64
	// asked counts the hosts asked for their level.
	asked atomic.Int64

	mu sync.Mutex
	// key and level: every host answered at level >= level, until.
	key   string
	level uint32
	until time.Time
	// notYet: the hosts below need, as of until.
	notYetKey   string
	notYetNeed  uint32
	notYet      []string
	notYetUntil time.Time
}

// get returns the hosts below need from the cache, and whether it knew.
func (c *featureCache) get(key string, need uint32, now time.Time) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == key && c.level >= need && now.Before(c.until) {
		return nil, true
	}
	if c.notYetKey == key && c.notYetNeed == need && now.Before(c.notYetUntil) {
		return slices.Clone(c.notYet), true
	}
	return nil, false
}

// put records an answer: all (every host answered) at level >= lowest,
// and older, the hosts below need.
func (c *featureCache) put(key string, need uint32, all bool, lowest uint32, older []string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if all {
		c.key, c.level, c.until = key, lowest, now.Add(allFor)
		c.notYetKey = ""
		return
	}
	c.notYetKey, c.notYetNeed, c.notYet, c.notYetUntil = key, need, slices.Clone(older), now.Add(notYetFor)
}

// membershipKey names the cluster's membership as hostsBelow sees it.
func membershipKey(index uint64, servers []raft.Server, recorded map[string]*pb.Node, epoch uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d", index, epoch)
	for _, s := range servers {
		fmt.Fprintf(&b, "|%s@%s:%d", s.ID, s.Address, s.Suffrage)
	}
	for _, id := range slices.Sorted(maps.Keys(recorded)) {
		rec := recorded[id]
		fmt.Fprintf(&b, "|%s:%d:%s", id, rec.GetFeatureLevel(), rec.GetVersion())
	}
	return b.String()
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
