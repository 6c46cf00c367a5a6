package consensus

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Every host records its version and feature level; the cluster's level
// is the lowest, and a host of a release before levels counts as 1.
func TestFeatureLevels(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
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

// A write that uses a feature of level 2 (an HTTPS check, closeOnDown, a
// dry run, a revision precondition) is refused, naming the feature and
// the host below the level, while a host of level 1 is in the cluster —
// whether its Node object says so or only the host itself when asked (a
// downgraded host whose release left its Node object alone) — and is
// accepted once every host is at level 2. Nothing refused is written.
func TestFeatureGateInMixedCluster(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	h1 := startHost(t, Config{NodeID: "n1", Version: "v-new"})
	hosts := []*testHost{h1}
	join := func(id string, level uint32, dir string) *testHost {
		tok, err := h1.node.CreateJoinToken(ctxT(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		version := "v-new"
		if level == 1 {
			version = "v-old"
		}
		return startHost(t, Config{NodeID: id, Join: h1.cfg.APIAddr, Token: tok.Token, Version: version, featureLevel: level, DataDir: dir})
	}
	hosts = append(hosts, join("n2", 0, ""))
	oldDir := t.TempDir()
	old := join("n3", 1, oldDir)
	hosts = append(hosts, old)
	waitFor(t, "3 voters", func() bool { return h1.node.voters() == 3 })
	waitFor(t, "n3's Node object of version v-old", func() bool {
		o, err := h1.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindNode, Name: "n3"})
		return err == nil && o.GetNode().GetVersion() == "v-old"
	})
	if got := h1.node.ClusterFeatureLevel(); got != 1 {
		t.Fatalf("cluster level %d with a host of level 1", got)
	}

	apply(t, h1.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	base := lb("acme", "shop", "public")
	https := lb("acme", "shop", "public")
	https.GetLoadBalancer().Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{Path: "/readyz", InsecureSkipVerify: true}}
	closing := lb("acme", "shop", "public")
	closing.GetLoadBalancer().Pools["web"].HealthCheck = &pb.HealthCheck{Tcp: &pb.TCPCheck{}, CloseOnDown: true}
	dual := lb("acme", "shop", "public")
	dual.GetLoadBalancer().Vip.Families, dual.GetLoadBalancer().Vip.FamilyPolicy = []string{"ipv4", "ipv6"}, "prefer"
	ref := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}
	writes := []struct {
		name, field string
		fw          func() *pb.ForwardRequest
	}{
		{"https check", "pools.web.healthCheck.https", func() *pb.ForwardRequest {
			return forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{https}}, false)
		}},
		{"dry run", api.FeatureDryRun, func() *pb.ForwardRequest {
			return forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{https}, DryRun: true}, false)
		}},
		{"dry-run delete", api.FeatureDryRun, func() *pb.ForwardRequest {
			return forwardDelete(&pb.DeleteRequest{Ref: ref, DryRun: true}, false)
		}},
		{"precondition", api.FeatureCheckedWrites, func() *pb.ForwardRequest {
			at := mustGet(t, h1.node, ref).GetLoadBalancer().GetMeta().GetRevision()
			return forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{base}, Preconditions: []*pb.RevisionPrecondition{{Ref: ref, Revision: at}}}, false)
		}},
		{"dual stack", "vip.families", func() *pb.ForwardRequest {
			return forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{dual}}, false)
		}},
		{"closeOnDown", "pools.web.healthCheck.closeOnDown", func() *pb.ForwardRequest {
			return forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{closing}}, false)
		}},
	}
	refused := func(stage string, wantHost string) {
		t.Helper()
		l := leaderOf(t, hosts)
		rev := l.node.Revision()
		for _, w := range writes {
			// Through each host (a follower checks before it forwards),
			// and straight into the leader's Forward as a host of an
			// earlier release sends it, unchecked.
			for _, h := range hosts {
				_, err := h.node.write(ctxT(t), w.fw())
				if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), w.field) || !strings.Contains(err.Error(), wantHost) {
					t.Fatalf("%s: %s through %s: %v, want a refusal naming %s and %s", stage, w.name, h.cfg.NodeID, err, w.field, wantHost)
				}
			}
			// A leader that lost its leadership under load since
			// leaderOf says so (Unavailable): ask the next one.
			var err error
			waitFor(t, "the leader to answer the forwarded write", func() bool {
				_, err = leaderOf(t, hosts).node.ClusterService().Forward(ctxT(t), w.fw())
				s, _ := status.FromError(err)
				return s.Code() != codes.Unavailable
			})
			if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), wantHost) {
				t.Fatalf("%s: %s forwarded by an older host: %v", stage, w.name, err)
			}
		}
		if got := l.node.Revision(); got != rev {
			t.Fatalf("%s: revision moved from %d to %d", stage, rev, got)
		}
		// Writes without those features go on.
		apply(t, hosts[1].node, base)
	}
	refused("level 1", "n3 (version v-old) is at level 1")
	// A host that does not answer counts with its recorded level.
	cfg := old.cfg
	old.stop()
	hosts = hosts[:2]
	refused("level 1 recorded, host down", "n3 (version v-old) is at level 1")
	old = startHost(t, cfg)
	hosts = append(hosts, old)

	// A downgraded host whose release does not rewrite its Node object:
	// the record says 2, the host says 1 when asked.
	rec := clone(mustGet(t, h1.node, &pb.ObjectRef{Kind: api.KindNode, Name: "n3"})).GetNode()
	rec.FeatureLevel, rec.Version = FeatureLevel, "v-new"
	if _, err := h1.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(rec)}}, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the recorded level to read 2", func() bool { return h1.node.ClusterFeatureLevel() == FeatureLevel })
	refused("live level 1", "n3 (version v-old) is at level 1")
	if st, err := h1.node.Status(ctxT(t)); err != nil || st.GetFeatureLevel() != 1 {
		t.Fatalf("cluster status with a downgraded host: level %d (%v), want 1", st.GetFeatureLevel(), err)
	}

	// n3 upgraded: same data dir, this release's level.
	old.stop()
	cfg.featureLevel, cfg.Version = 0, "v-new"
	hosts[2] = startHost(t, cfg)
	waitFor(t, "n3 to report level 2", func() bool { return hosts[2].node.health().GetFeatureLevel() == FeatureLevel })
	l := leaderOf(t, hosts)
	for _, w := range writes {
		if _, err := hosts[2].node.write(ctxT(t), w.fw()); err != nil {
			t.Fatalf("%s at level %d everywhere: %v", w.name, FeatureLevel, err)
		}
	}
	if st, err := h1.node.Status(ctxT(t)); err != nil || st.GetFeatureLevel() != FeatureLevel {
		t.Fatalf("cluster status after the upgrade: level %d (%v), want %d", st.GetFeatureLevel(), err, FeatureLevel)
	}
	got := mustGet(t, l.node, ref).GetLoadBalancer().GetPools()["web"].GetHealthCheck()
	if !got.GetCloseOnDown() {
		t.Fatalf("the closeOnDown write was not stored: %v", got)
	}
}

func mustGet(t *testing.T, n *Node, ref *pb.ObjectRef) *pb.Object {
	t.Helper()
	o, err := n.Get(ctxT(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A write that uses a level-2 feature asks every host for its level
// once; later ones ask nobody while the membership stays (each host at
// level 2 answered), and a change of a Node object makes them ask again.
func TestFeatureLevelsAskedOncePerMembership(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	h1 := startHost(t, Config{NodeID: "n1", Version: "v-new"})
	hosts := []*testHost{h1}
	for _, id := range []string{"n2", "n3"} {
		tok, err := h1.node.CreateJoinToken(ctxT(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, startHost(t, Config{NodeID: id, Join: h1.cfg.APIAddr, Token: tok.Token, Version: "v-new"}))
	}
	waitFor(t, "3 voters", func() bool { return h1.node.voters() == 3 })
	waitFor(t, "3 Node objects at level 2", func() bool { return h1.node.ClusterFeatureLevel() == FeatureLevel && len(nodeObjects(t, h1.node)) == 3 })
	apply(t, h1.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	https := lb("acme", "shop", "public")
	https.GetLoadBalancer().Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{Path: "/readyz", InsecureSkipVerify: true}}
	asked := func() int64 {
		var n int64
		for _, h := range hosts {
			n += h.node.features.asked.Load()
		}
		return n
	}
	write := func() {
		t.Helper()
		l := leaderOf(t, hosts)
		for _, h := range hosts {
			if h == l {
				continue
			}
			if _, err := h.node.write(ctxT(t), forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{https}}, false)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	before := asked()
	write()
	if got := asked() - before; got == 0 {
		t.Fatal("the first level-2 write asked no host for its level")
	}
	// Later writes through the same host ask nobody (Raft observations of
	// a host failing would; none should happen in this quiet cluster, but
	// a loaded machine may miss heartbeats: allow two rounds of 6).
	before = asked()
	for range 10 {
		write()
	}
	if got := asked() - before; got > 12 {
		t.Errorf("10 more level-2 writes asked %d hosts for their level; want none (at most two rounds of 6)", got)
	}
	// A Node object changes: the membership is asked again.
	rec := clone(mustGet(t, h1.node, &pb.ObjectRef{Kind: api.KindNode, Name: "n3"})).GetNode()
	rec.Version = "v-newer"
	if _, err := h1.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(rec)}}, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n3's record on every host", func() bool {
		for _, h := range hosts {
			if mustGet(t, h.node, &pb.ObjectRef{Kind: api.KindNode, Name: "n3"}).GetNode().GetVersion() != "v-newer" {
				return false
			}
		}
		return true
	})
	before = asked()
	write()
	if got := asked() - before; got == 0 {
		t.Error("after a Node object changed, a level-2 write asked no host")
	}
}

func nodeObjects(t *testing.T, n *Node) []*pb.Object {
	t.Helper()
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.st.list(api.KindNode, "")
}
