package consensus

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// recount is a tenant's usage counted from its load balancers, and the
// bytes it stores from those and its certificates and uploaded keys.
func recount(r reader, tenant string) api.TenantUsage {
	var u api.TenantUsage
	addrs := map[netip.Addr]bool{}
	for _, o := range r.list(api.KindLoadBalancer, tenant) {
		u.Add(api.LoadBalancerUsage(o.GetLoadBalancer()))
		u.StoredBytes += int64(proto.Size(o))
		for _, a := range lbAddrs(o) {
			addrs[a] = true
		}
	}
	for _, o := range r.list(api.KindCertificate, tenant) {
		u.StoredBytes += int64(proto.Size(o))
	}
	for _, o := range r.list(api.KindStorageItem, "") {
		if strings.HasPrefix(o.GetStorageItem().GetKey(), "uploaded/"+tenant+"/") {
			u.StoredBytes += int64(proto.Size(o))
		}
	}
	u.Addresses = len(addrs)
	return u
}

// storedChange is a random write of a certificate or a stored item
// (uploaded or the ACME store's, which no tenant is charged for).
func storedChange(rng *rand.Rand, ten, n string) (*pb.ObjectRef, *pb.Object) {
	switch rng.IntN(3) {
	case 0:
		ref := &pb.ObjectRef{Kind: api.KindCertificate, Tenant: ten, Name: n}
		return ref, api.Wrap(&pb.Certificate{Name: n, Tenant: ten, LastError: strings.Repeat("e", rng.IntN(100))})
	case 1:
		key := "uploaded/" + ten + "/" + n
		return &pb.ObjectRef{Kind: api.KindStorageItem, Name: key}, api.Wrap(&pb.StorageItem{Key: key, Value: make([]byte, rng.IntN(500))})
	default:
		key := "certificates/acme/" + ten + "." + n
		return &pb.ObjectRef{Kind: api.KindStorageItem, Name: key}, api.Wrap(&pb.StorageItem{Key: key, Value: make([]byte, rng.IntN(500))})
	}
}

// usageLB is a load balancer of a random shape at one of few addresses.
func usageLB(rng *rand.Rand, tenant, name string) *pb.Object {
	l := &pb.LoadBalancer{Tenant: tenant, Name: name, Pools: map[string]*pb.BackendPool{}}
	for i := range rng.IntN(3) {
		l.Listeners = append(l.Listeners, &pb.Listener{Port: uint32(80 + i), Protocol: "tcp", Pool: "web"})
	}
	for i := range rng.IntN(2) {
		l.Routes = append(l.Routes, &pb.Route{Host: fmt.Sprintf("h%d.example", i), Pool: "web"})
	}
	bp := &pb.BackendPool{}
	for i := range rng.IntN(4) {
		bp.Members = append(bp.Members, &pb.Member{Address: fmt.Sprintf("10.20.0.%d:80", i+1)})
	}
	if rng.IntN(2) == 0 {
		bp.HealthCheck = &pb.HealthCheck{}
	}
	l.Pools["web"] = bp
	if n := rng.IntN(5); n > 0 {
		l.Status = &pb.LoadBalancerStatus{Address: fmt.Sprintf("192.0.2.%d", n)}
	}
	return api.Wrap(l)
}

// TestTenantUsageMatchesACount: after random creates, updates (new
// shapes, addresses shared and moved) and deletes, in the state and in
// overlays over it and over each other, each tenant's usage from the
// index equals a count of its load balancers.
func TestTenantUsageMatchesACount(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tenants := []string{"a", "b", "c"}
	name := func() (string, string) {
		return tenants[rng.IntN(len(tenants))], fmt.Sprintf("lb%d", rng.IntN(12))
	}
	change := func(set func(ref *pb.ObjectRef, o *pb.Object), get func(kind, key string) *pb.Object) {
		ten, n := name()
		if rng.IntN(3) == 0 {
			ref, o := storedChange(rng, ten, n)
			if rng.IntN(4) == 0 {
				if get(ref.GetKind(), keyOf(ref)) != nil {
					set(ref, nil)
				}
				return
			}
			set(ref, o)
			return
		}
		ref := &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: ten, Name: n}
		if rng.IntN(4) == 0 {
			if get(api.KindLoadBalancer, keyOf(ref)) != nil {
				set(ref, nil)
			}
			return
		}
		set(ref, usageLB(rng, ten, n))
	}
	check := func(what string, r reader) {
		t.Helper()
		for _, ten := range tenants {
			if got, want := r.tenantUsage(ten), recount(r, ten); got != want {
				t.Fatalf("%s: tenant %s: index %+v, count %+v", what, ten, got, want)
			}
		}
	}
	s := newState()
	for round := range 200 {
		change(func(ref *pb.ObjectRef, o *pb.Object) {
			if o == nil {
				s.remove(ref)
			} else {
				s.put(o)
			}
		}, s.get)
		check(fmt.Sprintf("state, round %d", round), s)
		if round%10 != 0 {
			continue
		}
		ov := newOverlay(s)
		child := newOverlay(ov)
		for i := range 15 {
			target := ov
			if i%2 == 1 {
				target = child
			}
			change(target.set, target.get)
			check(fmt.Sprintf("overlay, round %d.%d", round, i), ov)
			check(fmt.Sprintf("overlay of an overlay, round %d.%d", round, i), child)
		}
	}
}

// countingReader counts the load balancers a reader hands out in lists.
type countingReader struct {
	reader
	listed *int
}

func (c countingReader) list(kind, tenant string) []*pb.Object {
	out := c.reader.list(kind, tenant)
	if kind == api.KindLoadBalancer {
		*c.listed += len(out)
	}
	return out
}

// TestQuotaChecksCostWhatTheWriteChanges: with 10,000 load balancers in
// one tenant, checking a write of one new load balancer, or of a member
// change, lists none of the tenant's load balancers (the quotas are read
// from the usage index), and the quotas still hold: one load balancer,
// one address or one member over a quota is refused, naming it.
func TestQuotaChecksCostWhatTheWriteChanges(t *testing.T) {
	const n = 10000
	s := newState()
	s.put(api.Wrap(&pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: "static"}))
	ten := &pb.Tenant{Name: "big", Networks: []string{"10.0.0.0/8"}, Pools: []string{"bulk"},
		Quotas: &pb.Quotas{LoadBalancers: n + 1, Addresses: n + 1, Listeners: 2 * n, Members: 2*n + 1}}
	s.put(api.Wrap(ten))
	mk := func(i int, members int) *pb.Object {
		bp := &pb.BackendPool{}
		for j := range members {
			bp.Members = append(bp.Members, &pb.Member{Address: fmt.Sprintf("10.%d.%d.%d:80", i>>16, i>>8&255, j+1)})
		}
		a := i + 1
		addr := fmt.Sprintf("198.%d.%d.%d", 18+a>>16, a>>8&255, a&255)
		return api.Wrap(&pb.LoadBalancer{Tenant: "big", Name: fmt.Sprintf("lb-%d", i),
			Vip:       &pb.VIPRequest{Pool: "bulk", Address: addr},
			Listeners: []*pb.Listener{{Port: 5432, Protocol: "tcp", Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": bp}, Status: &pb.LoadBalancerStatus{Address: addr}})
	}
	for i := range n {
		s.put(mk(i, 2))
	}
	now := time.Unix(1700000000, 0)
	check := func(obj *pb.Object) (int, error) {
		t.Helper()
		listed := 0
		ov := newOverlay(countingReader{reader: s, listed: &listed})
		err := checkTxn(newOverlay(ov), &pb.Txn{Ops: []*pb.Op{{Op: &pb.Op_Put{Put: obj}}}}, now)
		return listed, err
	}
	for _, tc := range []struct {
		name string
		obj  *pb.Object
	}{
		{"a new load balancer", mk(n, 1)},
		{"a member changed", mk(17, 2)},
	} {
		tc.obj.GetLoadBalancer().Pools["app"].Members[0].Address = "10.99.0.1:80"
		listed, err := check(tc.obj)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if listed != 0 {
			t.Errorf("%s: the quota checks listed %d load balancers, want 0", tc.name, listed)
		}
	}

	// Fill every quota but one, then go one over each.
	s.put(mk(n, 1))
	for _, tc := range []struct {
		name  string
		obj   *pb.Object
		quota string
	}{
		{"one load balancer too many", mk(n+1, 0), "quotas.loadBalancers"},
		{"one member too many", mk(5, 4), "quotas.members"},
	} {
		listed, err := check(tc.obj)
		if err == nil || !strings.Contains(err.Error(), tc.quota) {
			t.Errorf("%s: %v, want a refusal naming %s", tc.name, err, tc.quota)
		}
		if listed != 0 {
			t.Errorf("%s: the quota checks listed %d load balancers, want 0", tc.name, listed)
		}
	}
	// The address quota: one new address too many.
	tq := proto.Clone(ten).(*pb.Tenant)
	tq.Quotas.LoadBalancers, tq.Quotas.Addresses = n+5, n+1
	s.put(api.Wrap(tq))
	if _, err := check(mk(n+1, 0)); err == nil || !strings.Contains(err.Error(), "quotas.addresses") {
		t.Errorf("one address too many: %v, want a refusal naming quotas.addresses", err)
	}
}

// TestUpdateCostsTheSameAtAnySize: replacing a load balancer that keeps
// its address takes about as long in a state of 100,000 as in one of 1,000.
// Taking the address out of the sorted used addresses and putting it back
// moved half the list twice per update (100 times the work at 100 times
// the state).
func TestUpdateCostsTheSameAtAnySize(t *testing.T) {
	if testing.Short() {
		t.Skip("a scale test: make test runs it; -short (make test-quick) skips it")
	}
	lb := func(i, gen int) *pb.Object {
		a := i + 1
		addr := fmt.Sprintf("198.%d.%d.%d", 18+a>>16, a>>8&255, a&255)
		return api.Wrap(&pb.LoadBalancer{Tenant: "big", Name: fmt.Sprintf("lb-%d", i),
			Vip:       &pb.VIPRequest{Pool: "bulk", Address: addr},
			Listeners: []*pb.Listener{{Port: 5432, Protocol: "tcp", Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": {Members: []*pb.Member{{Address: fmt.Sprintf("10.0.0.%d:80", gen%250+1)}}}},
			Status:    &pb.LoadBalancerStatus{Address: addr}})
	}
	// perUpdate is the fastest of 9 rounds of 200 updates in a state of n
	// load balancers: the least disturbed by whatever else the machine
	// runs. Each round starts after a collection and runs without one: a
	// collection that marks a state of 100,000 objects (under the race
	// detector, beside other tests) would be timed as the updates' work.
	perUpdate := func(n int) time.Duration {
		s := newState()
		for i := range n {
			s.put(lb(i, 0))
		}
		updates := make([]*pb.Object, 200)
		for i := range updates {
			updates[i] = lb(i*(n/len(updates)), i+1)
		}
		best := time.Duration(1 << 62)
		gc := debug.SetGCPercent(-1)
		defer debug.SetGCPercent(gc)
		for range 9 {
			runtime.GC()
			start := time.Now()
			for _, o := range updates {
				s.put(o)
			}
			best = min(best, time.Since(start)/time.Duration(len(updates)))
		}
		if got := len(s.used); got != n {
			t.Fatalf("%d used addresses after the updates, want %d", got, n)
		}
		for _, o := range updates {
			a, _ := lbAddress(o)
			if users := s.byAddr[a]; len(users) != 1 || users[0] != o {
				t.Fatalf("%s is used by %d objects after the updates, want the last update alone", a, len(users))
			}
		}
		return best
	}
	small, large := perUpdate(1000), perUpdate(100000)
	t.Logf("an update takes %s at 1,000 load balancers, %s at 100,000", small, large)
	// Equal work would be 1x; 5x and 5 µs leave room for caches and a
	// loaded machine. Moving the used addresses took 2 µs at 1,000 and
	// 60 µs at 100,000.
	if large > 5*small+5*time.Microsecond {
		t.Fatalf("an update takes %s at 100,000 load balancers and %s at 1,000: it grows with the state", large, small)
	}
}
