package l7

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// TestPutBackAfterPrune: a connection goes back to the pool it was taken
// from without a lookup, and to the member's current pool once prune has
// dropped that one, where the next request, prune and the member budget's
// eviction find it.
func TestPutBackAfterPrune(t *testing.T) {
	var ps pools
	k := keyOf(netip.MustParseAddrPort("192.0.2.10:80"), HTTP1, &BackendOptions{Protocol: HTTP1})
	now := time.Now().UnixNano()
	u := &upConn{key: k, idleAt: now}
	if !ps.putBack(u, 4) {
		t.Fatal("a new connection was not kept")
	}
	p := ps.get(k)
	if u.pool != p || len(p.idle) != 1 {
		t.Fatalf("kept in %p (idle %d), the member's pool is %p", u.pool, len(p.idle), p)
	}
	if got := p.take(now, time.Hour); got != u {
		t.Fatalf("took %p, want %p", got, u)
	}
	// The pool is empty and unused since before now+1: prune drops it.
	ps.prune(0, now+1)
	if !ps.putBack(u, 4) {
		t.Fatal("the connection was not kept after its pool was dropped")
	}
	cur := ps.get(k)
	if cur == p {
		t.Fatal("prune left the empty pool in its map")
	}
	if u.pool != cur || len(cur.idle) != 1 || cur.idle[0] != u {
		t.Fatalf("after the prune the connection is in %p, the member's pool %p holds %d", u.pool, cur, len(cur.idle))
	}
	if len(p.idle) != 0 {
		t.Fatal("the dropped pool keeps a connection no one can take")
	}
	if got := cur.take(now, time.Hour); got != u {
		t.Fatalf("the next request took %p, want %p", got, u)
	}
	// A full pool refuses the connection, as before.
	for range 2 {
		if !ps.putBack(&upConn{key: k}, 2) {
			t.Fatal("a pool below its bound refused a connection")
		}
	}
	if ps.putBack(u, 2) {
		t.Fatal("a full pool kept a third connection")
	}
}

// TestPoolOfLast: the pool of a connection's previous request serves the
// next one to the same member without a lookup, not a request to another
// member, nor once prune has dropped it (a dropped pool keeps nothing, so
// every request would dial).
func TestPoolOfLast(t *testing.T) {
	s := &Server{cfg: Config{UpstreamIdleTimeout: time.Hour}}
	ps := &s.pools
	var last atomic.Pointer[memberPool]
	a := keyOf(netip.MustParseAddrPort("192.0.2.10:80"), HTTP1, &BackendOptions{Protocol: HTTP1})
	b := keyOf(netip.MustParseAddrPort("192.0.2.11:80"), HTTP1, &BackendOptions{Protocol: HTTP1})
	pa := ps.poolOf(a, &last)
	if pa != ps.get(a) || last.Load() != pa {
		t.Fatal("the first request's pool is not the member's")
	}
	if ps.poolOf(a, &last) != pa {
		t.Fatal("a second request to the member got another pool")
	}
	if pb := ps.poolOf(b, &last); pb == pa || pb != ps.get(b) {
		t.Fatal("a request to another member got the last request's pool")
	}
	ps.poolOf(a, &last)
	pa.used.Store(0)
	ps.prune(0, 1)
	cur := ps.poolOf(a, &last)
	if cur == pa {
		t.Fatal("a dropped pool served a request")
	}
	now := time.Now().UnixNano()
	if !ps.putBack(&upConn{key: a, idleAt: now}, 4) {
		t.Fatal("a connection was not kept")
	}
	if u, _ := s.takeIdle(a, now, &last); u == nil {
		t.Fatal("the connection kept in the member's pool was not taken")
	}
}

// tenantDialerLike is a Dialer of the shape serve gives members (a struct
// value naming the tenant).
type tenantDialerLike struct {
	any    any
	tenant string
}

func (tenantDialerLike) DialContext(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	return d.DialContext(ctx, network, addr)
}

// BenchmarkPoolOf: a member's pool found by its key (get) and by the
// pool of the previous request (poolOf), with a Dialer in the key as
// serve sets one.
func BenchmarkPoolOf(b *testing.B) {
	s := &Server{}
	opts := &BackendOptions{Protocol: HTTP1, Dialer: tenantDialerLike{tenant: "acme"}, Budget: NewMemberBudget(nil, nil)}
	k := keyOf(netip.MustParseAddrPort("192.0.2.10:80"), HTTP1, opts)
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			s.pools.get(k)
		}
	})
	b.Run("last", func(b *testing.B) {
		var last atomic.Pointer[memberPool]
		for b.Loop() {
			s.pools.poolOf(k, &last)
		}
	})
}
