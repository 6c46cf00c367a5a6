package vip

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestVIPListEdits: random puts and removes on copies of a vipList give
// what the same edits give on a sorted slice, leave the list they were
// copied from as it was, and keep the chunks sorted, not empty and
// below twice vipChunk.
func TestVIPListEdits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }
	var model []vipSpec
	for i := 0; i < 3000; i += 2 {
		model = append(model, vipSpec{Addr: addr(i), Pool: "p0"})
	}
	l := newVIPList(slices.Clone(model))
	check := func(what string, l *vipList, want []vipSpec) {
		t.Helper()
		if got := slices.Collect(l.All()); !slices.EqualFunc(got, want, func(a, b vipSpec) bool { return a.Addr == b.Addr && a.Pool == b.Pool }) || l.Len() != len(want) {
			t.Fatalf("%s: %d VIPs (Len %d), want %d", what, len(got), l.Len(), len(want))
		}
		for ci, c := range l.chunks {
			if len(c) == 0 || len(c) >= 2*vipChunk || !slices.IsSortedFunc(c, func(a, b vipSpec) int { return a.Addr.Compare(b.Addr) }) {
				t.Fatalf("%s: chunk %d of %d VIPs, or not sorted", what, ci, len(c))
			}
			if ci > 0 && l.chunks[ci-1][len(l.chunks[ci-1])-1].Addr.Compare(c[0].Addr) >= 0 {
				t.Fatalf("%s: chunk %d starts before chunk %d ends", what, ci, ci-1)
			}
		}
		for _, vs := range want {
			if got, ok := l.get(vs.Addr); !ok || got.Pool != vs.Pool {
				t.Fatalf("%s: get(%s) = %+v, %t; want %+v", what, vs.Addr, got, ok, vs)
			}
		}
	}
	for round := range 40 {
		e := l.edit()
		next := slices.Clone(model)
		for range 1 + rng.IntN(400) {
			a := addr(rng.IntN(4096))
			i, found := slices.BinarySearchFunc(next, a, func(v vipSpec, a netip.Addr) int { return v.Addr.Compare(a) })
			switch {
			case rng.IntN(3) == 0:
				e.remove(a)
				if found {
					next = slices.Delete(next, i, i+1)
				}
			default:
				vs := vipSpec{Addr: a, Pool: fmt.Sprintf("p%d", round+1)}
				e.put(vs)
				if found {
					next[i] = vs
				} else {
					next = slices.Insert(next, i, vs)
				}
			}
		}
		check(fmt.Sprintf("round %d, the copy", round), e.l, next)
		check(fmt.Sprintf("round %d, the original", round), &l, model)
		l, model = *e.l, next
	}
	// Removed down to nothing, and grown again.
	e := l.edit()
	for _, vs := range model {
		e.remove(vs.Addr)
	}
	check("all removed", e.l, nil)
	e = e.l.edit()
	e.put(vipSpec{Addr: addr(7), Pool: "again"})
	check("one put into an empty list", e.l, []vipSpec{{Addr: addr(7), Pool: "again"}})
}

// TestLoadBalancerChangeCostsAChunk: a change of one load balancer
// among 100,000 VIPs allocates about what it does among 1,000, not a
// copy of every VIP (10 MiB at 100,000).
func TestLoadBalancerChangeCostsAChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	perChange := func(n int) float64 {
		objs := []*pb.Object{{Kind: &pb.Object_VipPool{VipPool: &pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: ModeStatic}}}}
		addr := func(i int) string {
			return netip.AddrFrom4([4]byte{198, 18 + byte((i+1)>>16), byte((i + 1) >> 8), byte(i + 1)}).String()
		}
		lbOf := func(i, at int) *pb.LoadBalancer {
			return &pb.LoadBalancer{Tenant: "t", Name: fmt.Sprintf("lb-%d", i), Vip: &pb.VIPRequest{Pool: "bulk"},
				Status: &pb.LoadBalancerStatus{Address: addr(at)}}
		}
		for i := range n {
			objs = append(objs, &pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lbOf(i, i)}})
		}
		d := desiredState(objs)
		cur := &d
		const changes = 200
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for c := range changes {
			// A load balancer moves to a new address, one beyond the others.
			i := rng.IntN(n)
			cur, _ = cur.withLoadBalancers([]lbChange{{prev: lbOf(i, i), next: lbOf(i, n+c)}})
			cur, _ = cur.withLoadBalancers([]lbChange{{prev: lbOf(i, n+c), next: lbOf(i, i)}})
		}
		runtime.ReadMemStats(&after)
		if cur.VIPs.Len() != n {
			t.Fatalf("%d VIPs after moving load balancers there and back, want %d", cur.VIPs.Len(), n)
		}
		return float64(after.TotalAlloc-before.TotalAlloc) / (2 * changes)
	}
	small, large := perChange(1000), perChange(100000)
	t.Logf("one load balancer change allocates %.0f bytes among 1,000 VIPs, %.0f among 100,000", small, large)
	if large > 3*small+16<<10 {
		t.Errorf("a change among 100,000 VIPs allocates %.0f bytes, among 1,000 %.0f: it grows with the VIPs", large, small)
	}
}
