package scenarios

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Memory per load balancer of a whole host: TestHostMemoryPerLoadBalancer
// loads memLBsSmall, then memLBsLarge load balancers of ten members into
// a one-host cluster through the admin API and bounds the Go heap a
// load balancer adds (after a collection), everything the host keeps for
// it: the replicated state, the data plane with its listening socket,
// the VIP manager, the certificate manager and the status caches.
//
// TEAPOT_MEMORY_LBS=10000 loads that many instead, then changes one
// member of a random load balancer 200 times and logs the host's resident
// set, Go heap and stacks without forcing a collection;
// TEAPOT_MEMORY_LIMIT is the host's --memory-limit (default 1GiB, far above
// what the test needs); TEAPOT_MEMORY_LISTEN its --listen-sockets (default
// listener: a descriptor per load balancer; tenant needs none);
// TEAPOT_MEMORY_PROFILE=path saves the host's heap profile at the end, and
// TEAPOT_MEMORY_CHANGE_PROFILE=dir its allocation profiles before and
// after the changes.
const (
	memLBsSmall = 500
	memLBsLarge = 4500
	// memPerTenant load balancers share a tenant.
	memPerTenant = 100
	// memKiBPerLB bounds the heap one load balancer adds. Measured
	// 11.4-12.4 KiB (with and without the race detector), 14.9 before
	// health targets were cut to 128 bytes.
	memKiBPerLB = 13.5
	// memScrapeBytesPerSeries bounds what a scrape of /metrics allocates
	// per series. Measured 83-85 at 4,500 load balancers (45,179 series;
	// with and without the race detector); 323 when each member's label
	// values were kept as strings, and 1,520 when every series was
	// gathered through the Prometheus library's registry.
	memScrapeBytesPerSeries = 200
)

func TestHostMemoryPerLoadBalancer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: loads 4,500 load balancers into a host")
	}
	needFDs := memLBsLarge + 1000
	raiseNoFile(t, uint64(needFDs))
	c := newCluster(t)
	n := c.newNode()
	limit := cmp.Or(os.Getenv("TEAPOT_MEMORY_LIMIT"), "1GiB")
	listen := cmp.Or(os.Getenv("TEAPOT_MEMORY_LISTEN"), "listener")
	// A headroom below the host's live heap at memLBsLarge, so that serve
	// must lower the collector's target.
	c.start(n, "--memory-limit", limit, "--listen-sockets", listen, "--gc-headroom", "32MiB")
	c.waitMember(n)
	if limit == "1GiB" {
		// serve hands --memory-limit to the runtime.
		s, err := scrape(n)
		if err != nil {
			t.Fatal(err)
		}
		if v := s["go_gc_gomemlimit_bytes"]; len(v) != 1 || v[0].value != 1<<30 {
			t.Fatalf("--memory-limit 1GiB: go_gc_gomemlimit_bytes %v", v)
		}
	}
	conn := c.dial(t, n)
	apply := func(objs ...*pb.Object) uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := conn.Admin.Apply(ctx, &pb.ApplyRequest{Objects: objs})
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		var rev uint64
		for _, o := range resp.GetObjects() {
			rev = max(rev, api.MetaOf(o).GetRevision())
		}
		return rev
	}
	logs := []*planeLog{{path: n.logPath}}
	apply(api.Wrap(&pb.VIPPool{Name: "bulk", Cidrs: []string{"127.80.0.0/12"}, Mode: "static"}))
	load := func(from, to int) {
		for tn := from / memPerTenant; tn < to/memPerTenant; tn++ {
			objs := []*pb.Object{api.Wrap(scaleTenant(tn, "bulk"))}
			for j := range memPerTenant {
				i := tn*memPerTenant + j
				objs = append(objs, api.Wrap(memLB(i)))
			}
			everyPlaneWithin(t, logs, apply(objs...), time.Minute)
		}
	}
	load(0, memLBsSmall)
	small := heapAfterGC(t, n)
	lbs := memLBsLarge
	if v := os.Getenv("TEAPOT_MEMORY_LBS"); v != "" {
		var err error
		if lbs, err = strconv.Atoi(v); err != nil || lbs <= memLBsSmall || lbs%memPerTenant != 0 {
			t.Fatalf("TEAPOT_MEMORY_LBS: %q is not a multiple of %d above %d", v, memPerTenant, memLBsSmall)
		}
		if listen == "listener" {
			raiseNoFile(t, uint64(lbs+1000))
		}
	}
	load(memLBsSmall, lbs)
	scrapeBytesPerSeries(t, n)
	if lbs != memLBsLarge {
		// Measuring: one member of a random load balancer changed 200
		// times, then the resident set as a host's at rest after its load
		// and some changes (no collection forced).
		rng := rand.New(rand.NewPCG(17, uint64(lbs)))
		allocated := func() float64 {
			s, err := scrape(n)
			if err != nil {
				t.Fatal(err)
			}
			return s["go_memstats_alloc_bytes_total"][0].value
		}
		// Two scrapes one after the other: what a scrape allocates, to
		// leave out of what the changes do.
		a0 := allocated()
		a1 := allocated()
		if dir := os.Getenv("TEAPOT_MEMORY_CHANGE_PROFILE"); dir != "" {
			saveNodeProfile(t, n, "allocs", dir+"/changes-before.pprof")
			defer saveNodeProfile(t, n, "allocs", dir+"/changes-after.pprof")
		}
		cpu0, t0 := procCPU(t, n.cmd.Process.Pid), time.Now()
		for c := range 200 {
			i := rng.IntN(lbs)
			lb := memLB(i)
			lb.Pools["app"].Members[rng.IntN(scaleMembers)].Address = fmt.Sprintf("10.%d.%d.%d:%d", 200+c%50, rng.IntN(256), rng.IntN(256), 1+rng.IntN(60000))
			everyPlaneWithin(t, logs, apply(api.Wrap(lb)), time.Minute)
		}
		cpu, took := procCPU(t, n.cmd.Process.Pid)-cpu0, time.Since(t0)
		perChange := (allocated() - a1 - (a1 - a0)) / 200
		time.Sleep(5 * time.Second)
		s, err := scrape(n)
		if err != nil {
			t.Fatal(err)
		}
		first := func(name string) float64 {
			if v := s[name]; len(v) > 0 {
				return v[0].value
			}
			return 0
		}
		pid := n.cmd.Process.Pid
		t.Logf("%d load balancers, 200 changes in %v using %v of CPU, %.0f KiB allocated per change; then RSS %.1f MiB (anonymous %.1f, files %.1f), Go heap in use %.1f MiB, stacks %.1f MiB, Go runtime's total %.1f MiB (--memory-limit %s)", lbs, took.Round(time.Millisecond), cpu, perChange/1024,
			float64(procKiB(t, pid, "VmRSS"))/1024, float64(procKiB(t, pid, "RssAnon"))/1024, float64(procKiB(t, pid, "RssFile"))/1024, first("go_memstats_heap_inuse_bytes")/(1<<20),
			first("go_memstats_stack_inuse_bytes")/(1<<20), first("go_memstats_sys_bytes")/(1<<20), limit)
	}
	large := heapAfterGC(t, n)
	checkHeadroom(t, n, large, 32<<20)
	perLB := float64(large-small) / 1024 / float64(lbs-memLBsSmall)
	t.Logf("Go heap in use after a collection: %d load balancers %.1f MiB, %d load balancers %.1f MiB: %.1f KiB per load balancer (bound %.1f)",
		memLBsSmall, float64(small)/(1<<20), lbs, float64(large)/(1<<20), perLB, memKiBPerLB)
	if p := os.Getenv("TEAPOT_MEMORY_PROFILE"); p != "" {
		saveHeapProfile(t, n, p)
	}
	if perLB > memKiBPerLB {
		t.Errorf("a load balancer of ten members costs %.1f KiB of heap on a host, bound %.1f KiB", perLB, memKiBPerLB)
	}
}

// checkHeadroom checks that serve's --gc-headroom of room bytes holds
// the heap goal within room (or a quarter of the heap, when that is
// more) of the heap in use after a collection (inuse), by a collector
// target below GOGC's 100, within the second the headroom takes to see
// the collection.
func checkHeadroom(t *testing.T, n *node, inuse, room uint64) {
	t.Helper()
	if inuse <= room {
		t.Fatalf("%d MiB of heap in use after a collection: not above the headroom of %d MiB", inuse>>20, room>>20)
	}
	var gogc, goal float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		s, err := scrape(n)
		if err != nil {
			t.Fatal(err)
		}
		if v, g := s["go_gc_gogc_percent"], s["go_memstats_next_gc_bytes"]; len(v) == 1 && len(g) == 1 {
			gogc, goal = v[0].value, g[0].value
		}
		// The goal also counts stacks and globals at the target's share.
		if gogc < 100 && goal <= float64(inuse+max(room, inuse/4)+8<<20) {
			t.Logf("--gc-headroom %d MiB: %.0f MiB in use after a collection, heap goal %.0f MiB, GOGC %.0f", room>>20, float64(inuse)/(1<<20), goal/(1<<20), gogc)
			return
		}
	}
	t.Errorf("--gc-headroom %d MiB with %d MiB in use after a collection: GOGC %.0f, heap goal %.0f MiB", room>>20, inuse>>20, gogc, goal/(1<<20))
}

// scrapeBytesPerSeries bounds what one scrape of /metrics allocates on
// the host, per series: the allocations between two scrapes, over the
// series of the second. TEAPOT_MEMORY_SCRAPE_PROFILE=dir saves the
// host's allocation profiles before and after the second.
func scrapeBytesPerSeries(t *testing.T, n *node) {
	t.Helper()
	s, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("TEAPOT_MEMORY_SCRAPE_PROFILE"); dir != "" {
		saveNodeProfile(t, n, "allocs", dir+"/allocs-before.pprof")
		defer saveNodeProfile(t, n, "allocs", dir+"/allocs-after.pprof")
	}
	s2, err := scrape(n)
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, v := range s2 {
		series += len(v)
	}
	alloc := func(s map[string][]sample) float64 {
		if v := s["go_memstats_alloc_bytes_total"]; len(v) > 0 {
			return v[0].value
		}
		return 0
	}
	bytes := alloc(s2) - alloc(s)
	t.Logf("one scrape of /metrics: %d series, %.1f MiB allocated by the host, %.0f bytes a series (bound %d)", series, bytes/(1<<20), bytes/float64(series), memScrapeBytesPerSeries)
	if bytes/float64(series) > memScrapeBytesPerSeries {
		t.Errorf("one scrape of /metrics allocates %.0f bytes a series (%d series), bound %d", bytes/float64(series), series, memScrapeBytesPerSeries)
	}
}

// heapAfterGC is the node's Go heap in use right after a collection,
// from its heap profile's memory statistics (gc=1 collects first).
func heapAfterGC(t *testing.T, n *node) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + n.metricsAddr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		t.Fatalf("heap profile of %s: %v", n.id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			b, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("heap profile of %s: HeapInuse %q", n.id, v)
			}
			return b
		}
	}
	t.Fatalf("heap profile of %s has no HeapInuse (%v)", n.id, sc.Err())
	return 0
}

// saveHeapProfile writes the node's heap profile to path.
func saveHeapProfile(t *testing.T, n *node, path string) { saveNodeProfile(t, n, "heap", path) }

// saveNodeProfile writes the node's profile of that name to path, after a
// collection.
func saveNodeProfile(t *testing.T, n *node, name, path string) {
	resp, err := http.Get("http://" + n.metricsAddr + "/debug/pprof/" + name + "?gc=1")
	if err != nil {
		t.Fatalf("heap profile of %s: %v", n.id, err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Fatal(err)
	}
}

// memLB is the i-th load balancer of the scale report's shape, on a VIP
// of 127.80.0.0/12.
func memLB(i int) *pb.LoadBalancer {
	lb := scaleLB(i)
	a := i + 1
	lb.Vip = &pb.VIPRequest{Pool: "bulk", Address: fmt.Sprintf("127.%d.%d.%d", 80+a/65536, a/256%256, a%256)}
	return lb
}
