package l7

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrMemberLimit: a request found no member connection within its
// tenant's descriptor budget, or its client connection holds as many
// member connections as it may (503).
var ErrMemberLimit = errors.New("member connections at their limit")

// Descriptors is a descriptor budget (a tenant's, within the host's).
// Implementations must be safe for concurrent use and allocate nothing.
type Descriptors interface {
	// TakeDescriptor charges one descriptor; false when the budget is
	// spent.
	TakeDescriptor() bool
	// ReleaseDescriptor gives back one that TakeDescriptor charged.
	ReleaseDescriptor()
}

// MemberBudget charges the member connections of the backends that share
// it (a tenant's) to a descriptor budget: each connection takes a
// descriptor when it is dialled and gives it back when it closes, so idle
// pooled connections count too. When the budget is spent a dial closes
// an idle connection of the same budget to make room, or waits briefly
// for one to close, and fails with ErrMemberLimit otherwise. Connections
// of different budgets never share a pool.
//
// The same tenant's host CPU budget, when set, counts what its HTTP/2
// members make the proxy read that no request is charged for where it is
// relayed (h2UpConn.chargeFrame, onData).
type MemberBudget struct {
	d   Descriptors
	cpu CPU

	mu sync.Mutex
	// pools are this budget's member pools, for a dial at the limit to
	// find an idle connection to close.
	pools map[*memberPool]struct{}
	// waiters counts the dials waiting for the budget (charge); at most
	// maxMemberWaiters wait, the others fail at once.
	waiters atomic.Int32
	// h2held is the HTTP/2 response body bytes the budget's members sent
	// that no client has taken yet (MaxTenantH2Bodies).
	h2held atomic.Int64
}

// holdResponse charges n response body bytes; false, charging nothing,
// when that would pass MaxTenantH2Bodies. A nil budget charges nothing.
func (b *MemberBudget) holdResponse(n int64) bool {
	if b == nil || n == 0 {
		return true
	}
	for {
		v := b.h2held.Load()
		if v+n > MaxTenantH2Bodies {
			return false
		}
		if b.h2held.CompareAndSwap(v, v+n) {
			return true
		}
	}
}

// releaseResponse gives back n bytes holdResponse charged.
func (b *MemberBudget) releaseResponse(n int64) {
	if b != nil && n != 0 {
		b.h2held.Add(-n)
	}
}

// NewMemberBudget returns a budget charging d, and cpu (when not nil)
// with the work of its members' HTTP/2 frames.
func NewMemberBudget(d Descriptors, cpu CPU) *MemberBudget {
	return &MemberBudget{d: d, cpu: cpu, pools: map[*memberPool]struct{}{}}
}

// tenantCPU is the CPU budget that b's members' frames count in; nil for
// a nil budget or none set.
func (b *MemberBudget) tenantCPU() CPU {
	if b == nil {
		return nil
	}
	return b.cpu
}

func (b *MemberBudget) addPool(p *memberPool) {
	b.mu.Lock()
	b.pools[p] = struct{}{}
	b.mu.Unlock()
}

func (b *MemberBudget) dropPool(p *memberPool) {
	b.mu.Lock()
	delete(b.pools, p)
	b.mu.Unlock()
}

// evictIdle closes the oldest idle connection of one of the budget's
// pools, giving its descriptor back; false when none is idle.
func (b *MemberBudget) evictIdle() bool {
	b.mu.Lock()
	var victim *upConn
	var oldest int64
	var from *memberPool
	for p := range b.pools {
		p.mu.Lock()
		if len(p.idle) > 0 && (victim == nil || p.idle[0].idleAt < oldest) {
			victim, oldest, from = p.idle[0], p.idle[0].idleAt, p
		}
		p.mu.Unlock()
	}
	if victim != nil {
		from.mu.Lock()
		// It may have been taken meanwhile; close whatever is oldest now.
		if len(from.idle) > 0 {
			victim = from.idle[0]
			n := copy(from.idle, from.idle[1:])
			from.idle[n] = nil
			from.idle = from.idle[:n]
		} else {
			victim = nil
		}
		from.mu.Unlock()
	}
	b.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.close()
	return true
}

// memberWaitStep is the first pause of a dial waiting for its budget; it
// doubles up to memberWaitMaxStep.
const (
	memberWaitStep    = time.Millisecond
	memberWaitMaxStep = 16 * time.Millisecond
)

// maxMemberWaiters bounds the dials of one budget (one tenant) that wait
// for it at once. Each waiter wakes every memberWaitMaxStep to look for a
// free or idle connection: 2,000 HTTP/2 streams of one tenant waiting
// made the host's run queue hundreds of milliseconds long, and every
// other tenant's connections and the admin API waited in it. Beyond the
// bound a dial fails at once (503), charged to the tenant whose budget
// is spent.
const maxMemberWaiters = 64

// charge takes a descriptor of key's budget for a new member connection:
// at once when the budget has one, else by closing an idle connection of
// the budget, else by waiting up to Config.MemberBudgetWait for a
// connection of the budget to close.
func (s *Server) charge(ctx context.Context, key poolKey) error {
	b := key.budget
	if b == nil || b.d.TakeDescriptor() {
		return nil
	}
	if b.evictIdle() && b.d.TakeDescriptor() {
		return nil
	}
	if n := b.waiters.Add(1); n > maxMemberWaiters {
		b.waiters.Add(-1)
		return fmt.Errorf("%w: the tenant's descriptor budget is spent and %d requests already wait for it", ErrMemberLimit, maxMemberWaiters)
	}
	defer b.waiters.Add(-1)
	deadline := time.Now().Add(s.cfg.MemberBudgetWait)
	step := memberWaitStep
	for {
		if b.evictIdle() && b.d.TakeDescriptor() {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: the tenant's descriptor budget is spent (waited %v)", ErrMemberLimit, s.cfg.MemberBudgetWait)
		}
		t := time.NewTimer(min(step, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", ErrMemberLimit, ctx.Err())
		case <-t.C:
		}
		if b.d.TakeDescriptor() {
			return nil
		}
		step = min(2*step, memberWaitMaxStep)
	}
}

// memberSlots bounds the member connections one client connection holds
// at once (Config.MaxMembersPerConn): an HTTP/2 client's streams to
// HTTP/1.1 members each hold one while they run.
type memberSlots struct {
	once sync.Once
	ch   chan struct{}
}

// acquire takes a slot, waiting up to wait for a stream of the same
// connection to give one back.
func (m *memberSlots) acquire(ctx context.Context, n int, wait time.Duration) error {
	m.once.Do(func() { m.ch = make(chan struct{}, n) })
	select {
	case m.ch <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: the client connection holds %d member connections", ErrMemberLimit, n)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrMemberLimit, ctx.Err())
	}
}

func (m *memberSlots) release() { <-m.ch }
