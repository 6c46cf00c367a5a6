package proxy

import (
	"crypto/tls"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// handoverState is what the proxy keeps while this host hands its VIPs
// over (see HandOver).
type handoverState struct {
	// vips are the addresses handed over (nil: no handover).
	vips    atomic.Pointer[map[netip.Addr]bool]
	pending atomic.Int64
}

// HandoverQuiet is how long a TCP, TLS passthrough or WebSocket connection
// must have carried nothing either way, its last bytes going to its
// client, for CloseConnections to end it without force: a pause between
// an answer and the client's next message, so that the close does not
// meet a message in flight (the client would lose it and see a reset).
const HandoverQuiet = 10 * time.Millisecond

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
	for _, hs := range p.h3Sockets(set) {
		hs.goAway()
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
// handed over, cleanly (FIN) and each at a pause of its traffic: a host
// that is about to let its VIPs go ends the connections that the next
// holder, which never saw them, would otherwise reset once their clients
// send again. It never cuts an HTTP request or a message: it closes the
// TCP, TLS passthrough and upgraded (WebSocket) connections that are
// quiet (nothing either way for HandoverQuiet, the last bytes to the
// client) and the HTTP/1.x connections idle between two requests, while
// those that serve a request close after its response (it says
// Connection: close) and HTTP/2 connections once their streams have
// ended. An HTTP connection that has not sent its first request yet is
// left to send it. It returns how many connections are still busy (HTTP
// requests in progress, connections not quiet yet): the caller calls
// again until none is, within a short grace, and then once with force,
// which closes every connection left.
func (p *Proxy) CloseConnections(force bool) (busy int) {
	m := p.handover.vips.Load()
	if m == nil {
		return 0
	}
	var cs []*tracked
	for _, s := range p.tcpSockets(*m) {
		s.mu.Lock()
		for t := range s.conns {
			switch {
			case force, t.l7 && t.state.CloseIfIdle():
				t.cancel()
				if force {
					t.cut()
				}
				cs = append(cs, t)
			case !t.l7 || t.state.Upgraded():
				if !quiet(t.c, HandoverQuiet) {
					busy++
					continue
				}
				t.cancel()
				cs = append(cs, t)
			case t.l7 && t.state.Busy():
				busy++
			}
		}
		s.mu.Unlock()
	}
	for _, t := range cs {
		t.close()
	}
	for _, hs := range p.h3Sockets(*m) {
		busy += hs.closeIdle(force)
	}
	if len(cs) > 0 {
		p.log.Info("closed connections before the VIPs move", "connections", len(cs), "busy", busy, "force", force)
	}
	return busy
}

// quiet reports whether the kernel says c has received nothing from its
// client and sent nothing to it for at least d, and sent last (what the
// client sent last was answered). The kernel counts these times in its
// clock ticks (1 to 10ms): bytes received in the tick of the last answer
// count as answered. A connection the kernel cannot say this of counts as
// quiet.
func quiet(c net.Conn, d time.Duration) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return true
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return true
	}
	var info *unix.TCPInfo
	if rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO) }) != nil || err != nil {
		return true
	}
	// Milliseconds since the last bytes received from the client and the
	// last bytes sent to it.
	recv, sent := time.Duration(info.Last_data_recv)*time.Millisecond, time.Duration(info.Last_data_sent)*time.Millisecond
	return sent >= d && recv >= sent && info.Notsent_bytes == 0
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
