package snapshot

import (
	"testing"
	"time"
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
	lb := in[len(in)-1].GetLoadBalancer()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lb.Pools["app"].Members[0].Address = []string{"10.9.9.9:1", "10.9.9.9:2"}[i%2]
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
