package cli

import (
	"context"
	"fmt"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// checkFeatureLevels refuses, before anything is sent, a write of objs
// that uses a feature some answering host does not report (cluster
// status). The hosts refuse such a write themselves, but a write that
// enters through a host of an earlier release and reaches a leader of
// one meets no host that knows the feature, and those hosts would store
// the field and ignore it. Hosts that do not answer are left to the
// cluster's own check, which counts them with their recorded level.
func checkFeatureLevels(ctx context.Context, c *client.Conn, objs []*pb.Object) error {
	var uses []api.FeatureUse
	for _, o := range objs {
		uses = append(uses, api.FeaturesUsed(o)...)
	}
	need := api.LevelNeeded(uses)
	if need <= 1 {
		return nil
	}
	st, err := c.Admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	if err != nil {
		return fmt.Errorf("read the hosts' feature levels (cluster status) before a write that uses %s: %w; nothing was written", uses[0], err)
	}
	var older []string
	for _, ns := range st.GetNodes() {
		if ns.GetState() == "unreachable" {
			continue
		}
		if l := api.HostLevel(ns); l < need {
			older = append(older, api.DescribeHost(ns.GetId(), ns.GetVersion(), l))
		}
	}
	if len(older) == 0 {
		return nil
	}
	return api.FeatureRefusal(uses, need, older)
}
