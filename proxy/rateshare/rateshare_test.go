package rateshare

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/ratelimit"
)

var key = []byte("cluster key")

// A datagram reads back as written; one changed byte, another key, or a
// truncation is rejected; entries that do not fit go to the next one.
func TestWire(t *testing.T) {
	t.Parallel()
	at := time.UnixMicro(time.Now().UnixMicro())
	in := []entry{{"acme", "acme/web http requests", 7}, {"globex", "globex/api routes[2]", 1 << 20}}
	b, rest := encode(key, 1, 2, at, in)
	if len(rest) != 0 {
		t.Fatalf("%d entries left", len(rest))
	}
	d, err := decode(key, b)
	if err != nil || d.inc != 1 || d.seq != 2 || !d.at.Equal(at) || len(d.entries) != 2 || d.entries[1] != in[1] {
		t.Fatalf("decoded %+v, %v", d, err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		if _, err := decode(key, c); err == nil {
			t.Fatalf("byte %d changed and accepted", i)
		}
	}
	if _, err := decode([]byte("other"), b); err == nil {
		t.Fatal("another key accepted")
	}
	if _, err := decode(key, b[:len(b)-1]); err == nil {
		t.Fatal("truncated accepted")
	}
	var many []entry
	for i := range 1000 {
		many = append(many, entry{"acme", fmt.Sprintf("acme/lb%03d routes[0]", i), 1})
	}
	n := 0
	for len(many) > 0 {
		b, many = encode(key, 1, 3, at, many)
		if len(b) > maxDatagram {
			t.Fatalf("datagram of %d bytes", len(b))
		}
		d, err := decode(key, b)
		if err != nil {
			t.Fatal(err)
		}
		n += len(d.entries)
	}
	if n != 1000 {
		t.Fatalf("%d entries arrived", n)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := encode(key, 1, 2, time.Now(), []entry{{"acme", "x", 1}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = decode(key, b) })
}

type source struct {
	mu     sync.Mutex
	drain  map[string]int64
	debits map[string]int64
}

func (s *source) DrainSharedRates(f func(tenant, id string, n int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.drain {
		f("acme", id, n)
	}
	clear(s.drain)
}

func (s *source) DebitSharedRate(tenant, id string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.debits[tenant+" "+id] += n
}

func (s *source) DrainSharedKeys(func(tenant, id string, k ratelimit.SharedKey, n uint32)) {}

func (s *source) DebitSharedKey(tenant, id string, k ratelimit.SharedKey, n int64) {}

func (s *source) debit(k string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.debits[k]
}

// Two sharers over real UDP sockets: what one drains the other debits,
// once; a replayed, stale or forged datagram is rejected.
func TestShareOverUDP(t *testing.T) {
	t.Parallel()
	src := []*source{{drain: map[string]int64{}, debits: map[string]int64{}}, {drain: map[string]int64{}, debits: map[string]int64{}}}
	var sh []*Sharer
	for i := range 2 {
		s, err := New(Config{Addr: "127.0.0.1:0", Key: key, Interval: 10 * time.Millisecond, Source: src[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sh = append(sh, s)
	}
	sh[0].SetPeers([]netip.AddrPort{sh[1].Addr()})
	sh[1].SetPeers([]netip.AddrPort{sh[0].Addr()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, s := range sh {
		go s.Run(ctx)
	}
	src[0].mu.Lock()
	src[0].drain["acme/web http requests"] = 42
	src[0].mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for src[1].debit("acme acme/web http requests") != 42 {
		if time.Now().After(deadline) {
			t.Fatalf("debited %d, want 42", src[1].debit("acme acme/web http requests"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A replay of a datagram taken, one from a minute ago, and a forged one.
	d := datagram{inc: 99, seq: 5, at: time.Now()}
	if !sh[1].fresh(d, time.Now()) || sh[1].fresh(d, time.Now()) {
		t.Fatal("a replayed datagram was taken twice")
	}
	if sh[1].fresh(datagram{inc: 100, seq: 1, at: time.Now().Add(-time.Minute)}, time.Now()) {
		t.Fatal("a stale datagram was taken")
	}
	forged, _ := encode([]byte("not the key"), 7, 1, time.Now(), []entry{{"acme", "acme/web http requests", 1000}})
	before := sh[1].Stats().Rejected
	c := sh[0].conn
	if _, err := c.WriteToUDPAddrPort(forged, sh[1].Addr()); err != nil {
		t.Fatal(err)
	}
	for sh[1].Stats().Rejected == before {
		if time.Now().After(deadline) {
			t.Fatal("the forged datagram was not rejected")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := src[1].debit("acme acme/web http requests"); n != 42 {
		t.Fatalf("debited %d after the forged datagram", n)
	}
}
