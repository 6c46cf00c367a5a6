package proxy

import (
	"net"
	"slices"
	"sync/atomic"
)

// handoverState is what the proxy keeps while this host hands its VIPs
// over (see Handover).
type handoverState struct {
	on      atomic.Bool
	pending atomic.Int64
}

// Handover starts (on) or ends the handing over of this host's clients
// before its VIPs move to another host (`cluster drain`, a stop): HTTP
// connections are drained as for a removed listener (a busy HTTP/1.x
// connection closes after its response, which says Connection: close, an
// idle one after its next response or its idle grace; HTTP/2 clients get
// a GOAWAY), and so is every HTTP connection accepted while it lasts, so
// that clients reconnect, through the VIP, to whichever host holds it by
// then. TCP, TLS passthrough and upgraded (WebSocket) connections keep
// running. The connections open when it starts are counted in
// HandoverPending until they end. Handover(false) (the host was
// undrained) lets new connections stay open again.
func (p *Proxy) Handover(on bool) {
	if !p.handover.on.CompareAndSwap(!on, on) {
		return
	}
	for _, s := range p.tcpSockets() {
		s.mu.Lock()
		for t := range s.conns {
			switch {
			case on && !t.pending:
				t.pending = true
				p.handover.pending.Add(1)
				if t.l7 {
					t.cancel()
				}
			case !on && t.pending:
				t.pending = false
				p.handover.pending.Add(-1)
			}
		}
		s.mu.Unlock()
	}
	if on {
		p.log.Info("handing clients over: HTTP connections close after their next response", "pending", p.handover.pending.Load())
	} else {
		p.log.Info("handover ended: connections stay open again")
	}
}

// HandoverPending returns how many of the connections open when the
// handover began are still open (0 when there is none).
func (p *Proxy) HandoverPending() int {
	return int(p.handover.pending.Load())
}

// CloseConnections closes every TCP connection this host's listeners
// accepted, cleanly where the client sent nothing unread (FIN): a host
// that is about to let its VIPs go ends the connections that would
// otherwise be reset by the next holder, which never saw them, once their
// clients send again. It returns how many it closed.
func (p *Proxy) CloseConnections() int {
	var cs []net.Conn
	for _, s := range p.tcpSockets() {
		s.mu.Lock()
		for t := range s.conns {
			t.cancel()
			cs = append(cs, t.c)
		}
		s.mu.Unlock()
	}
	for _, c := range cs {
		c.Close()
	}
	if len(cs) > 0 {
		p.log.Info("closed the connections left before the VIPs move", "connections", len(cs))
	}
	return len(cs)
}

// tcpSockets returns the TCP listening sockets open now.
func (p *Proxy) tcpSockets() []*socket {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*socket, 0, len(p.sockets))
	for _, s := range p.sockets {
		if s.tcp != nil {
			out = append(out, s)
		}
	}
	return slices.Clip(out)
}
