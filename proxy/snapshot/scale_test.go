package snapshot

import (
	"fmt"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"google.golang.org/protobuf/proto"
)

func BenchmarkCompile10k(b *testing.B) {
	in := scaleObjects(10000)
	b.ReportAllocs()
	for b.Loop() {
		s := Compile(in, 1, Defaults{}, nil)
		if len(s.Listeners) != 20000 {
			b.Fatalf("compiled %d listeners, want 20000", len(s.Listeners))
		}
	}
}

// BenchmarkRecompile10kOneChange is the common case: one load balancer
// changed, everything else reused from the previous snapshot.
func BenchmarkRecompile10kOneChange(b *testing.B) {
	in := scaleObjects(10000)
	prev := Compile(in, 1, Defaults{}, nil)
	last := len(in) - 1
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in[last] = withMember(in[last], []string{"10.9.9.9:1", "10.9.9.9:2"}[i%2])
		prev = Compile(in, uint64(i+2), Defaults{}, prev)
	}
}

func BenchmarkRouteMatch(b *testing.B) {
	rt := testTable()
	b.ReportAllocs()
	for b.Loop() {
		rt.Match("x.eu.acme.example", "/static/app.js")
	}
}

// TestCompileScales compiles 1,000 and 10,000 load balancers of ten
// members each and checks that the time grows about linearly and that
// 10,000 stays well under a second.
func TestCompileScales(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: compiles 11,000 load balancers")
	}
	measure := func(n int) time.Duration {
		in := scaleObjects(n)
		best := time.Duration(1<<63 - 1)
		for range 3 {
			start := time.Now()
			s := Compile(in, 1, Defaults{}, nil)
			best = min(best, time.Since(start))
			if len(s.Listeners) != 2*n {
				t.Fatalf("compiled %d listeners, want %d", len(s.Listeners), 2*n)
			}
		}
		return best
	}
	small, large := measure(1000), measure(10000)
	t.Logf("compile 1,000 LBs x 10 members: %v; 10,000: %v (x%.1f)", small, large, float64(large)/float64(small))
	limit := time.Second / 2
	if raceEnabled {
		limit *= 10
	}
	if large > limit {
		t.Errorf("compiling 10,000 load balancers took %v, want under %v", large, limit)
	}
	if large > 25*small {
		t.Errorf("10x the load balancers took %.1fx the time; compile should grow about linearly", float64(large)/float64(small))
	}
}

// withMember returns a copy of a load balancer object whose first member
// of pool "app" is addr: objects are never modified once compiled.
func withMember(o *pb.Object, addr string) *pb.Object {
	lb := proto.Clone(o.GetLoadBalancer()).(*pb.LoadBalancer)
	lb.Pools["app"].Members[0].Address = addr
	return lbObj(lb)
}

// TestRecompileCostsWhatChanged compiles 10,000 load balancers, then
// changes one member of one of them, then one tenant of two, and counts
// what the compiler built: a change compiles the load balancers it
// touches and nothing else, and everything else is the previous
// snapshot's by identity.
func TestRecompileCostsWhatChanged(t *testing.T) {
	const n = 10000
	in := scaleObjects(n)
	// A second tenant with two load balancers of its own.
	in = append(in, tenantObj("other", []string{"other.example"}, []string{"10.0.0.0/8"}))
	for i := range 2 {
		o := proto.Clone(in[2+i].GetLoadBalancer()).(*pb.LoadBalancer)
		o.Tenant, o.Name = "other", fmt.Sprintf("o-%d", i)
		o.Routes = nil
		o.Status.Address = fmt.Sprintf("198.19.255.%d", i)
		in = append(in, lbObj(o))
	}
	s1 := Compile(in, 1, Defaults{}, nil)
	if s1.Stats.Compiled != n+2 || s1.Stats.Reused != 0 || len(s1.Listeners) != 2*(n+2) {
		t.Fatalf("first compile: %+v, %d listeners; want %d compiled and %d listeners", s1.Stats, len(s1.Listeners), n+2, 2*(n+2))
	}

	changed := 7
	in[2+changed] = withMember(in[2+changed], "10.200.0.1:1")
	s2 := Compile(in, 2, Defaults{}, s1)
	if s2.Stats.Compiled != 1 || s2.Stats.NewPools != 1 || s2.Stats.Reused != n+1 {
		t.Errorf("one member of one load balancer changed: %+v, want 1 compiled, 1 new pool, %d reused", s2.Stats, n+1)
	}
	var fresh int
	for k, l := range s2.Listeners {
		if s1.Listeners[k] != l {
			fresh++
			if l.LB != fmt.Sprintf("acme/lb-%d", changed) {
				t.Errorf("listener %s of %s is new though its load balancer did not change", k, l.LB)
			}
		}
	}
	if fresh != 2 {
		t.Errorf("%d listeners are new, want the changed load balancer's 2", fresh)
	}
	if got := s2.Listeners[key(fmt.Sprintf("198.18.0.%d:5432", changed), TCP)].Pool.Members[0].Addr.String(); got != "10.200.0.1:1" {
		t.Errorf("the change is not in the snapshot: member %s", got)
	}

	// A change of a tenant recompiles that tenant's load balancers only.
	in[n+2] = tenantObj("other", []string{"other.example"}, []string{"10.0.0.0/8", "10.250.0.0/16"})
	s3, st := compile(in, 3, Defaults{}, s2)
	if st.Compiled != 2 || st.NewPools != 0 {
		t.Errorf("one tenant of 2 load balancers changed: %+v, want 2 compiled and no new pool", st)
	}
	if s3 != s2 {
		t.Error("the tenant change serves nothing new, yet Compile returned a new snapshot")
	}

	// Other VIP pools or defaults change what every load balancer compiles to.
	s4 := Compile(in, 4, Defaults{ConnectTimeout: time.Second}, s3)
	if s4.Stats.Compiled != n+2 {
		t.Errorf("new defaults: %+v, want all %d compiled", s4.Stats, n+2)
	}
}
