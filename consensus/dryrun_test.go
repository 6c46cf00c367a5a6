package consensus

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A dry run goes through the leader's whole write path (validation against
// the state, stamps, allocation) and writes nothing.
func TestDryRunChecksAndWritesNothing(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	rev := n.Revision()
	// Clients use dry runs only when every host lists the feature.
	st, err := n.Status(ctxT(t))
	if err != nil || len(st.GetNodes()) != 1 || !slices.Contains(st.GetNodes()[0].GetFeatures(), api.FeatureDryRun) {
		t.Fatalf("status does not list %q: %v %v", api.FeatureDryRun, st, err)
	}
	noWrite := func(t *testing.T) {
		t.Helper()
		if got := n.Revision(); got != rev {
			t.Fatalf("a dry run moved the revision from %d to %d", rev, got)
		}
	}

	t.Run("create is stamped and allocated but not stored", func(t *testing.T) {
		resp, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{lb("acme", "cart", "public"), tenant("acme", "public")}, DryRun: true}, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(resp.GetResults()); got != "[created unchanged]" || !resp.GetDryRun() {
			t.Fatalf("results %s, dry run %v", got, resp.GetDryRun())
		}
		cart := resp.GetObjects()[0].GetLoadBalancer()
		if cart.GetStatus().GetAddress() != "192.0.2.2" || cart.GetMeta().GetGeneration() != 1 {
			t.Fatalf("dry-run object not stamped as a write would be: %v", cart)
		}
		noWrite(t)
		if _, err := n.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "cart"}); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("dry-run object stored: %v", err)
		}
		// The address a dry run showed is still free for a real write.
		if got := apply(t, n, lb("acme", "cart", "public")).Objects[0].GetLoadBalancer().GetStatus().GetAddress(); got != "192.0.2.2" {
			t.Fatalf("address after the dry run: %s", got)
		}
		if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "cart"}}, false); err != nil {
			t.Fatal(err)
		}
		rev = n.Revision()
	})
	t.Run("update", func(t *testing.T) {
		o := lb("acme", "shop", "public")
		o.GetLoadBalancer().Listeners[0].Port = 8080
		resp, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{o}, DryRun: true}, false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetResults()[0] != "configured" || resp.GetObjects()[0].GetLoadBalancer().GetMeta().GetGeneration() != 2 {
			t.Fatalf("got %v %v", resp.GetResults(), resp.GetObjects()[0])
		}
		noWrite(t)
		stored, err := n.Get(ctxT(t), &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"})
		if err != nil || stored.GetLoadBalancer().GetListeners()[0].GetPort() != 80 {
			t.Fatalf("stored object changed by a dry run: %v %v", stored, err)
		}
	})
	t.Run("refused against the state", func(t *testing.T) {
		_, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{pool("other", "192.0.2.8/29")}, DryRun: true}, false)
		if !errors.Is(err, api.ErrConflict) {
			t.Fatalf("overlapping pool in a dry run: %v", err)
		}
		noWrite(t)
	})
	t.Run("delete", func(t *testing.T) {
		ref := &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}
		if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: ref, DryRun: true}, false); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("dry-run delete of a tenant in use: %v", err)
		}
		lbRef := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}
		resp, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: lbRef, DryRun: true}, false)
		if err != nil || !resp.GetDryRun() {
			t.Fatalf("dry-run delete: %v %v", resp, err)
		}
		noWrite(t)
		if _, err := n.Get(ctxT(t), lbRef); err != nil {
			t.Fatalf("dry-run delete removed the object: %v", err)
		}
	})
}
