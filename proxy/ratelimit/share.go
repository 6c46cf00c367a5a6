package ratelimit

// Counts shared between hosts. Several LB hosts serve one VIP by ECMP, so
// a total limit counted on each host alone gives clients up to N times
// the limit. Each host therefore tells the others, every interval, how
// many arrivals each of its total limits admitted (Drain), and each host
// counts what the others admitted against its own limiter of the same id
// as if it had admitted them itself (Debit): every admission anywhere
// moves every host's theoretical arrival time on by one interval, once
// its report arrives. Over any window W the hosts together admit at most
//
//	rate × W + burst + (N−1) × (rate × (T + d) + burst)
//
// with T the reporting interval and d the report's delivery: a host
// admits what its own count allows, and what it has not yet heard of is
// at most what each other host admitted in the last T + d. While the
// load holds, the long-run rate is the limit (the excess does not grow
// with W), and a host whose peers get no traffic gives the whole limit
// alone. A host that hears nothing from its peers (they are down, or
// the reports are lost) falls back to counting alone.

// Drain calls f with the id of each Total limit in service and the
// arrivals it admitted since the last Drain, for those that admitted any.
func (t *Table) Drain(f func(id string, n int64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, l := range t.limiters {
		if !l.spec.Total {
			continue
		}
		if n := l.admitted.Swap(0); n > 0 {
			f(id, n)
		}
	}
}

// Debit counts n arrivals another host admitted at now against the
// Total limit of id, if this table has it in service. At most a second's
// worth and a burst is counted from one report.
func (t *Table) Debit(id string, n int64, now int64) {
	t.mu.Lock()
	l := t.limiters[id]
	t.mu.Unlock()
	if l == nil || !l.spec.Total || n <= 0 {
		return
	}
	n = min(n, int64(l.spec.Rate)+int64(l.spec.Burst))
	for {
		old := l.tat.Load()
		if l.tat.CompareAndSwap(old, max(old, now)+n*l.interval) {
			return
		}
	}
}

// Keys of per-client and per-header limits are shared the same way, but
// only once hot and only up to a bound per tenant, so that a tenant whose
// clients (or an attacker using its routes) bring a million keys cannot
// make the hosts exchange a million keys. A key is hot once it has
// admitted shareThreshold(burst) arrivals on a host since it was last
// shared (min(4, max(1, burst/4))); it is then queued in its tenant's hot
// list, which holds at most ShareCap keys between two drains; the host
// sends the queued keys' arrivals (DrainKeys) and the other hosts debit
// them against the same key (DebitKey: a client address, or a header
// value's SipHash under the cluster's key, the same on every host). A key
// that turns hot while the list is full is counted here alone until its
// next arrival finds room (Stats.Unshared). A key is not shared before it
// is hot, and forgets what it had not shared when it is dropped (a full
// table's sweep and eviction), so over a window W the hosts together
// admit for one key at most
//
//	rate × W + burst + (N−1) × (rate × (T + d) + burst + shareThreshold − 1)
//
// while its tenant's hot keys fit ShareCap and its table is not full, and
// up to the limit from each host past that. What a tenant can make one
// host send each drain is ShareCap keys of 21 bytes (a client address;
// 13 for a header value) per peer, plus each limit's name once.

// SharedKey is a per-client or per-header limit's key as hosts exchange
// it: a client address (IPv4-mapped, IPv6 by its /64; Hash 0), or a
// header value's hash (odd; Addr zero).
type SharedKey struct {
	Addr [16]byte
	Hash uint64
}

// shareThreshold is the arrivals a key of a limit of burst admits on a
// host before it is shared: a limit of small burst shares every arrival,
// one of larger burst waits for a few, which a key flood of one request a
// key never reaches.
func shareThreshold(burst uint32) uint32 { return min(4, max(1, burst/4)) }

// ShareCap is how many keys a tenant whose table holds maxKeys may share
// per drain (rateshare's 50 ms): maxKeys/160, at least 16 (at the 50 ms
// interval, maxKeys/8 a second: 2,500 at the default 20,000).
func ShareCap(maxKeys int) int { return max(16, maxKeys/160) }

// SetHashKey sets the key header values are hashed under; every host of a
// cluster uses the same, so that their keys match. Keys of header values
// counted under the previous key are orphaned (they expire).
func (t *Table) SetHashKey(k [16]byte) {
	sk := sipKeyOf(k)
	t.hash.Store(&sk)
}

// SetShareCap bounds the keys shared per drain (0: none shared).
func (t *Table) SetShareCap(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n == t.shareCap {
		return
	}
	for _, k := range t.hot[min(n, len(t.hot)):] {
		if s, ok := t.keys[k]; ok {
			s.queued = false
			t.keys[k] = s
		}
	}
	hot := make([]key, min(n, len(t.hot)), n)
	copy(hot, t.hot)
	t.hot, t.shareCap = hot, n
}

// queue counts an arrival admitted here against s and queues its key
// once hot, if the hot list has room. t.mu is held.
func (t *Table) queue(k key, s *slot) {
	s.pending++
	if s.queued || s.pending < k.lim.shareAt {
		return
	}
	if len(t.hot) < t.shareCap {
		t.hot = append(t.hot, k)
		s.queued = true
		return
	}
	t.unshared.Add(1)
}

// DrainKeys calls f with each hot key and the arrivals it admitted here
// since it was last shared, and empties the hot list. f is called with
// the table locked and must not use it.
func (t *Table) DrainKeys(f func(id string, k SharedKey, n uint32)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, k := range t.hot {
		t.hot[i] = key{}
		s, ok := t.keys[k]
		if !ok || !s.queued {
			continue
		}
		if s.pending > 0 && !k.lim.retired.Load() {
			f(k.lim.id, SharedKey{Addr: k.addr, Hash: k.hash}, s.pending)
			t.shared.Add(1)
		}
		s.pending, s.queued = 0, false
		t.keys[k] = s
	}
	t.hot = t.hot[:0]
}

// DebitKey counts n arrivals another host admitted at now for key k of
// the per-client or per-header limit id, if this table has it in
// service: as Debit does for a total limit, at most a second's worth and
// a burst from one report. A key new here takes room in the table as a
// local one does; with none, the debit is dropped.
func (t *Table) DebitKey(id string, sk SharedKey, n int64, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.limiters[id]
	if l == nil || l.spec.Total || n <= 0 || sk.Hash != 0 && (sk.Hash&1 == 0 || sk.Addr != [16]byte{}) {
		return
	}
	n = min(n, int64(l.spec.Rate)+int64(l.spec.Burst))
	k := key{lim: l, addr: sk.Addr, hash: sk.Hash}
	s, had := t.keys[k]
	if !had {
		s.tat = -1 << 62
		if int64(len(t.keys)) >= t.max.Load() && !t.makeRoom(now) {
			return
		}
	}
	s.tat = max(s.tat, now) + n*l.interval
	t.keys[k] = s
	t.debits.Add(1)
}
