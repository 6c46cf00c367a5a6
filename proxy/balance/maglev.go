package balance

import (
	"slices"
	"sync"
	"sync/atomic"
)

// maglev is Maglev consistent hashing (Eisenbud et al., NSDI 2016) with
// weights: each member fills lookup-table slots along its own permutation,
// weighted members taking turns in proportion to their weights. Removing a
// member moves the keys it held and few others.
//
// The table size is the smallest prime at least 100 times the number of
// weighted members (and at least 1009), the paper's bound for an even
// spread; a fixed 65537 would cost 256 KiB per pool, too much for
// thousands of pools. Tables are built on first use.
//
// Pick looks the key up in the table over all weighted members. When that
// member is unhealthy it uses a second table built over the members usable
// right now (rebuilt when that set changes), so keys of healthy members
// stay where they are.
type maglev struct {
	members []*Member
	once    sync.Once
	all     *maglevTable
	mu      sync.Mutex
	live    atomic.Pointer[maglevTable]
}

type maglevTable struct {
	// slots hold member indexes.
	slots []uint32
	// set is the bitset of members the table was built over.
	set []uint64
}

var _ Balancer = (*maglev)(nil)

func newMaglev(members []*Member) *maglev { return &maglev{members: members} }

func (h *maglev) Pick(key []byte) *Member {
	h.once.Do(func() {
		h.all = buildMaglev(h.members, func(int) bool { return true })
	})
	if h.all == nil {
		return nil
	}
	k := hashKey(key)
	if m := h.members[h.all.slots[k%uint64(len(h.all.slots))]]; m.Usable() {
		return m
	}
	t := h.liveTable()
	if t == nil {
		return nil
	}
	if m := h.members[t.slots[k%uint64(len(t.slots))]]; m.Usable() {
		return m
	}
	return nil
}

// liveTable returns the table over the usable members, rebuilding it when
// the set has changed since the last build.
func (h *maglev) liveTable() *maglevTable {
	set := make([]uint64, (len(h.members)+63)/64)
	n := 0
	for i, m := range h.members {
		if m.Usable() {
			set[i/64] |= 1 << (i % 64)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if t := h.live.Load(); t != nil && slices.Equal(t.set, set) {
		return t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.live.Load(); t != nil && slices.Equal(t.set, set) {
		return t
	}
	t := buildMaglev(h.members, func(i int) bool { return set[i/64]&(1<<(i%64)) != 0 })
	h.live.Store(t)
	return t
}

// buildMaglev fills a table over the weighted members whose index is in;
// nil when there is none.
func buildMaglev(members []*Member, in func(i int) bool) *maglevTable {
	type perm struct {
		idx        uint32
		weight     uint64
		next, skip uint64
		credit     uint64
	}
	var ps []perm
	set := make([]uint64, (len(members)+63)/64)
	var maxW uint64
	for i, m := range members {
		if m.Weight == 0 || !in(i) {
			continue
		}
		set[i/64] |= 1 << (i % 64)
		ps = append(ps, perm{idx: uint32(i), weight: uint64(m.Weight)})
		maxW = max(maxW, uint64(m.Weight))
	}
	if len(ps) == 0 {
		return nil
	}
	size := uint64(nextPrime(max(100*len(ps), 1009)))
	var buf []byte
	for i := range ps {
		buf = members[ps[i].idx].Addr.AppendTo(buf[:0])
		ps[i].next = hashSeed(buf, 0x9e3779b97f4a7c15) % size
		ps[i].skip = hashSeed(buf, 0xc2b2ae3d27d4eb4f)%(size-1) + 1
	}
	const empty = ^uint32(0)
	slots := make([]uint32, size)
	for i := range slots {
		slots[i] = empty
	}
	for filled := uint64(0); filled < size; {
		for i := range ps {
			p := &ps[i]
			p.credit += p.weight
			if p.credit < maxW {
				continue
			}
			p.credit -= maxW
			for slots[p.next] != empty {
				p.next = (p.next + p.skip) % size
			}
			slots[p.next] = p.idx
			p.next = (p.next + p.skip) % size
			if filled++; filled == size {
				break
			}
		}
	}
	return &maglevTable{slots: slots, set: set}
}

func nextPrime(n int) int {
	for ; ; n++ {
		if isPrime(n) {
			return n
		}
	}
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// hashSeed is 64-bit FNV-1a from a seed, finished with the splitmix64
// mixer. It is fixed so that every host builds the same tables.
func hashSeed(b []byte, seed uint64) uint64 {
	h := uint64(14695981039346656037) ^ seed
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func hashKey(key []byte) uint64 { return hashSeed(key, 0) }
