package consensus

import (
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Every host records its version and feature level; the cluster's level
// is the lowest, and a host of a release before levels counts as 1.
func TestFeatureLevels(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1", Version: "v-test"})
	waitFor(t, "the Node object with version and level", func() bool {
		o, err := h.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindNode, Name: "n1"})
		return err == nil && o.GetNode().GetVersion() == "v-test" && o.GetNode().GetFeatureLevel() == FeatureLevel
	})
	st, err := h.node.Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.GetFeatureLevel() != FeatureLevel || st.GetNodes()[0].GetFeatureLevel() != FeatureLevel || st.GetNodes()[0].GetVersion() != "v-test" {
		t.Fatalf("status: level %d, node %v", st.GetFeatureLevel(), st.GetNodes()[0])
	}

	s := newState()
	s.put(api.Wrap(&pb.Node{Id: "new", FeatureLevel: FeatureLevel + 1}))
	if got := clusterFeatureLevel(s); got != FeatureLevel {
		t.Fatalf("a newer host alone: level %d, want this release's %d", got, FeatureLevel)
	}
	s.put(api.Wrap(&pb.Node{Id: "old"})) // a release before levels
	if got := clusterFeatureLevel(s); got != 1 {
		t.Fatalf("with a host of a release before levels: level %d, want 1", got)
	}
}
