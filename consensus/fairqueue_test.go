package consensus

import (
	"fmt"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Writes waiting for the loop take turns by tenant: the small writes of a
// that came after five large writes of b go in the entry after b's first,
// not after all five; a large write goes alone, small ones share an entry,
// and each tenant's writes keep their order.
func TestWritesTakeTurnsByTenant(t *testing.T) {
	t.Parallel()
	q := newFairQueue()
	w := func(class, name string, size int) *writeReq {
		return &writeReq{class: class, size: size, fw: &pb.ForwardRequest{Write: &pb.ForwardRequest_Delete{Delete: &pb.DeleteRequest{Ref: &pb.ObjectRef{Name: name}}}}}
	}
	for i := range 5 {
		q.push(w("b", fmt.Sprintf("b%d", i), 1_500_000))
	}
	for i := range 20 {
		q.push(w("a", fmt.Sprintf("a%d", i), 300))
	}
	q.push(w(classAdmin, "admin", 200))
	names := func(rs []*writeReq) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.fw.GetDelete().GetRef().GetName())
		}
		return out
	}
	var got [][]string
	for q.len() > 0 {
		got = append(got, names(q.batch()))
	}
	// b's writes came first: b0 leads, alone.
	if len(got) < 3 || fmt.Sprint(got[0]) != "[b0]" {
		t.Fatalf("entries %v, want b's first large write alone first", got)
	}
	var as []string
	for _, name := range got[1] {
		if name != "admin" {
			as = append(as, name)
		}
	}
	if len(got[1]) != 21 || len(as) != 20 || as[0] != "a0" || as[19] != "a19" {
		t.Fatalf("second entry %v, want a's 20 writes in order and the admin's, before b's next", got[1])
	}
	for i, e := range got[2:] {
		if want := fmt.Sprintf("[b%d]", i+1); fmt.Sprint(e) != want {
			t.Fatalf("entry %d is %v, want %s", i+2, e, want)
		}
	}
}

// A write's class is the tenant of what it writes; the operators' writes
// of pools and tenants, and the cluster's own, have classes of their own.
func TestWriteClass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		fw   *pb.ForwardRequest
		want string
	}{
		{forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(&pb.LoadBalancer{Tenant: "acme", Name: "x"})}}, false), "acme"},
		{forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(&pb.LoadBalancer{Tenant: "acme", Name: "x"})}, DryRun: true}, false), "acme"},
		{forwardDelete(&pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "beta", Name: "x"}}, false), "beta"},
		{forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(&pb.Tenant{Name: "acme"})}}, false), classAdmin},
		{forwardApply(&pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(&pb.VIPPool{Name: "p"})}}, false), classAdmin},
		{&pb.ForwardRequest{Write: &pb.ForwardRequest_Txn{Txn: &pb.Txn{}}, Internal: true}, classInternal},
	} {
		if got := writeClass(c.fw); got != c.want {
			t.Errorf("writeClass(%v) = %q, want %q", c.fw, got, c.want)
		}
	}
}

// A tenant whose small writes come one at a time, each while the loop
// commits another's large write, leads every other batch: a never waits
// for two of b's large writes, and b is never starved by a's arriving
// anew (a class that led keeps its place while it has nothing waiting).
func TestATenantArrivingAnewWaitsForOneWriteAtMost(t *testing.T) {
	t.Parallel()
	q := newFairQueue()
	w := func(class, name string, size int) *writeReq {
		return &writeReq{class: class, size: size, fw: &pb.ForwardRequest{Write: &pb.ForwardRequest_Delete{Delete: &pb.DeleteRequest{Ref: &pb.ObjectRef{Name: name}}}}}
	}
	for i := range 4 {
		q.push(w("b", fmt.Sprintf("b%d", i), 1_500_000))
	}
	var got []string
	for i := range 4 {
		// a's next write arrives while the batch before is committed.
		q.push(w("a", fmt.Sprintf("a%d", i), 300))
		for _, r := range q.batch() {
			got = append(got, r.fw.GetDelete().GetRef().GetName())
		}
	}
	for q.len() > 0 {
		for _, r := range q.batch() {
			got = append(got, r.fw.GetDelete().GetRef().GetName())
		}
	}
	if want := "[b0 a0 a1 b1 a2 a3 b2 b3]"; fmt.Sprint(got) != want {
		t.Fatalf("writes committed in the order %v, want %s", got, want)
	}
}
