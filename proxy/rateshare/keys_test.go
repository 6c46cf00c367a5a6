package rateshare

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/ratelimit"
)

// Keys read back as written, grouped by tenant and limit; a datagram of
// keys is refused by its MAC like one of totals; keys that do not fit go
// to the next datagram.
func TestWireKeys(t *testing.T) {
	t.Parallel()
	at := time.UnixMicro(time.Now().UnixMicro())
	addr := netip.MustParseAddr("192.0.2.7").As16()
	in := []keyEntry{
		{"acme", "acme/web routes[0]", ratelimit.SharedKey{Addr: addr}, 3},
		{"acme", "acme/web routes[0]", ratelimit.SharedKey{Hash: 0xdeadbeef01}, 4},
		{"globex", "globex/api routes[1]", ratelimit.SharedKey{Hash: 77}, 1 << 20},
	}
	b, rest := encodeKeys(key, 1, 2, at, in)
	if len(rest) != 0 {
		t.Fatalf("%d keys left", len(rest))
	}
	// Two groups: the first's name once for its two keys.
	if want := headerSize + (1 + 4 + 2 + 18 + 2) + 21 + 13 + (1 + 6 + 2 + 20 + 2) + 13 + macSize; len(b) != want {
		t.Fatalf("datagram of %d bytes, want %d", len(b), want)
	}
	d, err := decode(key, b)
	if err != nil || len(d.keys) != 3 || len(d.entries) != 0 {
		t.Fatalf("decoded %+v, %v", d, err)
	}
	for i := range in {
		if d.keys[i] != in[i] {
			t.Fatalf("key %d: %+v, want %+v", i, d.keys[i], in[i])
		}
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		if _, err := decode(key, c); err == nil {
			t.Fatalf("byte %d changed and accepted", i)
		}
	}
	var many []keyEntry
	for i := range 5000 {
		many = append(many, keyEntry{"acme", "acme/lb routes[" + strconv.Itoa(i/1000) + "]", ratelimit.SharedKey{Hash: uint64(2*i + 1)}, 1})
	}
	n := 0
	for len(many) > 0 {
		b, many = encodeKeys(key, 1, 3, at, many)
		if len(b) > maxDatagram {
			t.Fatalf("datagram of %d bytes", len(b))
		}
		d, err := decode(key, b)
		if err != nil {
			t.Fatal(err)
		}
		n += len(d.keys)
	}
	if n != 5000 {
		t.Fatalf("%d keys arrived", n)
	}
}

func FuzzDecodeKeys(f *testing.F) {
	b, _ := encodeKeys(key, 1, 2, time.Now(), []keyEntry{{"acme", "x", ratelimit.SharedKey{Hash: 3}, 1}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = decode(key, b) })
}

// tableSource shares one tenant's ratelimit.Table, as proxy.Proxy shares
// its tenants'.
type tableSource struct {
	t      *ratelimit.Table
	drains atomic.Int64
}

func (s *tableSource) DrainSharedRates(f func(tenant, id string, n int64)) {
	s.t.Drain(func(id string, n int64) { f("acme", id, n) })
}

func (s *tableSource) DebitSharedRate(tenant, id string, n int64) {
	s.t.Debit(id, n, ratelimit.Now())
}

func (s *tableSource) DrainSharedKeys(f func(tenant, id string, k ratelimit.SharedKey, n uint32)) {
	s.drains.Add(1)
	s.t.DrainKeys(func(id string, k ratelimit.SharedKey, n uint32) { f("acme", id, k, n) })
}

func (s *tableSource) DebitSharedKey(tenant, id string, k ratelimit.SharedKey, n int64) {
	s.t.DebitKey(id, k, n, ratelimit.Now())
}

// twoHosts starts two sharers over real UDP sockets, each with its
// tenant table of maxKeys keys sharing a limit of spec.
func twoHosts(t *testing.T, maxKeys int, spec ratelimit.Spec) ([2]*tableSource, [2]*ratelimit.Limiter, [2]*Sharer) {
	var src [2]*tableSource
	var lim [2]*ratelimit.Limiter
	var sh [2]*Sharer
	for i := range 2 {
		tb := ratelimit.NewTable(maxKeys)
		tb.SetHashKey([16]byte{1, 2, 3})
		tb.SetShareCap(ratelimit.ShareCap(maxKeys))
		lim[i] = tb.Acquire("acme/api routes[0]", spec)
		src[i] = &tableSource{t: tb}
		s, err := New(Config{Addr: "127.0.0.1:0", Key: key, Interval: DefaultInterval, Source: src[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sh[i] = s
	}
	sh[0].SetPeers([]netip.AddrPort{sh[1].Addr()})
	sh[1].SetPeers([]netip.AddrPort{sh[0].Addr()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, s := range sh {
		go s.Run(ctx)
	}
	return src, lim, sh
}

// A client whose requests alternate between two hosts, at 10× its
// per-header limit of 20 a second for 2 s, is admitted what share.go
// bounds for one key: rate × W + burst + (N−1) × (rate × (T + d) + burst +
// shareThreshold − 1), where counted on each host alone it would get
// twice the limit.
func TestKeyHeldAcrossTwoHosts(t *testing.T) {
	t.Parallel()
	const (
		rate, burst = 20, 8 // shareThreshold 2
		run         = 2 * time.Second
		every       = time.Second / (10 * rate)
		window      = 100 * time.Millisecond // T + d, d generous on a loaded machine
	)
	_, lim, _ := twoHosts(t, 1000, ratelimit.Spec{Rate: rate, Burst: burst, Header: "X-Api-Key"})
	admitted := 0
	start := time.Now()
	for i := 0; time.Since(start) < run; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
		if lim[i%2].AllowKey("key-of-one-client", ratelimit.Now()).OK {
			admitted++
		}
	}
	w := time.Since(start).Seconds()
	hi := rate*w + burst + (rate*window.Seconds() + burst + 1)
	lo := 0.8 * rate * w
	t.Logf("%.2fs: admitted %d (%.1f/s); bound [%.0f, %.0f]; counted alone about %.0f", w, admitted, float64(admitted)/w, lo, hi, 2*(rate*w+burst))
	if a := float64(admitted); a > hi || a < lo {
		t.Fatalf("admitted %d in %.2fs over two hosts; want %.0f to %.0f", admitted, w, lo, hi)
	}
}

// A million distinct header values, each sent to one host at once (a key
// flood), cannot grow the exchange past the tenant's bound: at most
// ShareCap keys a drain, 13 bytes each plus the limit's name per
// datagram; the keys past it are counted on their host alone.
func TestKeyFloodExchangeBounded(t *testing.T) {
	t.Parallel()
	const (
		maxKeys = 8000 // ShareCap 50 a drain
		values  = 1_000_000
	)
	// The documented bound: rateLimitKeys/160 a drain (2,500 keys a
	// second at the default 20,000).
	const capKeys = maxKeys / 160
	// shareThreshold 1: every arrival is hot.
	src, lim, sh := twoHosts(t, maxKeys, ratelimit.Spec{Rate: 1, Burst: 1, Header: "X-Api-Key"})
	buf := make([]byte, 0, 32)
	admitted := 0
	for i := range values {
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		if lim[0].AllowKey(string(buf), ratelimit.Now()).OK {
			admitted++
		}
	}
	// The last drain's keys reach the peer.
	deadline := time.Now().Add(10 * time.Second)
	drains := src[0].drains.Load()
	for src[0].drains.Load() < drains+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st, peer := sh[0].Stats(), src[1].t.Stats()
	drains = src[0].drains.Load()
	group := int64(1 + len("acme") + 2 + len("acme/api routes[0]") + 2)
	perDrain := int64(capKeys)*13 + group + headerSize + macSize // one datagram a drain: 50 × 13 bytes fit
	mine := src[0].t.Stats()
	t.Logf("%d values, %d admitted; %d drains; sent %d keys in %d datagrams, %d bytes (bound %d keys, %d bytes); this host's table %+v; the peer's %+v",
		values, admitted, drains, st.Keys, st.Sent, st.Bytes, int64(capKeys)*drains, perDrain*drains, mine, peer)
	if st.Keys > int64(capKeys)*drains || st.Bytes > perDrain*drains {
		t.Fatalf("sent %d keys, %d bytes in %d drains: over %d keys and %d bytes a drain", st.Keys, st.Bytes, drains, capKeys, perDrain)
	}
	if mine.Unshared == 0 {
		t.Fatal("no key was kept local: the flood never reached the bound")
	}
	if peer.Keys > maxKeys {
		t.Fatalf("the peer's table holds %d keys, over its bound %d", peer.Keys, maxKeys)
	}
	if st.Keys == 0 || peer.Debits == 0 {
		t.Fatalf("nothing shared: %+v, the peer %+v", st, peer)
	}
	if fmt.Sprint(sh[1].Stats().Rejected) != "0" {
		t.Fatalf("the peer rejected %d datagrams", sh[1].Stats().Rejected)
	}
}
