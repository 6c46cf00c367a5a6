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
	// afterAnswer counts the connections closed by their own timer just
	// after an answer (closeAtPauseLocked) since CloseConnections last
	// logged.
	afterAnswer atomic.Int64
}

// HandoverQuiet is how long a TCP, TLS passthrough or WebSocket connection
// must have carried nothing either way, its last bytes going to its
// client, for CloseConnections to end it without force: a pause after an
// answer, so that the close does not cut the answer short.
const HandoverQuiet = 10 * time.Millisecond

// HandoverAfterAnswer is the latest, after the last bytes to its client,
// that CloseConnections ends such a connection without force (unless it
// has been idle for HandoverIdle): the close comes just after an answer,
// when its client has what it asked for and its next message is furthest
// away. A pause that has lasted longer may end at any moment with the
// client's next message, which the close would meet: the client would
// lose it and see its connection end under it. Such a connection waits
// for its next answer.
const HandoverAfterAnswer = 3 * HandoverQuiet

// HandoverIdle is how long a connection must have carried nothing either
// way, its last bytes going to its client, for CloseConnections to end it
// without force at any moment: its client sends rarely, and there may be
// no answer to wait for.
const HandoverIdle = time.Second

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
			if t.recheck != nil {
				t.recheck.Stop()
				t.recheck = nil
			}
		}
		s.mu.Unlock()
	}
	p.handover.afterAnswer.Store(0)
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
// TCP, TLS passthrough and upgraded (WebSocket) connections just after an
// answer (see pauseOf) and the HTTP/1.x connections idle between two
// requests, while those that serve a request close after its response
// (it says Connection: close) and HTTP/2 connections once their streams
// have ended. An HTTP connection that has not sent its first request yet
// is left to send it. It returns how many connections are still busy
// (HTTP requests in progress, connections waiting for their pause): the
// caller calls again until none is, within a short grace, and then once
// with force, which closes every connection left. A connection closed
// already (by an earlier call, its own timer, or another closer) stays
// registered until its serving ends, a moment later or, at the gate of a
// tenant in debt, up to about a second: a call that finds it leaves it,
// so that each close is counted once and none is busy.
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
			case t.handoverClosed || t.closing.Load():
			case force, t.l7 && t.state.CloseIfIdle():
				t.cancel()
				if force {
					t.cut()
				}
				t.handoverClosed = true
				cs = append(cs, t)
			case !t.l7 || t.state.Upgraded():
				if !p.closeAtPauseLocked(s, t) {
					busy++
					continue
				}
				t.handoverClosed = true
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
	if n := p.handover.afterAnswer.Swap(0); len(cs) > 0 || n > 0 {
		p.log.Info("closed connections before the VIPs move", "connections", len(cs), "after_answer", n, "busy", busy, "force", force)
	}
	return busy
}

// closeAtPauseLocked reports whether t, a TCP, TLS passthrough or
// upgraded connection of s, is at a pause where the handover may end it
// (pauseOf), and then cancels it for the caller to close. One whose answer
// went out less than HandoverQuiet ago is looked at again by a timer of
// its own when that time has passed, and closed then if it is at its
// pause: it closes just after that answer however long the caller takes
// to call again. s.mu is held.
func (p *Proxy) closeAtPauseLocked(s *socket, t *tracked) bool {
	ok, wait := pauseOf(t.c)
	if ok {
		t.cancel()
		return true
	}
	if wait > 0 && t.recheck == nil {
		t.recheck = time.AfterFunc(wait, func() { p.recheckPause(s, t) })
	}
	return false
}

// recheckPause is the timer of closeAtPauseLocked: it closes t if the
// handover of its address still runs, t is still open (not closed by
// force meanwhile) and at its pause.
func (p *Proxy) recheckPause(s *socket, t *tracked) {
	s.mu.Lock()
	t.recheck = nil
	_, open := s.conns[t]
	closeIt := open && !t.handoverClosed && !t.closing.Load() && p.handover.handingOver(s.key.Addr.Addr()) && p.closeAtPauseLocked(s, t)
	t.handoverClosed = t.handoverClosed || closeIt
	s.mu.Unlock()
	if closeIt {
		t.close()
		p.handover.afterAnswer.Add(1)
	}
}

// pauseOf reports whether the kernel says c is at a pause that follows
// an answer: nothing received from its client since its last bytes to
// it, which are all out and went between HandoverQuiet and
// HandoverAfterAnswer ago, or HandoverIdle or more ago. When they went
// less than HandoverQuiet ago, wait is how long until they are that old.
// The kernel counts these times in its clock ticks (1 to 10ms): bytes
// received in the tick of the last answer count as answered. A connection
// the kernel cannot say this of is at a pause.
func pauseOf(c net.Conn) (ok bool, wait time.Duration) {
	if tc, isTLS := c.(*tls.Conn); isTLS {
		c = tc.NetConn()
	}
	tcp, isTCP := c.(*net.TCPConn)
	if !isTCP {
		return true, 0
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return true, 0
	}
	var info *unix.TCPInfo
	if rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO) }) != nil || err != nil {
		return true, 0
	}
	// Milliseconds since the last bytes received from the client and the
	// last bytes sent to it.
	recv, sent := time.Duration(info.Last_data_recv)*time.Millisecond, time.Duration(info.Last_data_sent)*time.Millisecond
	switch {
	case recv < sent || info.Notsent_bytes != 0:
		// The client's last bytes are not answered, or the answer is
		// still going out.
		return false, 0
	case sent < HandoverQuiet:
		return false, HandoverQuiet - sent
	}
	return sent <= HandoverAfterAnswer || sent >= HandoverIdle, 0
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
