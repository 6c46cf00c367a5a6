package vip

import (
	"context"
	"net/netip"
	"slices"
	"time"
)

// Handover is the data plane's part in a planned move of this host's arp
// VIPs (`cluster drain` of this host, a stop): HandOver(vips) asks the
// clients of the listeners on vips to reconnect (HTTP connections close
// after their next response), HandoverPending counts the connections open
// when it began that are still open, CloseConnections ends those left
// before the VIPs move (without force: the HTTP connections idle between
// requests and the TCP and WebSocket connections at the pause just after
// an answer, returning how many are still busy: HTTP requests in progress,
// messages not answered yet, connections waiting for their next answer;
// with force: all), and EndHandover cancels it
// when the host is undrained. The proxy implements it.
type Handover interface {
	HandOver(vips []netip.Addr)
	EndHandover()
	HandoverPending() int
	CloseConnections(force bool) (busy int)
}

// handoverState is the loop's record of a handover.
type handoverState struct {
	since time.Time // when it began (zero: none)
	// closing: when the connections left began to close (zero: not yet).
	closing time.Time
	// doneAt: when it ended and the VIPs were let go (see self.HandOff).
	doneAt time.Time
	// closedAt: the evaluation that last asked the data plane to close
	// the connections left without force; busy: what it answered.
	closedAt time.Time
	busy     int
	begun    bool // HandOver was called (EndHandover is due when want ends)
	done     bool
}

// handoverStep advances the handover of a host that gives its arp VIPs
// up on purpose (want: drained or stopping) and reports whether it keeps
// them meanwhile. A host that holds an arp VIP keeps it, taking none,
// while its clients are handed over: until the connections open when the
// handover began have all ended, at most HandoverTimeout. Then it closes
// the connections left, letting the HTTP requests in progress finish and
// the other connections reach a pause for at most HandoverCloseGrace, and
// lets the VIPs go; the peers take them at once. It asks the data plane to
// close them once an instant: an evaluation again at the same instant
// (beatTick decides again at once with the heartbeat it plans) takes the
// answer of the first instead of going over every connection of the VIPs
// again.
// A host that holds none has nothing to hand over. When want ends (the
// host was undrained) the data plane keeps connections open again.
func (m *Manager) handoverStep(now time.Time, want bool) bool {
	st := &m.loop
	h := &st.handover
	if !want {
		if h.begun {
			m.cfg.Handover.EndHandover()
			m.log.Info("handover ended: this host may hold VIPs again")
		}
		*h = handoverState{}
		m.handedOver.Store(false)
		return false
	}
	if h.done {
		return false
	}
	if h.since.IsZero() {
		h.since = now
		if m.cfg.Handover == nil || len(st.holding) == 0 {
			h.done, h.doneAt = true, now
			m.handedOver.Store(true)
			return false
		}
		h.begun = true
		m.cfg.Handover.HandOver(slices.Clone(st.heldARP))
		m.log.Info("keeps its arp VIPs while its clients are handed over",
			"vips", len(st.holding), "pending", m.cfg.Handover.HandoverPending(), "at_most", m.cfg.HandoverTimeout)
	}
	pending := m.cfg.Handover.HandoverPending()
	if h.closing.IsZero() {
		if pending > 0 && now.Sub(h.since) < m.cfg.HandoverTimeout {
			return true
		}
		h.closing = now
	}
	if !h.closedAt.Equal(now) {
		h.closedAt, h.busy = now, m.cfg.Handover.CloseConnections(false)
	}
	busy := h.busy
	if busy > 0 && now.Sub(h.closing) < m.cfg.HandoverCloseGrace {
		return true
	}
	m.cfg.Handover.CloseConnections(true)
	h.done, h.doneAt = true, now
	m.handedOver.Store(true)
	m.log.Info("clients handed over; letting the arp VIPs go",
		"took", now.Sub(h.since).Round(time.Millisecond), "still_open", pending, "busy_cut", busy)
	return false
}

// HandOverClients is the first step of a stop: the loop keeps running and
// this host hands its clients over (see handoverStep) before Close lets
// its VIPs go. It returns when that is done, when ctx ends or when the
// loop does not run.
func (m *Manager) HandOverClients(ctx context.Context) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.stopping = true
	running := m.loop.running
	m.mu.Unlock()
	if !running {
		return
	}
	m.pokeAll()
	tick := time.NewTicker(m.cfg.HeartbeatInterval)
	defer tick.Stop()
	for !m.handedOver.Load() {
		select {
		case <-ctx.Done():
			return
		case <-m.loopDone:
			return
		case <-tick.C:
		}
	}
}

// SetHandover gives the manager the data plane's part of a handover
// (Config.Handover). Call it before Run.
func (m *Manager) SetHandover(h Handover) {
	if m != nil {
		m.cfg.Handover = h
	}
}
