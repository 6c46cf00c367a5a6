package dns

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// Verdict is what response-rate limiting makes of one UDP response.
type Verdict uint8

const (
	// Send the response.
	Send Verdict = iota
	// Slip: send it truncated and empty, so that a real client retries
	// over TCP, which a spoofed source cannot.
	Slip
	// Drop it.
	Drop
)

// rrlBuckets is the number of buckets: the table's memory is fixed
// (rrlBuckets × 32 bytes), whatever the number of sources. Sources whose
// keys share a bucket share its rate, which errs on the side of fewer
// responses.
const (
	rrlBuckets = 1 << 16
	rrlStripes = 64
	// rrlWindow is how many seconds of responses a bucket can save up
	// (BIND's window).
	rrlWindow = 15
)

// rrl limits the UDP responses each client prefix (/24 IPv4, /56 IPv6)
// gets per response key (the name and type asked; the zone for NXDOMAIN;
// one key for errors), as BIND's response-rate-limit does: rate a second
// with a window of credit, then every slip-th response over it truncated
// and the others dropped.
type rrl struct {
	rate  float64
	slip  uint32
	seed  maphash.Seed
	mu    [rrlStripes]sync.Mutex
	table []bucket
}

type bucket struct {
	tokens float64
	last   int64 // unix nanoseconds
	over   uint32
}

func newRRL(rate, slip int) *rrl {
	if rate <= 0 {
		return nil
	}
	return &rrl{rate: float64(rate), slip: uint32(slip), seed: maphash.MakeSeed(), table: make([]bucket, rrlBuckets)}
}

// prefixOf is the client prefix responses are counted for.
func prefixOf(a netip.Addr) netip.Addr {
	a = a.Unmap()
	bits := 56
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p.Addr()
}

// check counts one response to src under key and says what to do with it.
func (r *rrl) check(src netip.Addr, res Result, now time.Time) Verdict {
	if r == nil {
		return Send
	}
	var h maphash.Hash
	h.SetSeed(r.seed)
	p := prefixOf(src).As16()
	h.Write(p[:])
	h.WriteByte(byte(res.Kind))
	h.WriteString(res.Key)
	if res.Kind == KindAnswer {
		h.WriteByte(byte(res.Qtype >> 8))
		h.WriteByte(byte(res.Qtype))
	}
	sum := h.Sum64()
	i := sum & (rrlBuckets - 1)
	mu := &r.mu[sum>>58&(rrlStripes-1)]
	mu.Lock()
	defer mu.Unlock()
	b := &r.table[i]
	t := now.UnixNano()
	if b.last == 0 {
		b.tokens = r.rate
	} else if el := t - b.last; el > 0 {
		b.tokens = min(b.tokens+float64(el)/1e9*r.rate, r.rate*rrlWindow)
	}
	b.last = t
	if b.tokens >= 1 {
		b.tokens--
		b.over = 0
		return Send
	}
	b.over++
	if r.slip > 0 && b.over%r.slip == 0 {
		return Slip
	}
	return Drop
}

// tenantBudget bounds the queries for each tenant's names a second on
// this host: a flood at one tenant's names spends its budget, not the
// others'.
type tenantBudget struct {
	rate float64
	mu   sync.Mutex
	b    map[string]*bucket
}

func newTenantBudget(rate int) *tenantBudget {
	return &tenantBudget{rate: float64(rate), b: map[string]*bucket{}}
}

func (tb *tenantBudget) allow(tenant string, now time.Time) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	b := tb.b[tenant]
	t := now.UnixNano()
	if b == nil {
		b = &bucket{tokens: tb.rate, last: t}
		tb.b[tenant] = b
	} else if el := t - b.last; el > 0 {
		b.tokens = min(b.tokens+float64(el)/1e9*tb.rate, tb.rate)
		b.last = t
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// forget drops the buckets of tenants that no longer have names.
func (tb *tenantBudget) forget(keep func(string) bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for k := range tb.b {
		if !keep(k) {
			delete(tb.b, k)
		}
	}
}
