// Package balance picks a backend member for a connection or request:
// smooth weighted round robin, least-request with the power of two
// choices, and Maglev consistent hashing on a key (the client IP or a
// header value).
//
// A balancer is built once per compiled pool and is safe for concurrent
// use. It reads each member's live State on every pick: a member with
// weight 0 is drained and an unhealthy one is skipped; when no member is
// usable, Pick returns nil and the caller refuses the connection at once.
// Maglev tables are deterministic (they depend only on member addresses
// and weights), so every LB host maps a key to the same member.
package balance

import (
	"net/netip"
	"sync"
)

// Algorithm selects a balancer.
type Algorithm uint8

// Algorithms.
const (
	RoundRobin Algorithm = iota
	LeastRequest
	Hash
)

// State is a member's live state, shared across config changes.
type State interface {
	// Healthy reports whether the member may receive new traffic.
	Healthy() bool
	// InFlight is the number of requests or connections it serves now.
	InFlight() int64
}

// Member is one backend a balancer may pick.
type Member struct {
	Addr netip.AddrPort
	// Weight is relative; 0 drains the member.
	Weight uint32
	// State may be nil: always healthy, never loaded.
	State State
}

// Usable reports whether m may be picked now.
func (m *Member) Usable() bool {
	return m.Weight > 0 && (m.State == nil || m.State.Healthy())
}

func (m *Member) inFlight() int64 {
	if m.State == nil {
		return 0
	}
	return m.State.InFlight()
}

// Balancer picks a member.
type Balancer interface {
	// Pick returns a usable member, or nil when there is none. key is
	// hashed by Hash balancers and ignored by the others; callers without
	// a key (a missing header) pass the client IP.
	Pick(key []byte) *Member
}

// New returns a balancer over members, which it keeps and never modifies.
func New(alg Algorithm, members []*Member) Balancer {
	switch alg {
	case LeastRequest:
		return newLeastRequest(members)
	case Hash:
		return newMaglev(members)
	}
	return &roundRobin{members: members, current: make([]int64, len(members))}
}

// roundRobin is nginx's smooth weighted round robin: every pick adds each
// usable member's weight to its current value, takes the member with the
// highest value and subtracts the total from it. Weights {5,1,1} give
// a a b a c a a.
type roundRobin struct {
	mu      sync.Mutex
	members []*Member
	current []int64
}

var _ Balancer = (*roundRobin)(nil)

func (r *roundRobin) Pick([]byte) *Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	best, total := -1, int64(0)
	for i, m := range r.members {
		if !m.Usable() {
			continue
		}
		w := int64(m.Weight)
		r.current[i] += w
		total += w
		if best < 0 || r.current[i] > r.current[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	r.current[best] -= total
	return r.members[best]
}

// PickAddr picks for a client address, the key of a Hash balancer (its 16
// bytes). A key passed to Pick through the interface escapes, an
// allocation on every pick; here a Hash balancer is called directly.
func PickAddr(b Balancer, a netip.Addr) *Member {
	if h, ok := b.(*maglev); ok {
		key := a.As16()
		return h.Pick(key[:])
	}
	return pickAddr(b, a)
}

func pickAddr(b Balancer, a netip.Addr) *Member {
	key := a.As16()
	return b.Pick(key[:])
}
