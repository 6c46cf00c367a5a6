package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// h3Keyed is h3Term with the keys the hosts of a cluster share.
type h3Keyed struct{ *h3Term }

func (h3Keyed) QUICKeys() (quic.StatelessResetKey, quic.TokenGeneratorKey) {
	return quic.StatelessResetKey{1, 2, 3}, quic.TokenGeneratorKey{4, 5, 6}
}

// TestHTTP3StatelessResetAfterTakeover: a host that takes over a VIP
// whose former host vanished without closing its QUIC connections (its
// socket gone, nothing sent) answers their next packet with a stateless
// reset, under the key the hosts share: the client learns at once that
// its connection is gone instead of at its idle timeout.
func TestHTTP3StatelessResetAfterTakeover(t *testing.T) {
	t.Parallel()
	main := startRoutingBackend(t, "main")
	port := freePort(t)
	lb := h3LB(port, map[string]*routingBackend{"main": main})
	lb.Routes = lb.Routes[:1]
	start := func() *Proxy {
		srv := l7.New(l7.Config{})
		t.Cleanup(func() { srv.Close() })
		p, _ := newProxy(t, Config{HTTP: h3Keyed{newH3Term(t, srv)}})
		update(t, p, lb)
		return p
	}
	a := start()
	target := vipAddr("127.0.0.2", port)
	key := snapshot.Key{Addr: mustAddrPort(t, target), Network: snapshot.TCP}
	c, err := dialH3(t, target)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "host a serving the connection", func() bool { return h3Conns(a, key) == 1 })
	// Host a vanishes: its UDP socket closes under quic-go, which can
	// tell no client, then the rest of it stops.
	a.mu.Lock()
	_ = a.sockets[key].h3.pc.Close()
	a.mu.Unlock()
	a.Close()
	start() // host b takes the VIP over
	// The client sends on its connection; host b knows nothing of it.
	s, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write(make([]byte, 1000))
	select {
	case <-c.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to the vanished host still looks alive")
	}
	if _, ok := errors.AsType[*quic.StatelessResetError](context.Cause(c.Context())); !ok {
		t.Fatalf("connection ended with %v, want a stateless reset", context.Cause(c.Context()))
	}
}
