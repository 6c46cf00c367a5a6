package certs

import (
	"crypto/tls"
	"sync"
	"sync/atomic"

	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

var _ proxy.StreamTLS = (*Terminator)(nil)

// StreamConfig implements proxy.StreamTLS: the configuration of a
// handshake on a tls-passthrough listener for a server name routed with
// terminate. It is the listener's https configuration (its certificates
// chosen by server name, its session ticket keys, the tenant's CPU budget
// charged per ClientHello and signature) without ALPN protocols: the
// stream forwarded is no HTTP the load balancer speaks. Nil when the
// listener has no TLS policy.
func (t *Terminator) StreamConfig(l *snapshot.Listener) *tls.Config {
	if l == nil || l.TLS == nil {
		return nil
	}
	base := t.m.ServerConfig(l)
	if c, ok := streamConfigs.Load(base); ok {
		return c.(*tls.Config)
	}
	cfg := base.Clone()
	cfg.NextProtos = nil
	if streamCount.Add(1) > maxPolicies {
		streamConfigs.Clear()
		streamCount.Store(0)
	}
	streamConfigs.Store(base, cfg)
	return cfg
}

// streamConfigs maps a listener's https configuration to its stream
// configuration (a new https configuration, built per listener and ticket
// key period, gets a new one); emptied when it grows past maxPolicies.
var (
	streamConfigs sync.Map
	streamCount   atomic.Int64
)
