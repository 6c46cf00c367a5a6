package tenantsync

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Write budget: the encoded bytes a tenant's agents write a second
// through all hosts' streams together (quotas.writeBytesPerSecond), charged
// before a change goes to the leader, which keeps the budget
// (consensus.Node.ChargeWrites). A change's cost in the leader's write
// loop, in the Raft log and in every host's apply grows with its bytes,
// which the objects-per-second bucket does not see: one load balancer of
// 2 MiB costs as much as thousands of small ones.
const (
	// throttleEventEvery bounds the host events saying that a tenant's
	// writes wait, per tenant and host.
	throttleEventEvery = 10 * time.Second
	// maxThrottleNames bounds the load balancers a throttle notice names.
	maxThrottleNames = 16
)

// changeBytes is what a change costs the write budget: the encoded load
// balancers and certificates it writes. Removals write (almost) nothing
// and are paid for by the objects bucket.
func changeBytes(ch *pb.SyncChange) int {
	n := 0
	for _, up := range ch.GetUpserts() {
		n += proto.Size(up.GetLoadBalancer())
	}
	for _, c := range ch.GetCertificates() {
		n += proto.Size(c)
	}
	return n
}

// writeBudgets remembers the throttle events recorded on this host.
type writeBudgets struct {
	mu     sync.Mutex
	events map[string]time.Time // last throttle event per tenant
}

// eventDue reports whether a throttle event of tenant may be recorded now.
func (w *writeBudgets) eventDue(tenant string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.events == nil {
		w.events = map[string]time.Time{}
	}
	if last, ok := w.events[tenant]; ok && now.Sub(last) < throttleEventEvery {
		return false
	}
	w.events[tenant] = now
	return true
}

// chargeWrite takes a change's bytes from the tenant's write budget, which
// the leader keeps for the whole cluster (Store.ChargeWrites), and waits
// until they are paid for. A change that must wait is
// announced to the agent first (a status carrying SyncThrottle: how long,
// why, how to raise it) and to the host's events (at most once per
// throttleEventEvery and tenant), and the wait is counted in the
// tenant's metrics. Only the tenant's own streams wait: the budget is the
// tenant's, and the stream's next message is not read meanwhile, so the
// agent's sends back up.
func (s *Server) chargeWrite(ctx context.Context, st *stream, ch *pb.SyncChange) error {
	n := changeBytes(ch)
	if n == 0 {
		return nil
	}
	tenant := st.caller.tenant
	charge, err := s.cfg.Store.ChargeWrites(ctx, tenant, n)
	if err != nil {
		return fmt.Errorf("charge the write budget: %w", err)
	}
	d := charge.Wait
	if d <= 0 {
		return nil
	}
	now := time.Now()
	where := "across the LB cluster"
	if charge.Local {
		where = "through this LB host (the leader could not be asked)"
	}
	reason := fmt.Sprintf("change %d writes %s; tenant %s may write %s a second %s (burst %s), so it waits %s: raise quotas.writeBytesPerSecond to write faster",
		ch.GetSeq(), mib(n), tenant, mib(charge.Rate), where, mib(charge.Burst), d.Round(time.Millisecond))
	th := &pb.SyncThrottle{Seq: ch.GetSeq(), Wait: durationpb.New(d), Reason: reason}
	for _, up := range ch.GetUpserts() {
		if len(th.Names) == maxThrottleNames {
			break
		}
		th.Names = append(th.Names, api.Clip(up.GetLoadBalancer().GetName(), api.MaxQuoted))
	}
	if err := st.send(&pb.SyncResponse{Msg: &pb.SyncResponse_Status{Status: &pb.SyncStatus{Throttled: th, Revision: s.cfg.Store.Revision()}}}); err != nil {
		return fmt.Errorf("tell the agent its change waits: %w", err)
	}
	s.metrics.throttled(tenant, d)
	if s.cfg.Events != nil && s.budgets.eventDue(tenant, now) {
		s.cfg.Events(&pb.Event{Type: observe.EventTenantThrottled, Severity: observe.Warning, Tenant: tenant, Message: api.Clip(reason, api.MaxReason)})
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// mib renders a byte count as "1.9 MiB (1992294 bytes)", or in KiB below
// a MiB.
func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	}
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}
