package consensus

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// addrCountingReader counts the addresses a reader hands out from
// usedAddresses.
type addrCountingReader struct {
	reader
	handed *int
}

func (c addrCountingReader) usedAddresses(from, to netip.Addr) []netip.Addr {
	out := c.reader.usedAddresses(from, to)
	*c.handed += len(out)
	return out
}

// bulkState holds a pool 10.255.0.0/16 and tenant acme with n load
// balancers at its first n addresses.
func bulkState(n int) *state {
	s := newState()
	s.put(api.Wrap(&pb.VIPPool{Name: "bulk", Cidrs: []string{"10.255.0.0/16"}, Mode: "static"}))
	s.put(api.Wrap(&pb.Tenant{Name: "acme", Networks: []string{"10.0.0.0/9"}, Pools: []string{"bulk"},
		Quotas: &pb.Quotas{LoadBalancers: uint32(4 * n), Addresses: uint32(4 * n), Listeners: uint32(4 * n), Members: uint32(8 * n)}}))
	for i := range n {
		lb := bulkLB(i)
		a := i + 1
		lb.Status = &pb.LoadBalancerStatus{Address: fmt.Sprintf("10.255.%d.%d", a>>8, a&255)}
		s.put(api.Wrap(lb))
	}
	return s
}

// bulkLB is load balancer svc-i of acme, with an address from the pool.
func bulkLB(i int) *pb.LoadBalancer {
	return &pb.LoadBalancer{Tenant: "acme", Name: fmt.Sprintf("svc-%05d", i), Vip: &pb.VIPRequest{Pool: "bulk"},
		Listeners: []*pb.Listener{{Port: 80, Protocol: "tcp", Pool: "web"}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: fmt.Sprintf("10.1.%d.%d:8080", i>>8&255, i&255)}}}}}
}

// TestBatchAllocationCostsWhatItAdds: one write of 256 new load balancers
// into a state of 10,000 is prepared and checked as the leader does
// (prepare, then checkTxn on an overlay) and reads the state's used
// addresses at most twice, not once per load balancer (2.56 million
// addresses handed out before); each gets its own free address, the
// lowest ones, as one-by-one writes would.
func TestBatchAllocationCostsWhatItAdds(t *testing.T) {
	const n, k = 10000, 256
	s := bulkState(n)
	handed := 0
	ov := newOverlay(addrCountingReader{reader: s, handed: &handed})
	var objs []*pb.Object
	for i := range k {
		objs = append(objs, api.Wrap(bulkLB(n+i)))
	}
	now := time.Unix(1700000000, 0)
	r := &writeReq{fw: forwardApply(&pb.ApplyRequest{Objects: objs}, false)}
	_, txn, err := prepare(r, ov, now)
	if err != nil {
		t.Fatal(err)
	}
	child := newOverlay(ov)
	if err := checkTxn(child, txn, now); err != nil {
		t.Fatal(err)
	}
	if handed > 2*n {
		t.Errorf("preparing and checking %d new load balancers read %d used addresses from a state of %d; want at most %d", k, handed, n, 2*n)
	}
	got := map[string]bool{}
	for _, op := range txn.GetOps() {
		a := op.GetPut().GetLoadBalancer().GetStatus().GetAddress()
		if got[a] {
			t.Fatalf("address %s allocated twice", a)
		}
		got[a] = true
	}
	for i := range k {
		a := n + i + 1
		if want := fmt.Sprintf("10.255.%d.%d", a>>8, a&255); !got[want] {
			t.Errorf("address %s not allocated; got %d addresses", want, len(got))
		}
	}
}

// TestOverlayAnswersFollowEverySet: an overlay that answers questions
// between its changes (and keeps its answers up to date) answers like an
// overlay that is asked only once, after the same changes: used
// addresses, address users and every tenant's usage, through puts,
// address moves, shared addresses, other tenants and deletions.
func TestOverlayAnswersFollowEverySet(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	const n = 300
	s := bulkState(n)
	s.put(api.Wrap(&pb.Tenant{Name: "beta", Networks: []string{"10.0.0.0/9"}, Pools: []string{"bulk"}}))
	rng := rand.New(rand.NewPCG(1, 2))
	first, last := netip.MustParseAddr("10.255.0.0"), netip.MustParseAddr("10.255.255.255")
	low, high := netip.MustParseAddr("10.255.0.100"), netip.MustParseAddr("10.255.1.200")
	addr := func() string { return fmt.Sprintf("10.255.%d.%d", rng.IntN(3), rng.IntN(256)) }
	for round := range 20 {
		live := newOverlay(s)
		var sets []func(*overlay)
		for step := range 60 {
			i := rng.IntN(n + 40)
			lb := bulkLB(i)
			if rng.IntN(3) == 0 {
				lb.Tenant = "beta"
			}
			ref := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: lb.GetTenant(), Name: lb.GetName()}
			var obj *pb.Object
			if rng.IntN(5) > 0 {
				lb.Status = &pb.LoadBalancerStatus{Address: addr()}
				obj = api.Wrap(lb)
			}
			set := func(o *overlay) { o.set(ref, obj) }
			set(live)
			sets = append(sets, set)
			// Ask between the changes, so the live overlay's answers are
			// kept and corrected.
			live.usedAddresses(first, last)
			live.usedAddresses(low, high)
			live.tenantUsage("acme")
			live.tenantUsage("beta")

			once := newOverlay(s)
			for _, f := range sets {
				f(once)
			}
			for _, r := range []addrRange{{first, last}, {low, high}} {
				if got, want := live.usedAddresses(r.from, r.to), once.usedAddresses(r.from, r.to); !slices.Equal(got, want) {
					t.Fatalf("round %d step %d: used addresses in %s-%s: %d kept up to date, %d computed once", round, step, r.from, r.to, len(got), len(want))
				}
			}
			for _, ten := range []string{"acme", "beta"} {
				if got, want := live.tenantUsage(ten), once.tenantUsage(ten); got != want {
					t.Fatalf("round %d step %d: usage of %s: %+v kept up to date, %+v computed once", round, step, ten, got, want)
				}
			}
			a := netip.MustParseAddr(addr())
			if got, want := live.addressUsers(a), once.addressUsers(a); !slices.Equal(got, want) {
				t.Fatalf("round %d step %d: users of %s: %d, want %d", round, step, a, len(got), len(want))
			}
		}
		// The usage computed once agrees with a state that applies the
		// same changes.
		committed := bulkState(n)
		committed.put(api.Wrap(&pb.Tenant{Name: "beta", Networks: []string{"10.0.0.0/9"}, Pools: []string{"bulk"}}))
		for _, ref := range live.order {
			obj, _ := live.lookup(ref.Kind, keyOf(ref))
			if obj == nil {
				committed.remove(ref)
			} else {
				committed.put(obj)
			}
		}
		for _, ten := range []string{"acme", "beta"} {
			if got, want := live.tenantUsage(ten), committed.tenantUsage(ten); got != want {
				t.Fatalf("round %d: usage of %s: %+v in the overlay, %+v once committed", round, ten, got, want)
			}
		}
		if got, want := live.usedAddresses(first, last), committed.usedAddresses(first, last); !slices.Equal(got, want) {
			t.Fatalf("round %d: %d used addresses in the overlay, %d once committed", round, len(got), len(want))
		}
	}
}

// TestSortedListsFollowLargeCommits: a kind's list stays complete and in
// order whether a commit keeps its cached order (few changes) or drops it
// (many): 100 load balancers in one entry, then one, then 40 removed.
func TestSortedListsFollowLargeCommits(t *testing.T) {
	f := newFSM(testLogger())
	idx := uint64(1)
	apply := func(txn *pb.Txn) {
		t.Helper()
		if res := f.Apply(entry(t, idx, commandVersion, txn)).(*applyResult); res.errs[0] != nil {
			t.Fatal(res.errs[0])
		}
		idx++
	}
	check := func(want int) {
		t.Helper()
		objs, _ := f.current()
		var names []string
		for _, o := range objs {
			if lb := o.GetLoadBalancer(); lb != nil {
				names = append(names, lb.GetName())
			}
		}
		if len(names) != want || !slices.IsSorted(names) {
			t.Fatalf("listed %d load balancers (sorted: %v), want %d in order", len(names), slices.IsSorted(names), want)
		}
	}
	apply(puts(pool("bulk", "10.255.0.0/16"), tenant("acme", "bulk")))
	check(0)
	var objs []*pb.Object
	for i := range 100 {
		lb := bulkLB(3 * i)
		lb.Status = &pb.LoadBalancerStatus{Address: fmt.Sprintf("10.255.1.%d", i+1)}
		objs = append(objs, api.Wrap(lb))
	}
	apply(puts(objs...))
	check(100)
	one := bulkLB(1)
	one.Status = &pb.LoadBalancerStatus{Address: "10.255.2.1"}
	apply(puts(api.Wrap(one)))
	check(101)
	del := &pb.Txn{}
	for i := range 40 {
		del.Ops = append(del.Ops, &pb.Op{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: bulkLB(3 * i).GetName()}}})
	}
	apply(del)
	check(61)
}
