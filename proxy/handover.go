package proxy

import (
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
)

// handoverState is what the proxy keeps while this host hands its VIPs
// over (see HandOver).
type handoverState struct {
	// vips are the addresses handed over (nil: no handover).
	vips    atomic.Pointer[map[netip.Addr]bool]
	pending atomic.Int64
	// closing: CloseConnections was called in this handover.
	closing atomic.Bool
}

// handingOver reports whether connections to a are being handed over.
func (h *handoverState) handingOver(a netip.Addr) bool {
	m := h.vips.Load()
	return m != nil && (*m)[a]
}

// HandOver starts the handing over of the clients of the listeners on
// vips, before these VIPs move to another host (`cluster drain`, a stop):
// their HTTP connections are drained as for a removed listener (a busy
// HTTP/1.x connection closes after its response, which says Connection:
// close, an idle one after its next response or its idle grace; HTTP/2
// clients get a GOAWAY), and so is every HTTP connection accepted on them
// while it lasts, so that clients reconnect, through the VIP, to whichever
// host holds it by then. TCP, TLS passthrough and upgraded (WebSocket)
// connections keep running. The connections open on them when it starts
// are counted in HandoverPending until they end.
func (p *Proxy) HandOver(vips []netip.Addr) {
	set := make(map[netip.Addr]bool, len(vips))
	for _, a := range vips {
		set[a] = true
	}
	p.handover.closing.Store(false)
	p.handover.vips.Store(&set)
	for _, s := range p.tcpSockets(set) {
		s.mu.Lock()
		for t := range s.conns {
			if !t.pending {
				t.pending = true
				p.handover.pending.Add(1)
			}
			if t.l7 {
				t.cancel()
			}
		}
		s.mu.Unlock()
	}
	p.log.Info("handing clients over: HTTP connections close after their next response",
		"vips", len(vips), "pending", p.handover.pending.Load())
}

// EndHandover ends a handover (the host was undrained): new connections
// stay open again.
func (p *Proxy) EndHandover() {
	if p.handover.vips.Swap(nil) == nil {
		return
	}
	p.handover.closing.Store(false)
	for _, s := range p.tcpSockets(nil) {
		s.mu.Lock()
		for t := range s.conns {
			if t.pending {
				t.pending = false
				p.handover.pending.Add(-1)
			}
		}
		s.mu.Unlock()
	}
	p.log.Info("handover ended: connections stay open again")
}

// HandoverPending returns how many of the connections open when the
// handover began are still open (0 when there is none).
func (p *Proxy) HandoverPending() int {
	return int(p.handover.pending.Load())
}

// CloseConnections ends the TCP connections accepted on the addresses
// handed over, cleanly where the client sent nothing unread (FIN): a host
// that is about to let its VIPs go ends the connections that the next
// holder, which never saw them, would otherwise reset once their clients
// send again. It never cuts an HTTP request: the first call closes the
// TCP, TLS passthrough and upgraded (WebSocket) connections, and every
// call closes the HTTP/1.x connections idle between two requests, while
// those that serve a request close after its response (it says
// Connection: close) and HTTP/2 connections once their streams have
// ended. An HTTP connection that has not sent its first request yet is
// left to send it. It returns how many HTTP connections are still busy:
// the caller calls again until none is, within a short grace, and then
// once with force, which closes every connection left.
func (p *Proxy) CloseConnections(force bool) (busy int) {
	m := p.handover.vips.Load()
	if m == nil {
		return 0
	}
	first := !p.handover.closing.Swap(true)
	var cs []net.Conn
	for _, s := range p.tcpSockets(*m) {
		s.mu.Lock()
		for t := range s.conns {
			switch {
			case force, first && (!t.l7 || t.state.Upgraded()), t.l7 && t.state.CloseIfIdle():
				t.cancel()
				cs = append(cs, t.c)
			case t.l7 && t.state.Busy():
				busy++
			}
		}
		s.mu.Unlock()
	}
	for _, c := range cs {
		c.Close()
	}
	if len(cs) > 0 {
		p.log.Info("closed connections before the VIPs move", "connections", len(cs), "busy", busy, "force", force)
	}
	return busy
}

// tcpSockets returns the TCP listening sockets open now on the addresses
// in vips (all of them when vips is nil).
func (p *Proxy) tcpSockets(vips map[netip.Addr]bool) []*socket {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*socket
	for _, s := range p.sockets {
		if s.key.Network == snapshot.TCP && (vips == nil || vips[s.key.Addr.Addr()]) {
			out = append(out, s)
		}
	}
	return slices.Clip(out)
}
