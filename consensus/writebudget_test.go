package consensus

import (
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A tenant's write budget is the leader's: what the streams of every host
// charge comes out of one bucket, so a tenant writing through three hosts
// gets the rate once, and an operator's raise, read from the leader's
// state, forgives the debt.
func TestWriteBudgetIsKeptByTheLeader(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	leader := leaderOf(t, hosts)
	ten := tenant("acme")
	ten.GetTenant().Quotas = &pb.Quotas{WriteBytesPerSecond: 1000, StoredBytes: 10000} // burst 10,000 bytes
	apply(t, leader.node, ten)
	waitFor(t, "every host has the quota", func() bool {
		for _, h := range hosts {
			if h.node.localQuotas("acme").GetWriteBytesPerSecond() != 1000 {
				return false
			}
		}
		return true
	})
	// Each host charges 4,000 bytes: the first two fit the burst, the
	// third runs 2,000 bytes into debt (2 s at 1,000 bytes a second).
	// With a bucket per host none of them would wait.
	var waits []time.Duration
	for _, h := range hosts {
		ch, err := h.node.ChargeWrites(ctxT(t), "acme", 4000)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Local {
			t.Fatalf("%s charged its own bucket, not the leader's", h.cfg.NodeID)
		}
		if ch.Rate != 1000 || ch.Burst != 10000 {
			t.Fatalf("%s: rate %d, burst %d; want 1000 and 10000", h.cfg.NodeID, ch.Rate, ch.Burst)
		}
		waits = append(waits, ch.Wait)
	}
	if waits[0] != 0 || waits[1] != 0 || waits[2] < 1900*time.Millisecond || waits[2] > 2*time.Second {
		t.Fatalf("waits %v; want 0, 0 and about 2s (one bucket at the leader)", waits)
	}
	// Another tenant's budget is its own.
	if ch, err := hosts[1].node.ChargeWrites(ctxT(t), "beta", 4000); err != nil || ch.Wait != 0 || ch.Rate != int(api.DefaultWriteBytesPerSecond) {
		t.Fatalf("beta's charge: %+v, %v; want no wait at the default rate", ch, err)
	}
	// The operator raises the rate: the debt is forgiven.
	ten.GetTenant().Quotas.WriteBytesPerSecond = 100000
	apply(t, leader.node, ten)
	if ch, err := leader.node.ChargeWrites(ctxT(t), "acme", 4000); err != nil || ch.Wait != 0 || ch.Rate != 100000 {
		t.Fatalf("after the raise: %+v, %v; want no wait at 100000 bytes a second", ch, err)
	}
}
