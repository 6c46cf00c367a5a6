package certs

import (
	"crypto/tls"
	"net"
	"testing"
)

// TestQUICConfig: the QUIC configuration of an https listener with http3
// serves the listener's certificate by server name, offers ALPN h3 only
// and TLS 1.3 only, and keeps the listener's admission of ClientHellos
// against the tenant's handshake budget (a ClientHello admitted, a
// signature made).
func TestQUICConfig(t *testing.T) {
	l := newHandshakeLab(t, nil)
	term := l.m.Terminator(greeter{})
	ls := listener("a", false, []string{"shop"}, "shop.a.example")
	ls.HTTP3 = true
	cfg := term.QUICConfig(ls)
	if cfg == nil || len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "h3" || cfg.MinVersion != tls.VersionTLS13 || cfg.GetConfigForClient == nil {
		t.Fatalf("QUIC configuration %+v; want ALPN h3, TLS 1.3 and the listener's admission", cfg)
	}
	if term.QUICConfig(ls) != cfg {
		t.Error("the configuration is built again for the same listener")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, cfg)
			_ = tc.Handshake()
			tc.Close()
		}
	}()
	before := l.budget.Tenant("a").Stat()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "shop.a.example", RootCAs: l.ca.pool, NextProtos: []string{"h3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cs := c.ConnectionState()
	if cs.NegotiatedProtocol != "h3" || cs.Version != tls.VersionTLS13 || cs.PeerCertificates[0].DNSNames[0] != "shop.a.example" {
		t.Errorf("negotiated %q, version %x, certificate for %v", cs.NegotiatedProtocol, cs.Version, cs.PeerCertificates[0].DNSNames)
	}
	after := l.budget.Tenant("a").Stat()
	if after.Hellos != before.Hellos+1 || after.Signed != before.Signed+1 {
		t.Errorf("tenant a's budget: hellos %d -> %d, signed %d -> %d; want one of each", before.Hellos, after.Hellos, before.Signed, after.Signed)
	}
	// A TLS 1.2 client is refused: QUIC is TLS 1.3.
	if c2, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "shop.a.example", RootCAs: l.ca.pool, MaxVersion: tls.VersionTLS12}); err == nil {
		c2.Close()
		t.Error("a TLS 1.2 handshake passed")
	}
}

// TestQUICKeysShared: hosts given the same ticket secret derive the same
// QUIC stateless reset and token keys (a host that takes a VIP over
// resets the connections of the one before); another secret, other keys;
// the two keys differ.
func TestQUICKeysShared(t *testing.T) {
	t.Parallel()
	term := func(secret string) *Terminator {
		m := &Manager{}
		m.tls.secret = []byte(secret)
		return &Terminator{m: m}
	}
	r1, k1 := term("cluster a").QUICKeys()
	r2, k2 := term("cluster a").QUICKeys()
	r3, k3 := term("cluster b").QUICKeys()
	if r1 != r2 || k1 != k2 {
		t.Error("the same secret gave other keys")
	}
	if r1 == r3 || k1 == k3 {
		t.Error("another secret gave the same keys")
	}
	if [32]byte(r1) == [32]byte(k1) {
		t.Error("the reset key is the token key")
	}
}
