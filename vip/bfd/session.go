package bfd

import (
	"math/rand/v2"
	"time"
)

// slowTx is the least interval between packets while a session is not
// Up (RFC 5880 section 6.8.3: at least one second).
const slowTx = time.Second

// Params are one session's timers: the interval this end wants to send
// at (MinTx), the least interval it takes packets at (MinRx), and how
// many intervals without a packet make the session Down (Multiplier).
type Params struct {
	MinTx, MinRx time.Duration
	Multiplier   uint8
}

// machine is one session's state (RFC 5880 section 6.8), without timers
// or sockets: the caller gives it packets and the clock.
type machine struct {
	p      Params
	state  State
	diag   Diag
	myDisc uint32

	remoteDisc  uint32
	remoteState State
	remoteMinRx time.Duration
	remoteMinTx time.Duration
	remoteMult  uint8
	pollPending bool
	// oldTx and oldRx are the interval this end sent at and the one it
	// told the remote it takes packets at before a change of Params
	// while Up: until the Poll Sequence that tells the remote ends, the
	// remote's detection time still counts on the old ones (section
	// 6.8.3).
	oldTx, oldRx time.Duration
	// prevMinTx is the remote's DesiredMinTxInterval before a Poll that
	// lowered it: it may send at that slower rate until the Poll
	// Sequence ends, so the detection time keeps it until a packet
	// without the Poll bit comes.
	prevMinTx      time.Duration
	lastRx         time.Time
	receivedSomeRx bool
}

func newMachine(p Params, disc uint32) *machine {
	// bfd.RemoteMinRxInterval starts at 1 microsecond (section 6.8.1).
	return &machine{p: p, state: Down, myDisc: disc, remoteState: Down, remoteMinRx: time.Microsecond}
}

// desiredTx is the DesiredMinTxInterval this end announces: at least a
// second while the session is not Up.
func (m *machine) desiredTx() time.Duration {
	if m.state != Up {
		return max(m.p.MinTx, slowTx)
	}
	return m.p.MinTx
}

// txInterval is the interval between periodic packets, before jitter
// (section 6.8.7), and false when none may be sent (the remote asked for
// none).
func (m *machine) txInterval() (time.Duration, bool) {
	if m.remoteMinRx == 0 {
		return 0, false
	}
	tx := m.desiredTx()
	if m.pollPending && m.oldTx > 0 {
		tx = min(tx, m.oldTx)
	}
	return max(tx, m.remoteMinRx), true
}

// setParams changes the session's timers in place: while Up a Poll
// Sequence tells the remote, and until it ends this end keeps sending at
// the old interval if that was faster, and detecting with the old MinRx
// if that was longer.
func (m *machine) setParams(p Params) {
	if m.state == Up {
		// A Poll pending with no old interval is the one of coming Up:
		// the remote already counts on what it announces (section
		// 6.8.3), which the slower Params must not replace before it
		// ends.
		if m.pollPending && m.oldTx > 0 {
			m.oldTx, m.oldRx = min(m.oldTx, m.desiredTx()), max(m.oldRx, m.p.MinRx)
		} else {
			m.oldTx, m.oldRx = m.desiredTx(), m.p.MinRx
		}
		m.pollPending = true
	}
	m.p = p
}

// jittered reduces an interval by 0 to 25% (to 10 to 25% with a
// multiplier of 1), as section 6.8.7 asks.
func jittered(d time.Duration, mult uint8) time.Duration {
	lo, hi := 0.75, 1.0
	if mult == 1 {
		hi = 0.9
	}
	return time.Duration(float64(d) * (lo + rand.Float64()*(hi-lo)))
}

// detectTime is the time without a packet after which an Init or Up
// session goes Down (asynchronous mode, section 6.8.4).
func (m *machine) detectTime() time.Duration {
	rx := m.p.MinRx
	if m.pollPending {
		rx = max(rx, m.oldRx)
	}
	return time.Duration(m.remoteMult) * max(rx, m.remoteMinTx, m.prevMinTx)
}

// receive takes a packet already checked by unmarshal and addressed to
// this session (section 6.8.6). It says whether the state changed and
// whether a packet with the Final bit is due at once.
func (m *machine) receive(pk *packet, now time.Time) (changed, final bool) {
	m.remoteDisc = pk.myDisc
	m.remoteState = pk.state
	m.remoteMinRx = pk.requiredMinRx
	switch {
	case !pk.poll:
		m.prevMinTx = 0
	case pk.desiredMinTx < m.remoteMinTx:
		m.prevMinTx = max(m.prevMinTx, m.remoteMinTx)
	}
	m.remoteMinTx = pk.desiredMinTx
	m.remoteMult = pk.mult
	m.lastRx, m.receivedSomeRx = now, true
	if pk.final && m.pollPending {
		m.pollPending = false
		m.oldTx, m.oldRx = 0, 0
	}
	if m.state == AdminDown {
		return false, false
	}
	prev := m.state
	switch {
	case pk.state == AdminDown:
		if m.state != Down {
			m.down(DiagNeighborDown)
		}
	case m.state == Down && pk.state == Down:
		m.state = Init
	case m.state == Down && pk.state == Init:
		m.up()
	case m.state == Init && (pk.state == Init || pk.state == Up):
		m.up()
	case m.state == Up && pk.state == Down:
		m.down(DiagNeighborDown)
	}
	return m.state != prev, pk.poll
}

func (m *machine) up() {
	m.state, m.diag = Up, DiagNone
	// The announced DesiredMinTxInterval drops from the slow rate to the
	// session's own: a Poll Sequence tells the remote (section 6.8.3).
	if m.p.MinTx != max(m.p.MinTx, slowTx) {
		m.pollPending = true
	}
}

func (m *machine) down(d Diag) {
	m.state, m.diag = Down, d
	m.pollPending = false
	m.oldTx, m.oldRx = 0, 0
}

// expire is called when no packet came for a detection time: an Init or
// Up session goes Down, and the remote's discriminator is forgotten
// (section 6.8.1). It says whether the state changed.
func (m *machine) expire(now time.Time) bool {
	if !m.receivedSomeRx || now.Sub(m.lastRx) < m.detectTime() {
		return false
	}
	m.remoteDisc, m.remoteState = 0, Down
	m.receivedSomeRx = false
	if m.state == Init || m.state == Up {
		m.down(DiagDetectExpired)
		return true
	}
	return false
}

// packet is the control packet this end sends now; final answers a
// Poll.
func (m *machine) packet(final bool) *packet {
	return &packet{
		diag: m.diag, state: m.state,
		poll: m.pollPending && !final, final: final,
		mult: m.p.Multiplier, myDisc: m.myDisc, yourDisc: m.remoteDisc,
		desiredMinTx: m.desiredTx(), requiredMinRx: m.p.MinRx,
	}
}
