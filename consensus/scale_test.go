package consensus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// BenchmarkApplyTenantAtScale applies one new tenant to a state holding
// 2,000 others.
func BenchmarkApplyTenantAtScale(b *testing.B) {
	f := newFSM(testLogger())
	t := &testing.T{}
	f.Apply(entry(t, 1, commandVersion, puts(pool("public", "192.0.2.0/24"))))
	for i := 0; i < 2000; i++ {
		f.Apply(entry(t, uint64(i+2), commandVersion, puts(tenant(fmt.Sprintf("t%05d", i), "public"))))
	}
	entries := make([]*raft.Log, b.N)
	for i := range entries {
		entries[i] = entry(t, uint64(5000+i), commandVersion, puts(tenant(fmt.Sprintf("new%07d", i), "public")))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := f.Apply(entries[i]).(*applyResult)
		if res.errs[0] != nil {
			b.Fatal(res.errs[0])
		}
	}
}

// BenchmarkClusterChangeAtScale is the control plane's side of the scale
// report, without a data plane (so without the descriptors 100,000
// listeners need): three hosts in this process on loopback, real Raft and
// bbolt. For each size (TEAPOT_CONSENSUS_SCALE, default 10000,100000) it
// loads that many load balancers of ten members, 100 per write, then
// changes one member of a random one 120 times and reports, per change,
// the time from the write to the leader's answer and to the revision
// applied on every host (the watch event's stamp), the heap of the three
// hosts per load balancer, and the time of a Raft snapshot of the state.
func BenchmarkClusterChangeAtScale(b *testing.B) {
	sizes := []int{10000, 100000}
	if env := os.Getenv("TEAPOT_CONSENSUS_SCALE"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 100 || n%100 != 0 || n > 200000 {
				b.Fatalf("TEAPOT_CONSENSUS_SCALE: %q is not a multiple of 100 up to 200000", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) { clusterAtScale(b, n) })
	}
}

func clusterAtScale(b *testing.B, n int) {
	hosts := threeHosts(b)
	l := leaderOf(b, hosts)
	apply(b, l.node, api.Wrap(&pb.VIPPool{Name: "bulk", Cidrs: []string{"198.18.0.0/15"}, Mode: "static"}))
	member := func(i, j int) string { return fmt.Sprintf("10.%d.%d.%d:%d", i/65536%200, i/256%256, i%256, 30000+j) }
	scaleLB := func(i int) *pb.LoadBalancer {
		ms := make([]*pb.Member, 10)
		for j := range ms {
			ms[j] = &pb.Member{Address: member(i, j)}
		}
		a := i + 1
		return &pb.LoadBalancer{
			Name: fmt.Sprintf("lb-%d", i), Tenant: fmt.Sprintf("t%04d", i/100),
			Vip:       &pb.VIPRequest{Pool: "bulk", Address: fmt.Sprintf("198.%d.%d.%d", 18+a/65536, a/256%256, a%256)},
			Listeners: []*pb.Listener{{Port: 5432, Protocol: "tcp", Pool: "app"}},
			Pools:     map[string]*pb.BackendPool{"app": {Members: ms}},
		}
	}
	write := func(objs ...*pb.Object) uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := l.node.Apply(ctx, &pb.ApplyRequest{Objects: objs}, false)
		if err != nil {
			b.Fatalf("apply: %v", err)
		}
		return resp.GetRevision()
	}
	start := time.Now()
	var rev uint64
	for t := range n / 100 {
		objs := []*pb.Object{api.Wrap(&pb.Tenant{Name: fmt.Sprintf("t%04d", t), Networks: []string{"10.0.0.0/8"}, Pools: []string{"bulk"}})}
		for j := range 100 {
			objs = append(objs, api.Wrap(scaleLB(t*100+j)))
		}
		rev = write(objs...)
	}
	waitFor(b, "every host at the last revision", func() bool {
		for _, h := range hosts {
			if h.node.Revision() < rev {
				return false
			}
		}
		return true
	})
	load := time.Since(start)

	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)

	// One watcher per host, from the next revision on.
	watchers := make([]*Watcher, len(hosts))
	for i, h := range hosts {
		watchers[i] = h.node.Watch(rev + 1)
	}
	const changes = 120
	rng := rand.New(rand.NewPCG(17, uint64(n)))
	var toLeader, toAll []time.Duration
	// GC cycles that ran during each change: a tail from the collector
	// shows as slow changes that saw one.
	gcs := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	gcCycles := func() uint64 { metrics.Read(gcs); return gcs[0].Value.Uint64() }
	var withGC []bool
	stopProfile := func() {}
	// TEAPOT_CONSENSUS_SCALE_PROFILE names a file for a CPU profile of
	// the changes alone.
	if path := os.Getenv("TEAPOT_CONSENSUS_SCALE_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		stopProfile = pprof.StopCPUProfile
	}
	b.ResetTimer()
	for c := range changes {
		gc0 := gcCycles()
		i := rng.IntN(n)
		lb := scaleLB(i)
		lb.Pools["app"].Members[rng.IntN(10)].Address = fmt.Sprintf("10.%d.%d.%d:%d", 200+c%50, rng.IntN(256), rng.IntN(256), 1+rng.IntN(60000))
		t0 := time.Now()
		rev := write(api.Wrap(lb))
		toLeader = append(toLeader, time.Since(t0))
		var last time.Time
		for _, w := range watchers {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			for {
				ev, err := w.Next(ctx)
				if err != nil {
					cancel()
					b.Fatalf("change %d: watch: %v", c, err)
				}
				if ev.Reset {
					cancel()
					b.Fatalf("change %d: the watch was reset", c)
				}
				if ev.Revision >= rev {
					if ev.Applied.After(last) {
						last = ev.Applied
					}
					break
				}
			}
			cancel()
		}
		toAll = append(toAll, last.Sub(t0))
		withGC = append(withGC, gcCycles() > gc0)
	}
	b.StopTimer()
	stopProfile()

	// What a snapshot holds the state machine for (applies wait), and the
	// whole snapshot (encoding and writing run beside the applies).
	holdStart := time.Now()
	fs, err := l.node.fsm.Snapshot()
	if err != nil {
		b.Fatalf("snapshot: %v", err)
	}
	hold := time.Since(holdStart)
	fs.Release()
	snapStart := time.Now()
	if err := l.node.r().Snapshot().Error(); err != nil {
		b.Fatalf("snapshot: %v", err)
	}
	snap := time.Since(snapStart)

	pct := func(ds []time.Duration, p int) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds()) / 1000
	}
	var gcd, plain []time.Duration
	for i, d := range toAll {
		if withGC[i] {
			gcd = append(gcd, d)
		} else {
			plain = append(plain, d)
		}
	}
	if len(gcd) > 0 && len(plain) > 0 {
		fmt.Printf("consensus at %d LBs: %d of %d changes saw a GC cycle (applied on every host p50 %.1f, max %.1f ms); the others p50 %.1f, p99 %.1f, max %.1f ms\n",
			n, len(gcd), len(toAll), pct(gcd, 50), pct(gcd, 100), pct(plain, 50), pct(plain, 99), pct(plain, 100))
	} else {
		fmt.Printf("consensus at %d LBs: %d of %d changes saw a GC cycle\n", n, len(gcd), len(toAll))
	}
	fmt.Printf("consensus at %d LBs x 10 members (3 hosts in one process): load %s; one member change: leader answers p50 %.1f p99 %.1f ms, applied on every host p50 %.1f p99 %.1f max %.1f ms; heap %.0f MiB for 3 hosts (%.1f KiB per LB and host); Raft snapshot %s, of which the state machine is held %s\n",
		n, load.Round(time.Millisecond), pct(toLeader, 50), pct(toLeader, 99), pct(toAll, 50), pct(toAll, 99), pct(toAll, 100),
		float64(mem.HeapInuse)/(1<<20), float64(mem.HeapInuse)/1024/3/float64(n), snap.Round(time.Millisecond), hold.Round(time.Microsecond))
	b.ReportMetric(pct(toAll, 99), "p99-ms")
}
