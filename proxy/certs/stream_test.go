package certs

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// TestStreamConfig: the configuration of a terminated tls-passthrough
// name serves the listener's uploaded certificate by server name, offers
// no ALPN protocol (a client asking for h2 gets none), and charges the
// tenant's handshake budget like an https listener (a ClientHello
// admitted, a signature made).
func TestStreamConfig(t *testing.T) {
	l := newHandshakeLab(t, nil)
	term := l.m.Terminator(greeter{})
	ls := listener("a", false, []string{"shop"}, "shop.a.example")
	ls.Protocol = snapshot.ProtoTLSPassthrough
	cfg := term.StreamConfig(ls)
	if cfg == nil || len(cfg.NextProtos) != 0 {
		t.Fatalf("stream configuration %v; want one without ALPN protocols", cfg)
	}
	if term.StreamConfig(&snapshot.Listener{Tenant: "a"}) != nil {
		t.Fatal("a listener without TLS got a configuration")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := tls.Server(c, cfg)
		_ = tc.Handshake()
		tc.Close()
	}()
	before := l.budget.Tenant("a").Stat()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "shop.a.example", RootCAs: l.ca.pool, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "" {
		t.Errorf("negotiated %q; want no ALPN protocol", p)
	}
	after := l.budget.Tenant("a").Stat()
	if after.Hellos != before.Hellos+1 || after.Signed != before.Signed+1 {
		t.Errorf("tenant a's budget: hellos %d -> %d, signed %d -> %d; want one of each", before.Hellos, after.Hellos, before.Signed, after.Signed)
	}
}
