package proxy

import (
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/internal/pmap"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// scaleLBs is n load balancers with one tcp listener and ten members
// each, on VIPs spread over 127.16.0.0/12 (loopback: bindable, local).
func scaleLBs(n, port int) []*pb.LoadBalancer {
	out := make([]*pb.LoadBalancer, n)
	for i := range n {
		members := make([]string, 10)
		for j := range members {
			members[j] = fmt.Sprintf("127.%d.%d.%d:%d", 32+i/65536, i/256%256, i%256, 30000+j)
		}
		vip := fmt.Sprintf("127.%d.%d.%d", 16+i/65536, i/256%256, i%256)
		out[i] = l4LB(fmt.Sprintf("lb-%d", i), vip, port, "tcp", members...)
	}
	return out
}

// needFDs raises the soft descriptor limit to the hard one and skips the
// test when n descriptors still do not fit.
func needFDs(t testing.TB, n int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("read the descriptor limit: %v", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < uint64(n)+500 {
		t.Skipf("needs %d file descriptors, the limit is %d", n+500, lim.Cur)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestUpdateScales applies 1,000 and then 10,000 load balancers of ten
// members each (compile, live pools, one listening socket each), then one
// change to the 10,000, and reports time and heap.
func TestUpdateScales(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: opens 10,000 sockets")
	}
	needFDs(t, 10000)
	port := freePort(t)
	type point struct {
		n                int
		first, change    time.Duration
		delta            time.Duration
		heapBefore, heap uint64
	}
	measure := func(n int) point {
		pt := point{n: n, heapBefore: heapInUse()}
		p := New(Config{DrainTimeout: time.Millisecond})
		defer p.Close()
		lbs := scaleLBs(n, port)
		start := time.Now()
		if err := p.Update(labObjects(lbs...), 1); err != nil {
			t.Fatal(err)
		}
		pt.first = time.Since(start)
		if got := len(p.Status()); got != n {
			t.Fatalf("status of %d load balancers, want %d", got, n)
		}
		for lb, ps := range p.Status() {
			if len(ps) > 0 {
				t.Fatalf("%s: %v", lb, ps)
			}
		}
		pt.heap = heapInUse() - pt.heapBefore
		lbs[n/2] = clone(lbs[n/2])
		lbs[n/2].Pools["app"].Members[0].Address = "127.99.0.1:1"
		start = time.Now()
		if err := p.Update(labObjects(lbs...), 2); err != nil {
			t.Fatal(err)
		}
		pt.change = time.Since(start)

		// The same kind of change through ApplyChange: it touches one load
		// balancer, and the served state shares everything else.
		before := p.current.Load()
		changed := clone(lbs[n/3])
		changed.Pools["app"].Members[1].Address = "127.99.0.2:1"
		start = time.Now()
		touched, err := p.ApplyChange(snapshot.Change{Put: []*pb.Object{wrapLB(changed)}}, 3)
		if err != nil {
			t.Fatal(err)
		}
		pt.delta = time.Since(start)
		after := p.current.Load()
		if want := "acme/" + changed.Name; len(touched) != 1 || touched[0] != want {
			t.Errorf("ApplyChange touched %v, want [%s]", touched, want)
		}
		if got := pmap.Shared(before.listeners, after.listeners); got < pmap.Shared(before.listeners, before.listeners)-1 {
			t.Errorf("one changed listener: the served listeners share %d shards with the previous ones, want all but one", got)
		}
		var newPools int
		for sp, lp := range after.pools.All() {
			if old, ok := before.pools.Get(sp); !ok || old != lp {
				newPools++
			}
		}
		if newPools != 1 || after.pools.Len() != before.pools.Len() {
			t.Errorf("%d new live pools (of %d, had %d), want the changed one", newPools, after.pools.Len(), before.pools.Len())
		}
		if ms := p.Members("acme/" + changed.Name); len(ms) != 10 || !slices.ContainsFunc(ms, func(m MemberHealth) bool { return m.Addr.String() == "127.99.0.2:1" }) {
			t.Errorf("members after ApplyChange: %v", ms)
		}
		return pt
	}
	small, large := measure(1000), measure(10000)
	for _, pt := range []point{small, large} {
		t.Logf("%6d LBs x 10 members: first Update %v (compile, bind %d sockets, swap), one change %v, through ApplyChange %v, heap +%.1f MiB",
			pt.n, pt.first.Round(time.Millisecond), pt.n, pt.change.Round(time.Millisecond), pt.delta.Round(time.Microsecond), float64(pt.heap)/(1<<20))
	}
	limit := 15 * time.Second
	if raceEnabled {
		limit *= 5
	}
	if large.first > limit || large.change > limit/5 || large.delta > limit/5 {
		t.Errorf("10,000 load balancers: first Update %v, one change %v, through ApplyChange %v", large.first, large.change, large.delta)
	}
}
