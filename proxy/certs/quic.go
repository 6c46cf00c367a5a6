package certs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

var _ proxy.QUICHandler = (*Terminator)(nil)

// QUICConfig implements proxy.QUICHandler: the configuration of a QUIC
// handshake on an https listener with http3. It is the listener's https
// configuration (its certificates chosen by server name, its session
// ticket keys, its client validation, the tenant's CPU budget charged per
// ClientHello and signature) with ALPN h3 only and TLS 1.3, which QUIC
// needs. Nil when the listener has no TLS policy.
func (t *Terminator) QUICConfig(l *snapshot.Listener) *tls.Config {
	if l == nil || l.TLS == nil {
		return nil
	}
	base := t.m.ServerConfig(l)
	if c, ok := quicConfigs.Load(base); ok {
		return c.(*tls.Config)
	}
	cfg := base.Clone()
	cfg.NextProtos = []string{"h3"}
	cfg.MinVersion = tls.VersionTLS13
	if quicCount.Add(1) > maxPolicies {
		quicConfigs.Clear()
		quicCount.Store(0)
	}
	quicConfigs.Store(base, cfg)
	return cfg
}

// quicConfigs maps a listener's https configuration to its QUIC
// configuration; emptied when it grows past maxPolicies.
var (
	quicConfigs sync.Map
	quicCount   atomic.Int64
)

// ServeQUIC implements proxy.QUICHandler: it hands the connection, with
// the subject of its verified client certificate, to the L7 handler.
func (t *Terminator) ServeQUIC(ctx context.Context, c *quic.Conn, current func() *proxy.ListenerSnapshot) {
	qh, ok := t.inner.(proxy.QUICServer)
	l := current()
	if !ok || l == nil {
		return
	}
	if s := t.m.ClientSubject(l.Listener, c.ConnectionState().TLS); s != "" {
		ctx = proxy.WithClientSubject(ctx, s)
	}
	qh.ServeQUIC(ctx, c, current)
}

var _ proxy.QUICKeys = (*Terminator)(nil)

// QUICKeys implements proxy.QUICKeys: the stateless reset and token keys
// derive from the ticket secret (HMAC-SHA256 with a label each), which
// the hosts of a cluster share, so a host that takes a VIP over resets
// the QUIC connections of the host before it and honours its Retry
// tokens.
func (t *Terminator) QUICKeys() (reset quic.StatelessResetKey, token quic.TokenGeneratorKey) {
	derive := func(label string) [32]byte {
		mac := hmac.New(sha256.New, t.m.tls.secret)
		mac.Write([]byte(label))
		var k [32]byte
		copy(k[:], mac.Sum(nil))
		return k
	}
	return derive("teapot-lb quic stateless reset v1"), derive("teapot-lb quic tokens v1")
}
