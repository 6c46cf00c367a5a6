package tenantsync_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// bigLB is a load balancer of beta's of about 1.3 MB: 1,000 routes (the
// default routesPerLb) with 1,024-byte paths and long host names, within
// every count quota. gen changes one path so that each write is a change.
func bigLB(name string, gen int) *pb.LoadBalancer {
	lb := &pb.LoadBalancer{
		Name: name, Vip: &pb.VIPRequest{Pool: "public"},
		Listeners: []*pb.Listener{{Port: 80, Protocol: "http"}},
		Pools:     map[string]*pb.BackendPool{"web": {Members: []*pb.Member{{Address: "10.30.0.1:80"}}}},
	}
	host := strings.Repeat("h", 60) + "." + strings.Repeat("o", 60) + "." + strings.Repeat("s", 60) + ".beta.example"
	for i := range 1000 {
		p := fmt.Sprintf("/%04d/%08d/", i, gen)
		lb.Routes = append(lb.Routes, &pb.Route{Host: host, Path: p + strings.Repeat("p", 1024-len(p)), Pool: "web"})
	}
	return lb
}

// latencies is a sorted set of durations.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func (l latencies) String() string {
	return fmt.Sprintf("%d writes, p50 %.1f ms, p99 %.1f ms, max %.1f ms", len(l),
		float64(l.pct(0.50).Microseconds())/1000, float64(l.pct(0.99).Microseconds())/1000, float64(l.pct(1).Microseconds())/1000)
}

// smallWrites has acme change one member of its load balancer, one change
// after the other, for d, and returns each change's time from send to ack.
func smallWrites(t *testing.T, a *agentStream, d time.Duration, from int) latencies {
	t.Helper()
	end := time.Now().Add(d)
	var n int
	return smallWritesUntil(t, a, func() bool { n++; return n > 10 && !time.Now().Before(end) }, from)
}

// smallWritesUntil is smallWrites until done says so.
func smallWritesUntil(t *testing.T, a *agentStream, done func() bool, from int) latencies {
	t.Helper()
	var out latencies
	for i := from; !done(); i++ {
		start := time.Now()
		lb := tcpLB("svc-a", &pb.VIPRequest{Pool: "public"}, fmt.Sprintf("10.20.%d.%d:80", i/250%250, 1+i%250))
		if e := result(t, a.change(upsert(lb)), "svc-a").GetError(); e != "" {
			t.Fatalf("acme's write refused: %s", e)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// A tenant that rewrites load balancers of 1.3 MB in a loop, on four
// streams, is slowed to its write budget and told why; its neighbour's
// small writes, and the operator's through the admin API, keep their pace
// meanwhile.
func TestLargeWritesDoNotDelayANeighbour(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	// beta may write 64 KiB a second, a quarter of the default: under
	// the race detector on a loaded 2-core machine (a load of 30) beta's
	// four streams wrote 9-10 load balancers of 1.2 MB in 60 s, under
	// the default's 256 KiB, and were never throttled.
	h.setQuotas(t, "beta", &pb.Quotas{WriteBytesPerSecond: 64 << 10})
	acme := h.open(t, "acme")
	// The operator writes through the admin API all along, one write
	// after the other (a tenant's domains).
	admin := pb.NewAdminClient(h.dial(t, pki.Identity{Role: pki.RoleAdmin, Name: "admin"}))
	// 0 quiet, 1 beta's burst, 2 beta throttled, 3 beta stopping, 4
	// quiet again, 5 over
	var phase atomic.Int32
	var adminMu sync.Mutex
	adminLat := make([]latencies, 5)
	adminDone := make(chan struct{})
	go func() {
		defer close(adminDone)
		for i := 0; phase.Load() < 5; i++ {
			ph := phase.Load()
			start := time.Now()
			tn := &pb.Tenant{Name: "gamma", Domains: []string{fmt.Sprintf("g%d.example", i)}}
			if _, err := admin.Apply(context.Background(), &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(tn)}}); err != nil {
				t.Errorf("admin write: %v", err)
				return
			}
			if d := time.Since(start); ph < 5 && ph != 3 && phase.Load() == ph {
				adminMu.Lock()
				adminLat[ph] = append(adminLat[ph], d)
				adminMu.Unlock()
			}
		}
	}()
	quiet := smallWrites(t, acme, 2*time.Second, 0)
	phase.Store(1)

	const streams = 4
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bigWrites atomic.Int64
	var throttles atomic.Int64
	var firstThrottle atomic.Value
	// How long each of beta's writes took once its budget let it go, from
	// its send or its throttle notice's end to its ack: all of them
	// (betaLat), and those acked while beta waits for its budget (phase
	// 2) that waited (betaHeld).
	var betaMu sync.Mutex
	var betaLat, betaHeld latencies
	var betas []*agentStream
	for s := range streams {
		b := h.open(t, "beta")
		betas = append(betas, b)
		name := fmt.Sprintf("svc-big-%d", s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; ctx.Err() == nil; gen++ {
				b.seq++
				ch := upsert(bigLB(name, gen))
				ch.Seq = b.seq
				from, held := time.Now(), false
				if err := b.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
					return
				}
				for {
					m, err := b.stream.Recv()
					if err != nil {
						return
					}
					if th := m.GetStatus().GetThrottled(); th != nil {
						throttles.Add(1)
						firstThrottle.CompareAndSwap(nil, th)
						from, held = time.Now().Add(th.GetWait().AsDuration()), true
					}
					if m.GetAck() != nil {
						bigWrites.Add(1)
						d := max(0, time.Since(from))
						betaMu.Lock()
						betaLat = append(betaLat, d)
						if held && phase.Load() == 2 {
							betaHeld = append(betaHeld, d)
						}
						betaMu.Unlock()
						break
					}
				}
			}
		}()
	}
	// acme writes while beta spends its burst, and for 8 s once beta
	// waits for its budget. On a loaded 2-core machine beta's first
	// writes took more than 20 s under the race detector.
	burstEnd := time.Now().Add(60 * time.Second)
	burst := smallWritesUntil(t, acme, func() bool { return throttles.Load() > 0 || time.Now().After(burstEnd) }, 1000)
	if throttles.Load() == 0 {
		t.Fatalf("beta wrote %d load balancers of 1.2 MB in 60 s and was never throttled", bigWrites.Load())
	}
	phase.Store(2)
	abusedStart := time.Now()
	abused := smallWrites(t, acme, 8*time.Second, 10000)
	phase.Store(3)
	abusedTime := time.Since(abusedStart)
	cancel()
	for _, b := range betas {
		b.cancel()
	}
	wg.Wait()
	// acme's and the operator's writes alone again, under the load the
	// rest of the machine puts on it now.
	phase.Store(4)
	afterEnd, afterCap := time.Now().Add(2*time.Second), time.Now().Add(30*time.Second)
	var n int
	after := smallWritesUntil(t, acme, func() bool {
		// At least 2 s and 10 writes of acme's, and 5 of the operator's
		// (whose write begun before beta stopped may wait for beta's last
		// writes in the loop), for 30 s at most.
		n++
		adminMu.Lock()
		admins := len(adminLat[4])
		adminMu.Unlock()
		now := time.Now()
		return n > 10 && !now.Before(afterEnd) && (admins >= 5 || now.After(afterCap))
	}, 20000)
	phase.Store(5)
	<-adminDone
	betaMu.Lock()
	betaWrites, betaHeldWrites := slices.Clone(betaLat), slices.Clone(betaHeld)
	betaMu.Unlock()
	t.Logf("acme's writes alone: %s; alone again after beta's: %s", quiet, after)
	t.Logf("acme's writes while beta spends its burst: %s", burst)
	t.Logf("acme's writes while beta rewrites %d load balancers of %d bytes on %d streams: %s (beta wrote %d, throttled %d times; its writes once let go: %s; those that waited, acked then: %s)",
		streams, proto.Size(bigLB("svc-big-0", 0)), streams, abused, bigWrites.Load(), throttles.Load(), betaWrites, betaHeldWrites)
	t.Logf("the admin API's writes: alone %s and %s; while beta spends its burst %s; while beta is throttled %s", adminLat[0], adminLat[4], adminLat[1], adminLat[2])
	if th, _ := firstThrottle.Load().(*pb.SyncThrottle); th != nil {
		t.Logf("beta was told: %s", th.GetReason())
	}
	// Most of acme's writes never meet one of beta's: beta holds the
	// leader's write loop the share of the time its budget allows. Those
	// that do wait for one of beta's writes at most, which the loop takes
	// in turns with acme's (70-170 ms each without -race; 0.4-1.4 s with
	// -race on a 2-core machine at load 12, 5-9 s at load 34). Without
	// the budget and the turns acme's median was 1.6-2.2 s and its p99
	// 2.4-2.6 s.
	//
	// The bounds are measured in the run: the baseline of each
	// percentile is the slower of the two measured alone, before and
	// after beta's writes, so that a machine whose load grew meanwhile
	// does not count against beta; the p99 may add one of beta's writes
	// (the median of their times once let go; at least 1.5 s), and the
	// median 250 ms or, when beta's writes are slow enough to hold the
	// loop a large share of the time at its budget (share: the time of
	// those that waited for it over the phase's), that share of the
	// median of beta's writes.
	var betaTime time.Duration
	for _, d := range betaHeldWrites {
		betaTime += d
	}
	share := min(1, betaTime.Seconds()/abusedTime.Seconds())
	slack50 := max(250*time.Millisecond, time.Duration(share*float64(betaWrites.pct(0.50))))
	slack99 := max(1500*time.Millisecond, betaWrites.pct(0.50))
	t.Logf("beta's writes held the write loop %.0f%% of the %s acme measured while beta was throttled: the median may add %s, the p99 %s", 100*share, abusedTime.Round(time.Millisecond), slack50, slack99)
	check := func(who string, alone []latencies, abused latencies) {
		t.Helper()
		p50, p99 := max(alone[0].pct(0.50), alone[1].pct(0.50)), max(alone[0].pct(0.99), alone[1].pct(0.99))
		if p, bound := abused.pct(0.50), p50+slack50; p > bound {
			t.Errorf("%s write p50 %s while beta writes large objects, want at most %s (alone: %s and %s)", who, p, bound, alone[0].pct(0.50), alone[1].pct(0.50))
		}
		if p, bound := abused.pct(0.99), p99+slack99; p > bound {
			t.Errorf("%s write p99 %s while beta writes large objects, want at most %s (alone: %s and %s; beta's median write %s)", who, p, bound, alone[0].pct(0.99), alone[1].pct(0.99), betaWrites.pct(0.50))
		}
	}
	check("acme's", []latencies{quiet, after}, abused)
	// The operator's writes take their turns as acme's do.
	check("the admin API's", []latencies{adminLat[0], adminLat[4]}, adminLat[2])
	if throttles.Load() == 0 {
		t.Errorf("beta was never told that its writes are throttled")
	}
}

// quotas.writeBytesPerSecond is honoured as set: a change past the
// tenant's budget waits, and the agent is told how long, why and which
// load balancers, before it is written; the host records an event. Once
// the operator raises the quota, the same writes go at once.
func TestWriteBudgetFollowsTheQuota(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	var mu sync.Mutex
	var events []*pb.Event
	h := startHost(t, tenantsync.Config{Events: func(ev *pb.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	}})
	h.seed(t)
	setQuotas := func(q *pb.Quotas) {
		t.Helper()
		tn := &pb.Tenant{Name: "beta", Domains: []string{"beta.example"}, Networks: []string{"10.30.0.0/16", "127.0.0.0/8"}, Pools: []string{"public"}, Quotas: q}
		if _, err := h.node.Apply(context.Background(), &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(tn)}}, false); err != nil {
			t.Fatal(err)
		}
	}
	// 20 KB a second, a burst of 160 KB (eight seconds' worth, more than
	// the 100 KB it may store).
	setQuotas(&pb.Quotas{WriteBytesPerSecond: 20_000, StoredBytes: 100_000, MembersPerPool: 3000})
	b := h.open(t, "beta")
	lb := func(name string, gen int) *pb.LoadBalancer {
		l := tcpLB(name, &pb.VIPRequest{Pool: "public"}, "10.30.0.1:80")
		for i := range 2300 {
			l.Pools["web"].Members = append(l.Pools["web"].Members, &pb.Member{Address: fmt.Sprintf("10.30.%d.%d:%d", i/250, 1+i%250, 1000+gen)})
		}
		return l
	}
	size := proto.Size(lb("svc-x", 0))
	if size < 42_000 || size > 48_000 {
		t.Fatalf("a load balancer of %d bytes, want 42-48 KB", size)
	}
	// Writes of 45 KB, one after the other: three fit the burst of 160
	// KB; one of the next few (the budget refills while each is written)
	// waits until its bytes are paid for.
	var th *pb.SyncThrottle
	writes := 0
	for gen := 0; th == nil && gen < 10; gen++ {
		b.seq++
		ch := upsert(lb("svc-x", gen))
		ch.Seq = b.seq
		start := time.Now()
		if err := b.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
			t.Fatal(err)
		}
		for {
			m := b.recvWithin(30 * time.Second)
			if m == nil {
				t.Fatalf("change %d: no ack within 30 s", ch.Seq)
			}
			if got := m.GetStatus().GetThrottled(); got != nil {
				th = got
			}
			if ack := m.GetAck(); ack != nil {
				if e := result(t, ack, "svc-x").GetError(); e != "" {
					t.Fatalf("change %d refused: %s", ch.Seq, e)
				}
				if th != nil && time.Since(start) < th.GetWait().AsDuration() {
					t.Fatalf("change %d acked after %s, before its wait of %s", ch.Seq, time.Since(start), th.GetWait().AsDuration())
				}
				break
			}
		}
		writes++
	}
	if th == nil {
		t.Fatalf("%d writes of %d bytes against a burst of 160 KB and 20 KB a second, and the agent was never told it waits", writes, size)
	}
	if writes < 4 {
		t.Errorf("change %d of %d bytes waits within the burst of 160 KB", writes, size)
	}
	if w := th.GetWait().AsDuration(); w <= 0 || w > 45*time.Second/20 {
		t.Errorf("change %d waits %s, want at most what it costs (2.25 s)", writes, w)
	}
	for _, want := range []string{"quotas.writeBytesPerSecond", "tenant beta", "19.5 KiB (20000 bytes) a second", fmt.Sprintf("(%d bytes)", size)} {
		if !strings.Contains(th.GetReason(), want) {
			t.Errorf("the agent was told %q, want it to say %q", th.GetReason(), want)
		}
	}
	if th.GetSeq() != uint64(writes) || fmt.Sprint(th.GetNames()) != "[svc-x]" {
		t.Errorf("throttle of change %d naming %v, want change %d naming svc-x", th.GetSeq(), th.GetNames(), writes)
	}
	mu.Lock()
	var throttled []*pb.Event
	for _, ev := range events {
		if ev.GetType() == observe.EventTenantThrottled {
			throttled = append(throttled, ev)
		}
	}
	mu.Unlock()
	if len(throttled) != 1 || throttled[0].GetTenant() != "beta" || !strings.Contains(throttled[0].GetMessage(), "quotas.writeBytesPerSecond") {
		t.Errorf("host events %v, want one tenant-throttled event of beta naming the quota", throttled)
	}

	// Raised: the stream learns it from the watch (a status with the
	// tenant), and the same writes no longer wait.
	setQuotas(&pb.Quotas{WriteBytesPerSecond: 10 << 20, StoredBytes: 100_000, MembersPerPool: 3000})
	for {
		m := b.recvWithin(30 * time.Second)
		if m == nil {
			t.Fatal("no status with the raised quota within 30 s")
		}
		if m.GetStatus().GetTenant().GetQuotas().GetWriteBytesPerSecond() == 10<<20 {
			break
		}
	}
	for gen := 4; gen < 8; gen++ {
		b.seq++
		ch := upsert(lb("svc-x", gen))
		ch.Seq = b.seq
		if err := b.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
			t.Fatal(err)
		}
		for {
			m := b.recvWithin(30 * time.Second)
			if m == nil {
				t.Fatalf("change %d: no ack within 30 s", ch.Seq)
			}
			if got := m.GetStatus().GetThrottled(); got != nil {
				t.Fatalf("change %d throttled at 10 MiB a second: %s", ch.Seq, got.GetReason())
			}
			if m.GetAck() != nil {
				break
			}
		}
	}
}
