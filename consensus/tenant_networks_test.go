package consensus

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestTenantNetworksOverlap: a write that makes two tenants' networks
// overlap is refused with both prefixes and the other tenant named, and
// changes nothing; an overlap a state written by an older release holds
// is shown by the cluster's status and does not stop either tenant from
// being changed otherwise.
func TestTenantNetworksOverlap(t *testing.T) {
	h := startHost(t, Config{NodeID: "n1"})
	n := h.node
	apply(t, n, pool("public", "192.0.2.0/28"), tenant("acme", "public"))

	nets := func(name string, networks ...string) *pb.Object {
		return api.Wrap(&pb.Tenant{Name: name, Domains: []string{name + ".example"}, Networks: networks, Pools: []string{"public"}})
	}
	refused := []struct {
		name string
		objs []*pb.Object
		want string
	}{
		{"inside another", []*pb.Object{nets("beta", "10.20.5.0/24")}, "networks[0]: network 10.20.5.0/24 overlaps 10.20.0.0/16 of tenant acme"},
		{"covering another", []*pb.Object{nets("beta", "10.99.0.0/16", "10.0.0.0/8")}, "networks[1]: network 10.0.0.0/8 overlaps 10.20.0.0/16 of tenant acme"},
		{"two new tenants in one write", []*pb.Object{nets("beta", "10.40.0.0/16"), nets("gamma", "10.40.1.0/24")}, "Tenant beta: networks[0]: network 10.40.0.0/16 overlaps 10.40.1.0/24 of tenant gamma"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			rev := n.Revision()
			_, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: tt.objs}, false)
			if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a conflict with %q", err, tt.want)
			}
			if n.Revision() != rev {
				t.Fatal("a refused write changed the state")
			}
		})
	}

	t.Run("update of a tenant", func(t *testing.T) {
		apply(t, n, nets("beta", "10.30.0.0/16"))
		rev := n.Revision()
		_, err := n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{nets("acme", "10.20.0.0/16", "10.30.0.0/24")}}, false)
		if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "networks[1]: network 10.30.0.0/24 overlaps 10.30.0.0/16 of tenant beta") {
			t.Fatalf("got %v", err)
		}
		if n.Revision() != rev {
			t.Fatal("a refused write changed the state")
		}
		if _, err := n.Delete(ctxT(t), &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindTenant, Name: "beta"}}, false); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stored by an older release", func(t *testing.T) {
		// Written as a host of an earlier release committed it: the log
		// entry is applied without the proposer's rules.
		txn := &pb.Txn{Ops: []*pb.Op{{Op: &pb.Op_Put{Put: nets("old", "10.20.8.0/24")}}}}
		data, err := proto.Marshal(&pb.Command{Version: commandVersion, Stamped: timestamppb.Now(), Txns: []*pb.Txn{txn}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.r().Apply(data, 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		st, err := n.Status(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		want := "tenant acme: network 10.20.0.0/16 overlaps 10.20.8.0/24 of tenant old"
		if len(st.GetProblems()) != 1 || !strings.HasPrefix(st.GetProblems()[0], want) {
			t.Fatalf("problems %q, want %q", st.GetProblems(), want)
		}
		// Both tenants may still be changed; a new overlap is refused.
		o := nets("old", "10.20.8.0/24")
		o.GetTenant().Domains = append(o.GetTenant().Domains, "old.test")
		apply(t, n, o)
		a := tenant("acme", "public")
		a.GetTenant().Domains = append(a.GetTenant().Domains, "acme.test")
		apply(t, n, a)
		_, err = n.Apply(ctxT(t), &pb.ApplyRequest{Objects: []*pb.Object{nets("old", "10.20.8.0/24", "10.20.9.0/24")}}, false)
		if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "network 10.20.9.0/24 overlaps 10.20.0.0/16 of tenant acme") {
			t.Fatalf("new overlap: %v", err)
		}
		// Narrowed apart, the problem goes.
		apply(t, n, nets("old", "10.21.8.0/24"))
		if st, err := n.Status(ctxT(t)); err != nil || len(st.GetProblems()) != 0 {
			t.Fatalf("problems %q after narrowing: %v", st.GetProblems(), err)
		}
	})
}
