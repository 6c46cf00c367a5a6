package balance

import (
	"math/rand/v2"
	"sort"
)

// leastRequest samples two members at random in proportion to their
// weights and takes the one with fewer requests in flight per unit of
// weight. With no load it spreads by weight; under load it avoids the
// busy members without the herding of a strict least-loaded choice.
type leastRequest struct {
	members []*Member
	// cum holds the running sums of the weights; total is the last one.
	cum   []uint64
	total uint64
}

var _ Balancer = (*leastRequest)(nil)

func newLeastRequest(members []*Member) *leastRequest {
	l := &leastRequest{members: members, cum: make([]uint64, len(members))}
	for i, m := range members {
		l.total += uint64(m.Weight)
		l.cum[i] = l.total
	}
	return l
}

// sampleTries bounds the random draws before falling back to a scan of the
// usable members.
const sampleTries = 3

func (l *leastRequest) Pick([]byte) *Member {
	a := l.sample(nil)
	if a == nil {
		return nil
	}
	b := l.sample(a)
	if b == nil {
		return a
	}
	// Fewer in flight per weight wins: la/wa < lb/wb.
	la, lb := a.inFlight(), b.inFlight()
	if lb*int64(a.Weight) < la*int64(b.Weight) {
		return b
	}
	return a
}

// sample draws a usable member other than not, weighted.
func (l *leastRequest) sample(not *Member) *Member {
	if l.total == 0 {
		return nil
	}
	for range sampleTries {
		r := rand.Uint64N(l.total)
		m := l.members[sort.Search(len(l.cum), func(i int) bool { return l.cum[i] > r })]
		if m != not && m.Usable() {
			return m
		}
	}
	var sum uint64
	for _, m := range l.members {
		if m != not && m.Usable() {
			sum += uint64(m.Weight)
		}
	}
	if sum == 0 {
		return nil
	}
	r := rand.Uint64N(sum)
	for _, m := range l.members {
		if m != not && m.Usable() {
			if r < uint64(m.Weight) {
				return m
			}
			r -= uint64(m.Weight)
		}
	}
	return nil
}
