package scenarios

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/client"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Sizes of the consensus benchmarks. Each runs once per invocation: use
// -benchtime 1x (make bench does).
const (
	seqWrites        = 500              // sequential writes per target
	concClients      = 64               // concurrent clients
	concWrites       = 3000             // writes shared by the concurrent clients
	concCap          = 30 * time.Second // the concurrent run stops issuing writes after this
	failoverKills    = 10               // leader kills in the failover benchmark
	failoverWriters  = 4                // writers during a leader kill
	failoverPause    = 5 * time.Millisecond
	failoverDeadline = 30 * time.Second // a kill with no acknowledged write by then fails
	writeTimeout     = 10 * time.Second // one write
	scaleSteps       = 3                // steps of the state-size benchmark
	scaleStep        = 1000             // tenants created per step
)

// dial opens an admin connection to one node with the cluster's admin config.
func (c *cluster) dial(tb testing.TB, n *node) *client.Conn {
	tb.Helper()
	cfg, err := client.LoadConfig(c.adminConf())
	if err != nil {
		tb.Fatalf("load %s: %v", c.adminConf(), err)
	}
	conn, err := client.Dial(context.Background(), cfg, n.apiAddr)
	if err != nil {
		tb.Fatalf("dial %s: %v", n.id, err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// writeTenant stores tenant name with a load-balancer quota of seq and
// returns how long the write took. The commit benchmarks update a few
// tenants over and over with a new quota each time, so that every write is a
// real change that goes through Raft while the state stays small: they
// measure consensus, not how validation scales with the number of objects
// (BenchmarkCreateAtScale measures that).
func writeTenant(conn *client.Conn, name string, seq int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	t := &pb.Tenant{Name: name, Quotas: &pb.Quotas{LoadBalancers: uint32(seq)}}
	start := time.Now()
	_, err := conn.Admin.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(t)}})
	return time.Since(start), err
}

// latencies summarises a set of durations.
type latencies []time.Duration

// percentile returns the nearest-rank p-th percentile (0 < p <= 100).
func (l latencies) percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	rank := int(math.Ceil(float64(len(s))*p/100)) - 1
	return s[max(0, min(rank, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func BenchmarkCommitSequential(b *testing.B) {
	c := newCluster(b)
	c.start3()
	leader := c.waitLeader()
	var follower *node
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	targets := []struct {
		label string
		n     *node
	}{{"leader", leader}, {"follower", follower}}

	b.ResetTimer()
	fmt.Printf("\nsequential commits, one client, %d writes each (3 voters, loopback)\n", seqWrites)
	fmt.Printf("%-10s %10s %10s %10s %10s\n", "via", "p50 ms", "p99 ms", "max ms", "ops/s")
	for _, tg := range targets {
		conn := c.dial(b, tg.n)
		name := "t-seq-" + tg.label
		if _, err := writeTenant(conn, name, 0); err != nil {
			b.Fatalf("first write via %s: %v", tg.label, err)
		}
		lat := make(latencies, 0, seqWrites)
		start := time.Now()
		for i := range seqWrites {
			d, err := writeTenant(conn, name, i+1)
			if err != nil {
				b.Fatalf("write %d via %s: %v", i, tg.label, err)
			}
			lat = append(lat, d)
		}
		rate := float64(seqWrites) / time.Since(start).Seconds()
		fmt.Printf("%-10s %10.2f %10.2f %10.2f %10.0f\n", tg.label, ms(lat.percentile(50)), ms(lat.percentile(99)), ms(lat.percentile(100)), rate)
		b.ReportMetric(ms(lat.percentile(50)), "p50-ms-via-"+tg.label)
		b.ReportMetric(ms(lat.percentile(99)), "p99-ms-via-"+tg.label)
		b.ReportMetric(rate, "ops/s-via-"+tg.label)
	}
	b.ReportMetric(0, "ns/op")
}

func BenchmarkCommitConcurrent(b *testing.B) {
	c := newCluster(b)
	c.start3()
	leader := c.waitLeader()
	conns := make([]*client.Conn, concClients)
	for i := range conns {
		conns[i] = c.dial(b, leader)
		if _, err := writeTenant(conns[i], fmt.Sprintf("t-conc-%d", i), 0); err != nil {
			b.Fatalf("first write of client %d: %v", i, err)
		}
	}

	b.ResetTimer()
	var (
		issued atomic.Int64
		errs   atomic.Int64
		mu     sync.Mutex
		lat    = make(latencies, 0, concWrites)
		wg     sync.WaitGroup
	)
	stopAt := time.Now().Add(concCap)
	start := time.Now()
	for ci, conn := range conns {
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				i := issued.Add(1)
				if i > concWrites {
					return
				}
				d, err := writeTenant(conn, fmt.Sprintf("t-conc-%d", ci), int(i))
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	rate := float64(len(lat)) / elapsed.Seconds()
	fmt.Printf("\nconcurrent commits, %d clients via the leader, %d writes (cap %s; 3 voters, loopback)\n", concClients, concWrites, concCap)
	fmt.Printf("%10s %10s %10s %10s %10s %10s\n", "acked", "errors", "p50 ms", "p99 ms", "max ms", "ops/s")
	fmt.Printf("%10d %10d %10.2f %10.2f %10.2f %10.0f\n", len(lat), errs.Load(), ms(lat.percentile(50)), ms(lat.percentile(99)), ms(lat.percentile(100)), rate)
	if errs.Load() > 0 {
		b.Errorf("%d of the concurrent writes failed", errs.Load())
	}
	b.ReportMetric(ms(lat.percentile(50)), "p50-ms")
	b.ReportMetric(ms(lat.percentile(99)), "p99-ms")
	b.ReportMetric(rate, "ops/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLeaderFailover measures, for each of several leader kills, the
// time from kill -9 of the leader to the first write that was issued after
// the kill and acknowledged. Writers go through a surviving node.
func BenchmarkLeaderFailover(b *testing.B) {
	c := newCluster(b)
	c.start3()
	conns := map[*node]*client.Conn{}
	for _, n := range c.nodes {
		conns[n] = c.dial(b, n)
	}

	b.ResetTimer()
	var gaps latencies
	totalErrs := 0
	for round := range failoverKills {
		leader := c.waitLeader()
		var via *node
		for _, n := range c.nodes {
			if n != leader {
				via = n
				break
			}
		}
		gap, failed := failoverRound(b, c, conns[via], leader, round)
		gaps = append(gaps, gap)
		totalErrs += failed
		c.restart(leader)
		c.waitCaughtUp(leader, 3)
	}
	b.StopTimer()

	fmt.Printf("\nleader kill -9 -> first acknowledged write issued after it (%d kills, %d writers via a follower, 3 voters, loopback)\n", failoverKills, failoverWriters)
	fmt.Printf("%10s %10s %10s %10s %14s\n", "min ms", "median ms", "p99 ms", "max ms", "failed writes")
	fmt.Printf("%10.1f %10.1f %10.1f %10.1f %14d\n", ms(slices.Min(gaps)), ms(gaps.percentile(50)), ms(gaps.percentile(99)), ms(gaps.percentile(100)), totalErrs)
	var each []string
	for _, g := range gaps {
		each = append(each, fmt.Sprintf("%.0f", ms(g)))
	}
	fmt.Printf("each kill (ms): %v\n", each)
	b.ReportMetric(ms(gaps.percentile(50)), "median-ms")
	b.ReportMetric(ms(gaps.percentile(99)), "p99-ms")
	b.ReportMetric(ms(gaps.percentile(100)), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// failoverRound runs writers through conn, kills leader, and returns the
// time from the kill to the first acknowledged write issued after it, and
// how many writes failed meanwhile.
func failoverRound(b *testing.B, c *cluster, conn *client.Conn, leader *node, round int) (time.Duration, int) {
	b.Helper()
	var (
		mu       sync.Mutex
		killedAt time.Time // zero until the kill
		firstAck time.Time // first ack of a write issued after the kill
		warm     = make(chan struct{})
		acked    = make(chan struct{})
		quit     = make(chan struct{})
		wg       sync.WaitGroup
		warmOnce sync.Once
		ackOnce  sync.Once
		failed   int
	)
	for w := range failoverWriters {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				mu.Lock()
				issuedAfterKill := !killedAt.IsZero()
				mu.Unlock()
				_, err := writeTenant(conn, fmt.Sprintf("t-failover-%d", w), round*1_000_000+i+1)
				done := time.Now()
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					continue
				}
				warmOnce.Do(func() { close(warm) })
				if issuedAfterKill {
					mu.Lock()
					if firstAck.IsZero() || done.Before(firstAck) {
						firstAck = done
					}
					mu.Unlock()
					ackOnce.Do(func() { close(acked) })
				}
				time.Sleep(failoverPause)
			}
		})
	}
	defer func() {
		close(quit)
		wg.Wait()
	}()

	select {
	case <-warm:
	case <-time.After(failoverDeadline):
		b.Fatalf("kill %d: no write acknowledged before the kill", round+1)
	}
	exited := c.signalKill(leader)
	if exited == nil {
		b.Fatalf("kill %d: leader %s is not running", round+1, leader.id)
	}
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	<-exited
	select {
	case <-acked:
	case <-time.After(failoverDeadline):
		b.Fatalf("kill %d of leader %s: no write acknowledged within %s", round+1, leader.id, failoverDeadline)
	}
	mu.Lock()
	defer mu.Unlock()
	return firstAck.Sub(killedAt), failed
}

// BenchmarkCreateAtScale creates tenants one after another through the
// leader and reports the latency of each step of scaleStep creates, to show
// how the cost of a write grows with the number of stored objects.
func BenchmarkCreateAtScale(b *testing.B) {
	c := newCluster(b)
	c.start3()
	conn := c.dial(b, c.waitLeader())

	b.ResetTimer()
	fmt.Printf("\nsequential tenant creates through the leader, by number of tenants already stored (3 voters, loopback)\n")
	fmt.Printf("%16s %10s %10s %10s\n", "tenants before", "p50 ms", "p99 ms", "ops/s")
	for step := range scaleSteps {
		lat := make(latencies, 0, scaleStep)
		start := time.Now()
		for i := range scaleStep {
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			t0 := time.Now()
			_, err := conn.Admin.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{
				api.Wrap(&pb.Tenant{Name: fmt.Sprintf("t-scale-%d", step*scaleStep+i)}),
			}})
			cancel()
			if err != nil {
				b.Fatalf("create tenant %d: %v", step*scaleStep+i, err)
			}
			lat = append(lat, time.Since(t0))
		}
		rate := float64(scaleStep) / time.Since(start).Seconds()
		fmt.Printf("%16d %10.2f %10.2f %10.0f\n", step*scaleStep, ms(lat.percentile(50)), ms(lat.percentile(99)), rate)
		b.ReportMetric(ms(lat.percentile(50)), fmt.Sprintf("p50-ms-from-%d", step*scaleStep))
	}
	b.ReportMetric(0, "ns/op")
}
