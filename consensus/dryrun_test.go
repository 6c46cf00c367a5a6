package consensus

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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

// Dry runs and writes with preconditions reach the leader in a case of
// ForwardRequest that releases without them do not know: such a leader
// finds no write in the request and refuses it, where in the apply or
// delete case it would ignore the new fields and write.
func TestCheckedWritesRefusedByLeadersThatDoNotKnowThem(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))
	rev := n.Revision()
	lbRef := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}
	changed := lb("acme", "shop", "public")
	changed.GetLoadBalancer().Listeners[0].Port = 8080
	// Every release knows these cases of ForwardRequest.write.
	oldCases := map[protowire.Number]bool{1: true, 2: true, 3: true, 5: true}
	for name, fw := range map[string]*pb.ForwardRequest{
		"dry-run apply":  forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{changed}, DryRun: true}, false),
		"dry-run delete": forwardDelete(&pb.DeleteRequest{Ref: lbRef, DryRun: true}, false),
		"precondition":   forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{changed}, Preconditions: []*pb.RevisionPrecondition{{Ref: lbRef, Revision: rev}}}, false),
	} {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(fw)
			if err != nil {
				t.Fatal(err)
			}
			for rest := b; len(rest) > 0; {
				num, typ, l := protowire.ConsumeTag(rest)
				if l < 0 {
					t.Fatal(protowire.ParseError(l))
				}
				if oldCases[num] {
					t.Fatalf("carried in field %d, which older releases read as a write", num)
				}
				m := protowire.ConsumeFieldValue(num, typ, rest[l:])
				rest = rest[l+m:]
			}
			// What a leader that does not know the case decodes: no write,
			// the request as unknown fields.
			old := &pb.ForwardRequest{}
			old.ProtoReflect().SetUnknown(b)
			if _, err := n.local(ctxT(t), old); !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("a request with no write this release knows: %v", err)
			}
			if got := n.Revision(); got != rev {
				t.Fatalf("revision moved from %d to %d", rev, got)
			}
		})
	}
	// The refusal of a release that predates checked writes (prepare finds
	// nothing to apply) is told apart from other refusals on the way back.
	older := api.ToStatus(fmt.Errorf("nothing to apply: %w", api.ErrInvalid))
	checked := forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{changed}, DryRun: true}, false)
	if !olderLeader(checked, older) || olderLeader(forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{changed}}, false), older) ||
		olderLeader(checked, api.ToStatus(fmt.Errorf("listeners[0].port: bad: %w", api.ErrInvalid))) {
		t.Fatal("olderLeader does not tell an older leader's refusal apart")
	}
	// The checked cases still do what they carry.
	if resp, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{changed}, DryRun: true}, false); err != nil || !resp.GetDryRun() || resp.GetResults()[0] != "configured" {
		t.Fatalf("dry run: %v %v", resp, err)
	}
	if got := n.Revision(); got != rev {
		t.Fatalf("revision moved from %d to %d", rev, got)
	}
}

// A write with a revision precondition is made only while the object is
// at that revision: a change in between (lost update) is refused with
// ErrChanged and nothing is written.
func TestRevisionPreconditions(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/28"), tenant("acme", "public"))
	ref := &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}
	read := func() uint64 {
		o, err := n.Get(ctxT(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		return o.GetTenant().GetMeta().GetRevision()
	}
	withDomain := func(d string) *pb.Object {
		o := tenant("acme", "public")
		o.GetTenant().Domains = append(o.GetTenant().Domains, d)
		return o
	}
	at := func(rev uint64) []*pb.RevisionPrecondition {
		return []*pb.RevisionPrecondition{{Ref: ref, Revision: rev}}
	}
	r0 := read()
	// Two writers read r0; the first wins.
	if _, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{withDomain("one.example")}, Mode: pb.ApplyMode_APPLY_MODE_UPDATE, Preconditions: at(r0)}, false); err != nil {
		t.Fatalf("write at the revision read: %v", err)
	}
	r1 := read()
	_, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{withDomain("two.example")}, Mode: pb.ApplyMode_APPLY_MODE_UPDATE, Preconditions: at(r0)}, false)
	if !errors.Is(err, api.ErrChanged) || !strings.Contains(err.Error(), fmt.Sprintf("Tenant acme changed since it was read (revision %d when read, now %d)", r0, r1)) {
		t.Fatalf("second writer: %v", err)
	}
	if s := api.ToStatus(err); status.Code(s) != codes.Aborted || !errors.Is(api.FromStatus(s), api.ErrChanged) {
		t.Fatalf("status of a failed precondition: %v", s)
	}
	if got := read(); got != r1 {
		t.Fatalf("a refused write moved the tenant from revision %d to %d", r1, got)
	}
	o, _ := n.Get(ctxT(t), ref)
	if d := o.GetTenant().GetDomains(); !slices.Contains(d, "one.example") || slices.Contains(d, "two.example") {
		t.Fatalf("domains %v", d)
	}
	// A dry run checks the precondition too.
	if _, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{withDomain("two.example")}, DryRun: true, Preconditions: at(r0)}, false); !errors.Is(err, api.ErrChanged) {
		t.Fatalf("dry run with a stale precondition: %v", err)
	}
	// An object deleted since it was read.
	lbRef := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "shop"}
	apply(t, n, lb("acme", "shop", "public"))
	o, _ = n.Get(ctxT(t), lbRef)
	lbRev := o.GetLoadBalancer().GetMeta().GetRevision()
	if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: lbRef}, false); err != nil {
		t.Fatal(err)
	}
	_, err = n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{lb("acme", "shop", "public")}, Preconditions: []*pb.RevisionPrecondition{{Ref: lbRef, Revision: lbRev}}}, false)
	if !errors.Is(err, api.ErrChanged) || !strings.Contains(err.Error(), "was deleted") {
		t.Fatalf("write over a deleted object: %v", err)
	}
	if _, err := n.Get(ctxT(t), lbRef); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("refused write created the object: %v", err)
	}
}
