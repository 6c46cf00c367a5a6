package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestSingleNodeWrites(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	resp := apply(t, n, pool("public", "192.0.2.0/28", "2001:db8:10::/124"), tenant("acme", "public"), lb("acme", "shop", "public"))
	if got := fmt.Sprint(resp.Results); got != "[created created created]" {
		t.Fatalf("results %s", got)
	}
	// Objects come back in request order, stamped.
	shop := resp.Objects[2].GetLoadBalancer()
	if shop.GetStatus().GetAddress() != "192.0.2.1" || shop.GetMeta().GetGeneration() != 1 || shop.GetMeta().GetRevision() == 0 {
		t.Fatalf("shop not stamped: %v", shop)
	}

	t.Run("idempotent", func(t *testing.T) {
		rev := n.Revision()
		resp := apply(t, n, pool("public", "192.0.2.0/28", "2001:db8:10::/124"), tenant("acme", "public"), lb("acme", "shop", "public"))
		if got := fmt.Sprint(resp.Results); got != "[unchanged unchanged unchanged]" {
			t.Fatalf("results %s", got)
		}
		if n.Revision() != rev {
			t.Fatal("an unchanged apply moved the revision")
		}
	})
	t.Run("update keeps address and bumps generation", func(t *testing.T) {
		o := lb("acme", "shop", "public")
		o.GetLoadBalancer().Listeners[0].Port = 8080
		resp := apply(t, n, o)
		got := resp.Objects[0].GetLoadBalancer()
		if resp.Results[0] != "configured" || got.GetStatus().GetAddress() != "192.0.2.1" || got.GetMeta().GetGeneration() != 2 {
			t.Fatalf("got %s %v", resp.Results[0], got)
		}
		if !got.GetMeta().GetCreated().AsTime().Equal(shop.GetMeta().GetCreated().AsTime()) {
			t.Fatal("update changed the creation time")
		}
	})
	t.Run("explicit IPv6 address", func(t *testing.T) {
		o := lb("acme", "v6", "public")
		o.GetLoadBalancer().Vip = &pb.VIPRequest{Pool: "public", Address: "2001:db8:10::5"}
		if got := apply(t, n, o).Objects[0].GetLoadBalancer().GetStatus().GetAddress(); got != "2001:db8:10::5" {
			t.Fatalf("address %s", got)
		}
		clash := lb("acme", "clash", "public")
		clash.GetLoadBalancer().Vip = &pb.VIPRequest{Pool: "public", Address: "2001:db8:10::5"}
		_, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{clash}}, false)
		if !errors.Is(err, api.ErrConflict) {
			t.Fatalf("conflicting request: %v", err)
		}
	})

	bad := []struct {
		name string
		req  *pb.ApplyRequest
		want error
	}{
		{"create existing", &pb.ApplyRequest{Objects: []*pb.Object{tenant("acme", "public")}, Mode: pb.ApplyMode_APPLY_MODE_CREATE}, api.ErrExists},
		{"update missing", &pb.ApplyRequest{Objects: []*pb.Object{tenant("nobody", "public")}, Mode: pb.ApplyMode_APPLY_MODE_UPDATE}, api.ErrNotFound},
		{"node kind", &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(&pb.Node{Id: "x"})}}, api.ErrForbidden},
		{"empty", &pb.ApplyRequest{}, api.ErrInvalid},
		{"duplicate in one request", &pb.ApplyRequest{Objects: []*pb.Object{tenant("b", "public"), tenant("b", "public")}}, api.ErrInvalid},
		{"overlapping pool", &pb.ApplyRequest{Objects: []*pb.Object{pool("other", "192.0.2.8/29")}}, api.ErrConflict},
		{"bad member, with a valid object", &pb.ApplyRequest{Objects: []*pb.Object{tenant("c", "public"), func() *pb.Object {
			o := lb("acme", "evil", "public")
			o.GetLoadBalancer().Pools["web"].Members[0].Address = "192.168.1.1:80"
			return o
		}()}}, api.ErrInvalid},
	}
	for _, tt := range bad {
		t.Run("refused/"+tt.name, func(t *testing.T) {
			rev := n.Revision()
			_, err := n.Apply(ctxT(t), tt.req, false)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if n.Revision() != rev {
				t.Fatal("a refused write changed the state")
			}
		})
	}

	t.Run("read and delete", func(t *testing.T) {
		o, err := n.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"})
		if err != nil || o.GetLoadBalancer().GetName() != "shop" {
			t.Fatalf("get: %v %v", o, err)
		}
		objs, _, err := n.List(ctxT(t), api.KindLoadBalancer, "acme")
		if err != nil || len(objs) != 2 {
			t.Fatalf("list: %d %v", len(objs), err)
		}
		if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}}, false); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("deleting a tenant with load balancers: %v", err)
		}
		for _, name := range []string{"shop", "v6"} {
			if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: name}}, false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := n.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("deleted object still there: %v", err)
		}
		// The freed address is allocated again.
		if got := apply(t, n, lb("acme", "again", "public")).Objects[0].GetLoadBalancer().GetStatus().GetAddress(); got != "192.0.2.1" {
			t.Fatalf("freed address not reused: %s", got)
		}
	})
}

func TestGroupCommitAndWatch(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/24"), tenant("acme", "public"))
	start := n.Revision()
	w := n.Watch(start + 1)
	lastIndex := n.r().LastIndex()

	const writers = 64
	var wg sync.WaitGroup
	addrs := make([]string, writers)
	errs := make([]error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{lb("acme", fmt.Sprintf("lb%02d", i), "public")}}, false)
			errs[i] = err
			if err == nil {
				addrs[i] = resp.Objects[0].GetLoadBalancer().GetStatus().GetAddress()
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, a := range addrs {
		if errs[i] != nil {
			t.Fatalf("write %d: %v", i, errs[i])
		}
		if seen[a] {
			t.Fatalf("address %s allocated twice", a)
		}
		seen[a] = true
	}
	entries := n.r().LastIndex() - lastIndex
	if entries >= writers {
		t.Errorf("%d concurrent writes took %d log entries; want them batched", writers, entries)
	}
	t.Logf("%d concurrent writes in %d log entries", writers, entries)

	// The watcher sees every change exactly once, revisions in order.
	got := map[string]int{}
	want := start + 1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(got) < writers {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch: %v after %d changes", err, len(got))
		}
		if ev.Reset || ev.Revision != want {
			t.Fatalf("event revision %d reset=%v, want %d", ev.Revision, ev.Reset, want)
		}
		want++
		for _, c := range ev.Changes {
			got[c.Ref.GetName()]++
		}
	}
	for name, c := range got {
		if c != 1 {
			t.Fatalf("%s seen %d times", name, c)
		}
	}
}

func TestWatchLaggingWatcherGetsReset(t *testing.T) {
	f := newFSM(testLogger())
	w := f.hub.watch(1)
	f.Apply(entry(t, 1, commandVersion, puts(pool("p0", "192.0.2.0/30"))))
	for i := 1; i < 1100; i++ {
		f.Apply(entry(t, uint64(i+1), commandVersion, puts(pool(fmt.Sprintf("p%d", i), fmt.Sprintf("10.%d.%d.0/30", i/256, i%256)))))
	}
	ev, err := w.Next(context.Background())
	if err != nil || !ev.Reset || ev.Revision != 1100 || len(ev.Objects) != 1100 {
		t.Fatalf("want a reset at 1100 with 1100 objects, got reset=%v rev=%d objects=%d err=%v", ev.Reset, ev.Revision, len(ev.Objects), err)
	}
	// From the reset on, events follow one by one.
	f.Apply(entry(t, 2000, commandVersion, puts(pool("last", "203.0.113.0/30"))))
	ev, _ = w.Next(context.Background())
	if ev.Reset || ev.Revision != 1101 {
		t.Fatalf("after reset: rev %d reset=%v", ev.Revision, ev.Reset)
	}
	// A new watcher from 0 starts with the whole state.
	ev, _ = f.hub.watch(0).Next(context.Background())
	if !ev.Reset || ev.Revision != 1101 || len(ev.Objects) != 1101 {
		t.Fatalf("watch(0): reset=%v rev=%d objects=%d", ev.Reset, ev.Revision, len(ev.Objects))
	}
}

// threeHosts forms a cluster through join tokens, as operators do.
func threeHosts(t testing.TB) []*testHost {
	t.Helper()
	h1 := startHost(t, Config{NodeID: "n1"})
	hosts := []*testHost{h1}
	for _, id := range []string{"n2", "n3"} {
		tok, err := h1.node.CreateJoinToken(ctxT(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, startHost(t, Config{NodeID: id, Join: h1.cfg.APIAddr, Token: tok.Token}))
	}
	waitFor(t, "3 voters", func() bool { return h1.node.voters() == 3 })
	return hosts
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leaderOf(t testing.TB, hosts []*testHost) *testHost {
	t.Helper()
	var l *testHost
	waitFor(t, "a leader", func() bool {
		for _, h := range hosts {
			if h.srv != nil && h.node.IsLeader() {
				l = h
				return true
			}
		}
		return false
	})
	return l
}

func TestClusterJoinForwardRemove(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	leader := leaderOf(t, hosts)
	var follower *testHost
	for _, h := range hosts {
		if h != leader {
			follower = h
		}
	}
	// A write through a follower is forwarded and visible everywhere.
	apply(t, follower.node, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	for _, h := range hosts {
		o, err := h.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"})
		if err != nil || o.GetLoadBalancer().GetStatus().GetAddress() != "192.0.2.1" {
			t.Fatalf("%s: %v %v", h.cfg.NodeID, o, err)
		}
	}
	// A dry run through a follower is checked on the leader and written nowhere.
	dry, err := follower.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{lb("acme", "dry", "public")}, DryRun: true}, false)
	if err != nil || !dry.GetDryRun() || dry.GetObjects()[0].GetLoadBalancer().GetStatus().GetAddress() != "192.0.2.2" {
		t.Fatalf("forwarded dry run: %v %v", dry, err)
	}
	for _, h := range hosts {
		if _, err := h.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "dry"}); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("%s stored a dry run: %v", h.cfg.NodeID, err)
		}
	}
	// A stale revision precondition is checked on the leader and comes
	// back through forwarding as ErrChanged.
	stale := []*pb.RevisionPrecondition{{Ref: &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}, Revision: 1 << 40}}
	_, err = follower.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{tenant("acme", "public")}, Preconditions: stale}, false)
	if !errors.Is(err, api.ErrChanged) || status.Code(err) != codes.Aborted {
		t.Fatalf("forwarded stale precondition: %v", err)
	}
	// Validation errors come back through forwarding unchanged.
	_, err = follower.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{pool("x", "192.0.2.4/30")}}, false)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("forwarded validation error: %v", err)
	}

	st, err := follower.node.Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 3 || st.LeaderId != leader.cfg.NodeID {
		t.Fatalf("status: %v", st)
	}
	for _, ns := range st.Nodes {
		if !ns.Healthy || ns.Suffrage != "voter" {
			t.Fatalf("node not healthy voter: %v", ns)
		}
	}

	// Remove a follower through the other follower.
	var other *testHost
	for _, h := range hosts {
		if h != leader && h != follower {
			other = h
		}
	}
	if err := other.node.RemoveNode(ctxT(t), follower.cfg.NodeID); err != nil {
		t.Fatal(err)
	}
	if got := leader.node.voters(); got != 2 {
		t.Fatalf("voters after remove: %d", got)
	}
	if _, err := leader.node.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindNode, Name: follower.cfg.NodeID}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("removed node still recorded: %v", err)
	}
}

func TestJoinRefusesBadTokens(t *testing.T) {
	h1 := startHost(t, Config{NodeID: "n1"})
	good, err := h1.node.CreateJoinToken(ctxT(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := pki.ParseJoinToken(good.Token)
	forged := pki.JoinToken{CAFingerprint: tok.CAFingerprint, ID: tok.ID, Secret: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
	otherCA, _ := pki.NewCA("other")
	wrongCA := pki.JoinToken{CAFingerprint: otherCA.Fingerprint(), ID: tok.ID, Secret: tok.Secret}
	for name, token := range map[string]string{"forged secret": forged.String(), "other cluster": wrongCA.String(), "garbage": "hello"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := Open(ctx, Config{NodeID: "intruder", DataDir: t.TempDir(), RaftAddr: freeAddr(t), APIAddr: freeAddr(t), Join: h1.cfg.APIAddr, Token: token, Logger: testLogger()})
			if err == nil {
				t.Fatal("joined with a bad token")
			}
		})
	}
	if h1.node.voters() != 1 {
		t.Fatal("configuration changed")
	}
}

func TestAPIRequiresRoles(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	ca := h.node.CA()
	call := func(id pki.Identity) error {
		var cert, key []byte
		if id.Role != "" {
			cert, key, _ = ca.Issue(pki.IssueRequest{Identity: id})
		}
		tc, err := pki.ClientTLS(ca.CertPEM, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(h.cfg.APIAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewAdminClient(conn).List(ctxT(t), &pb.ListRequest{Kind: "tenant"})
		return err
	}
	if err := call(pki.Identity{Role: pki.RoleAdmin, Name: "ops"}); err != nil {
		t.Fatalf("admin refused: %v", err)
	}
	if code := status.Code(call(pki.Identity{Role: pki.RoleTenant, Name: "acme"})); code != codes.PermissionDenied {
		t.Fatalf("tenant certificate on the admin API: %v", code)
	}
	if code := status.Code(call(pki.Identity{})); code != codes.Unauthenticated {
		t.Fatalf("no certificate on the admin API: %v", code)
	}
}

func TestApplyMutualReferencesInOneWrite(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	p := pool("private", "198.51.100.0/28")
	p.GetVipPool().Tenants = []string{"acme"}
	resp := apply(t, h.node, tenant("acme", "private"), p, lb("acme", "shop", "private"))
	if got := fmt.Sprint(resp.Results); got != "[created created created]" {
		t.Fatalf("results %s", got)
	}
	// The same write with a tenant the pool does not admit is refused whole.
	q := pool("closed", "203.0.113.0/28")
	q.GetVipPool().Tenants = []string{"acme"}
	rev := h.node.Revision()
	if _, err := h.node.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{q, tenant("other", "closed"), lb("other", "x", "closed")}}, false); err == nil {
		t.Fatal("a tenant used a pool that does not admit it")
	}
	if h.node.Revision() != rev {
		t.Fatal("refused write changed the state")
	}
}

// TestFollowersApplyAWriteAtOnce: with a commit timeout of 5s (the
// leader's idle AppendEntries, which would otherwise tell the followers
// that an entry committed, 5-10s after it), a write is applied by both
// followers within 3s of its commit on the leader: the barrier the leader
// appends after each write carries the commit index at once. (3s leaves
// room for the followers' fsyncs on a loaded disk under -race.)
func TestFollowersApplyAWriteAtOnce(t *testing.T) {
	old := commitTimeout
	commitTimeout = 5 * time.Second
	t.Cleanup(func() { commitTimeout = old })
	hosts := threeHosts(t)
	l := leaderOf(t, hosts)
	// Every host has caught up with the joins before the writes are timed.
	first := apply(t, l.node, pool("p", "192.0.2.100/32"))
	waitFor(t, "every host at the first write", func() bool {
		for _, h := range hosts {
			if h.node.Revision() < first.GetRevision() {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		resp := apply(t, l.node, pool(fmt.Sprintf("p%d", i), fmt.Sprintf("192.0.2.%d/32", i)))
		start := time.Now()
		for _, h := range hosts {
			for h.node.Revision() < resp.GetRevision() {
				if time.Since(start) > 3*time.Second {
					t.Fatalf("write %d: %s at revision %d after %s, want %d; a follower waits for the commit timeout",
						i, h.cfg.NodeID, h.node.Revision(), time.Since(start).Round(time.Millisecond), resp.GetRevision())
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}
