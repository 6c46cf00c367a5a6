package proxy

import (
	"net"
	"net/netip"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// admitSource checks an accepted connection's address against the
// listener's source ranges, before anything is spent on it (no member
// connection, no TLS handshake, no tenant connection slot); a refusal is
// counted.
func (p *Proxy) admitSource(l *ListenerSnapshot, c *net.TCPConn) bool {
	if l.Sources == nil {
		return true
	}
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	return p.admitSourceAddr(l, a.AddrPort().Addr())
}

// admitSourceAddr is admitSource for a client address (UDP: a new flow's).
func (p *Proxy) admitSourceAddr(l *ListenerSnapshot, a netip.Addr) bool {
	if l.Sources.Allow(a) {
		return true
	}
	p.metrics.ConnRefused(l.LB, l.Name, RefusedSource)
	return false
}

// enforceSources closes at once the open connections and UDP flows of
// the socket that the listener's source ranges no longer allow: a tenant
// who closes a port to an address closes it to the connections already
// open from there too.
func (s *socket) enforceSources(l *snapshot.Listener) {
	src := l.Sources
	if src == nil {
		return
	}
	if s.udp != nil {
		s.udp.closeFlows(func(f *flow) bool { return !src.Allow(f.client.Addr()) })
	}
	s.mu.Lock()
	var ts []*tracked
	for t := range s.conns {
		if a, ok := t.c.RemoteAddr().(*net.TCPAddr); ok && !src.Allow(a.AddrPort().Addr()) {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.cancel()
		t.cut()
		t.close()
	}
}
