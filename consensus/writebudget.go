package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The write budget: the encoded bytes a tenant's agents may have written a
// second (quotas.writeBytesPerSecond), through every host together. Every
// write goes through the leader's write loop, where its cost grows with
// its bytes, so the leader keeps the one bucket per tenant: a stream on
// any host asks it before it writes (ChargeWrites), and a tenant with
// streams to every host gets the rate once, not once per host.
const (
	// writeBurstSeconds is the burst in seconds of the rate.
	writeBurstSeconds = 8
	// chargeTimeout bounds a follower's question to the leader; past it,
	// or when the leader cannot answer (none, or an earlier release), the
	// host charges its own bucket (WriteCharge.Local).
	chargeTimeout = 2 * time.Second
)

// WriteBurst is the write budget's burst of a tenant whose quotas are q:
// eight seconds of its rate, and at least what it may store, so that an
// agent's first sync of everything its tenant may hold is never slowed.
func WriteBurst(q *pb.Quotas) int {
	return int(max(q.GetWriteBytesPerSecond()*writeBurstSeconds, q.GetStoredBytes()))
}

// WriteCharge is what charging a tenant's writes answered.
type WriteCharge struct {
	// Wait is how long the writer waits before it writes (0: at once).
	Wait time.Duration
	// Rate and Burst are the tenant's budget, in bytes.
	Rate, Burst int
	// Local: the leader could not be asked, and this host's own bucket
	// was charged (the budget then holds per host until it can).
	Local bool
}

// ChargeWrites takes bytes of tenant's writes from its write budget, at
// the leader, going into debt when it is spent, and says how long the
// writer must wait before it writes. Nothing is refused.
func (n *Node) ChargeWrites(ctx context.Context, tenant string, bytes int) (WriteCharge, error) {
	if n.IsLeader() {
		return n.budgets.charge(tenant, bytes, n.localQuotas(tenant), time.Now()), nil
	}
	if _, addr := n.leaderAPI(); addr != "" {
		c, err := n.peers.cluster(addr)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, chargeTimeout)
			var resp *pb.ChargeWritesResponse
			resp, err = c.ChargeWrites(cctx, &pb.ChargeWritesRequest{Tenant: tenant, Bytes: uint64(bytes)})
			cancel()
			if err == nil {
				return WriteCharge{Wait: time.Duration(resp.GetWaitNanos()), Rate: int(resp.GetRate()), Burst: int(resp.GetBurst())}, nil
			}
		}
		if ctx.Err() != nil {
			return WriteCharge{}, ctx.Err()
		}
		n.budgets.warn(n, err)
	}
	ch := n.budgets.charge(tenant, bytes, n.localQuotas(tenant), time.Now())
	ch.Local = true
	return ch, nil
}

// ChargeWrites is the leader's side of Node.ChargeWrites.
func (s *clusterService) ChargeWrites(ctx context.Context, req *pb.ChargeWritesRequest) (*pb.ChargeWritesResponse, error) {
	if !s.n.IsLeader() {
		return nil, status.Error(codes.Unavailable, "not the leader")
	}
	if req.GetTenant() == "" {
		return nil, status.Error(codes.InvalidArgument, "no tenant")
	}
	ch := s.n.budgets.charge(req.GetTenant(), int(min(req.GetBytes(), 1<<40)), s.n.localQuotas(req.GetTenant()), time.Now())
	return &pb.ChargeWritesResponse{WaitNanos: int64(ch.Wait), Rate: uint64(ch.Rate), Burst: uint64(ch.Burst)}, nil
}

// localQuotas are tenant's quotas in this host's state (the defaults when
// it is not there).
func (n *Node) localQuotas(tenant string) *pb.Quotas {
	n.fsm.mu.RLock()
	o := n.fsm.st.get(api.KindTenant, keyOf(&pb.ObjectRef{Kind: api.KindTenant, Name: tenant}))
	n.fsm.mu.RUnlock()
	return api.EffectiveQuotas(o.GetTenant())
}

// writeBudgets are the tenants' byte buckets this host keeps: the
// cluster's while it leads, its own when it cannot ask the leader.
type writeBudgets struct {
	mu      sync.Mutex
	buckets map[string]*byteBucket
	warned  time.Time // last log line saying the leader was not asked
}

// charge takes bytes from tenant's bucket at the rate and burst of q and
// returns the wait.
func (w *writeBudgets) charge(tenant string, bytes int, q *pb.Quotas, now time.Time) WriteCharge {
	rate, burst := int(q.GetWriteBytesPerSecond()), WriteBurst(q)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buckets == nil {
		w.buckets = map[string]*byteBucket{}
	}
	b := w.buckets[tenant]
	if b == nil {
		b = &byteBucket{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: now}
		w.buckets[tenant] = b
	} else {
		b.set(float64(rate), float64(burst), now)
	}
	return WriteCharge{Wait: b.reserve(float64(bytes), now), Rate: rate, Burst: burst}
}

// warn logs, at most once a minute, that a host charged its own bucket.
func (w *writeBudgets) warn(n *Node, err error) {
	w.mu.Lock()
	due := time.Since(w.warned) > time.Minute
	if due {
		w.warned = time.Now()
	}
	w.mu.Unlock()
	if due {
		if s, ok := status.FromError(err); ok && s.Code() == codes.Unimplemented {
			err = fmt.Errorf("the leader's release keeps no write budgets: %w", errors.ErrUnsupported)
		}
		n.log.Warn("write budget: the leader was not asked; this host charges its own until it can", "err", err)
	}
}

// byteBucket is a token bucket that goes into debt: a reservation larger
// than what is saved waits for the debt to be paid.
type byteBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (b *byteBucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// reserve takes n tokens and returns how long the caller waits.
func (b *byteBucket) reserve(n float64, now time.Time) time.Duration {
	b.refill(now)
	b.tokens -= n
	if b.tokens >= 0 || b.rate <= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// set changes the rate and the burst, keeping what was saved (at most the
// new burst). A debt is kept when the rate falls; when it rises the debt
// is forgiven and what the burst grew by is added: the operator raised it
// so that the waiting ends.
func (b *byteBucket) set(rate, burst float64, now time.Time) {
	if b.rate == rate && b.burst == burst {
		return
	}
	b.refill(now)
	if rate > b.rate {
		b.tokens = max(b.tokens, 0) + max(burst-b.burst, 0)
	}
	b.rate, b.burst = rate, burst
	b.tokens = min(b.tokens, b.burst)
}
