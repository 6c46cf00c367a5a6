package tenantsync_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// bulkLB is load balancer i of a first sync: one TCP listener, ten members.
func bulkLB(i int) *pb.LoadBalancer {
	var members []string
	for j := range 10 {
		a := i*10 + j + 1
		members = append(members, fmt.Sprintf("10.%d.%d.%d:8080", 100+a>>16, a>>8&255, a&255))
	}
	return tcpLB(fmt.Sprintf("svc-bulk-%05d", i), &pb.VIPRequest{Pool: "bulk"}, members...)
}

// seedBulk stores a /18 pool and tenant bulk with quotas for n load
// balancers of ten members.
func (h *host) seedBulk(t testing.TB, n int) {
	t.Helper()
	q := uint32(max(n, 100))
	objs := []*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "bulk", Cidrs: []string{"127.0.128.0/18"}, Mode: "static"}),
		api.Wrap(&pb.Tenant{Name: "bulk", Domains: []string{"bulk.example"}, Networks: []string{"10.0.0.0/8"}, Pools: []string{"bulk"},
			Quotas: &pb.Quotas{LoadBalancers: q, Addresses: q, Listeners: q, Members: 10 * q}}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.node.Apply(ctx, &pb.ApplyRequest{Objects: objs}, false); err != nil {
		t.Fatal(err)
	}
}

// firstSync sends n load balancers in changes of 256 without waiting for
// acks, as the agent does, and returns when every ack came.
func firstSync(t testing.TB, a *agentStream, n int) time.Duration {
	t.Helper()
	start := time.Now()
	batches := (n + tenantsync.DefaultMaxBatch - 1) / tenantsync.DefaultMaxBatch
	first := a.seq + 1
	// Acks are read while changes are sent, as the agent does: a stream
	// whose acks nobody reads stops taking changes.
	done := make(chan error, 1)
	go func() {
		for want := first; want < first+uint64(batches); {
			m, err := a.stream.Recv()
			if err != nil {
				done <- fmt.Errorf("wait for ack %d: %w", want, err)
				return
			}
			ack := m.GetAck()
			if ack == nil {
				continue
			}
			if ack.GetSeq() != want {
				done <- fmt.Errorf("ack for %d, want %d", ack.GetSeq(), want)
				return
			}
			for _, r := range ack.GetResults() {
				if r.GetError() != "" || r.GetAddress() == "" {
					done <- fmt.Errorf("change %d: %s: %q (address %q)", want, r.GetName(), r.GetError(), r.GetAddress())
					return
				}
			}
			want++
		}
		done <- nil
	}()
	for i := 0; i < n; i += tenantsync.DefaultMaxBatch {
		var lbs []*pb.LoadBalancer
		for j := i; j < min(n, i+tenantsync.DefaultMaxBatch); j++ {
			lbs = append(lbs, bulkLB(j))
		}
		ch := upsert(lbs...)
		a.seq++
		ch.Seq = a.seq
		if err := a.stream.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkStreamFirstSync writes TEAPOT_SYNC_BENCH_N (default 10,000)
// load balancers of ten members through one stream into a one-host
// cluster: the control plane's share of an agent's first sync.
func BenchmarkStreamFirstSync(b *testing.B) {
	n := 10000
	if env := os.Getenv("TEAPOT_SYNC_BENCH_N"); env != "" {
		v, err := strconv.Atoi(env)
		if err != nil || v < 1 || v > 16000 {
			b.Fatalf("TEAPOT_SYNC_BENCH_N: %q is not a number from 1 to 16000", env)
		}
		n = v
	}
	for _, inFlight := range []int{1, tenantsync.DefaultInFlight} {
		b.Run(fmt.Sprintf("inflight=%d", inFlight), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				h := startHost(b, tenantsync.Config{InFlight: inFlight})
				h.seedBulk(b, n)
				a := h.open(b, "bulk")
				rev0 := h.node.Revision()
				b.StartTimer()
				d := firstSync(b, a, n)
				b.StopTimer()
				b.ReportMetric(d.Seconds(), "s/sync")
				b.ReportMetric(float64(h.node.Revision()-rev0), "revisions")
				if objs, _ := h.node.LocalList(api.KindLoadBalancer); len(objs) != n {
					b.Fatalf("%d load balancers stored, want %d", len(objs), n)
				}
				b.StartTimer()
			}
		})
	}
}
