package l7

// CPU is the host CPU budget of a connection's tenant (ConnInfo.CPU):
// the engine counts in it the work of what it moves without a request
// to show for it, where it moves it: the body bytes of requests and
// responses (every HTTP version, upgraded tunnels included) and the
// HTTP/2 frames that carry neither a request nor a body byte. Relay may
// wait (the tenant is in debt, or paced at its rate): the engine calls it
// between two copies of the connection's own bytes, never with a lock
// that another connection needs. Implementations must be safe for
// concurrent use and allocate nothing.
type CPU interface {
	// Relay counts units of work and waits while the tenant is over its
	// budget, each wait bounded.
	Relay(units int64)
}

// The engine's units of work, as the proxy's CPU budget counts its own
// (cpubudget.WorkRequest, WorkBytesShift, WorkTLSBytes,
// WorkControlFrames, WorkAnsweredFrame; proxy's
// TestL7WorkUnitsMatchTheBudget keeps them equal).
const (
	// WorkRequest: a request sent to a member that the proxy did not
	// route (a mirrored copy; routed requests are counted by the proxy).
	WorkRequest = 1
	// WorkBytesShift: a unit per 64 KiB of body moved one way.
	WorkBytesShift = 16
	// WorkTLSBytes multiplies the units of bytes the host decrypts or
	// encrypts (a TLS client connection, HTTP/3).
	WorkTLSBytes = 4
	// WorkControlFrames: HTTP/2 frames with neither a request nor a body
	// byte, and not answered, that count one unit.
	WorkControlFrames = 16
	// WorkAnsweredFrame: what a PING or SETTINGS the server answers
	// (with an ACK frame of its own) counts.
	WorkAnsweredFrame = 1
)

// meter counts the body bytes one direction of a connection moves in
// units of its tenant's CPU work, carrying what does not make a unit
// yet to the next count, so that a small body is not charged a unit
// for itself (its request was) and a big one is charged as it moves.
// One goroutine uses a meter at a time.
type meter struct{ carry int64 }

// add counts n bytes and, for each unit they complete, charges cpu
// weight units (and may wait there). A nil cpu counts nothing.
func (m *meter) add(cpu CPU, weight, n int64) {
	if cpu == nil {
		return
	}
	if u := m.take(n); u > 0 {
		cpu.Relay(u * weight)
	}
}

// take counts n bytes and returns the units they complete, for a caller
// that charges them once it let go of a lock.
func (m *meter) take(n int64) int64 {
	if n <= 0 {
		return 0
	}
	m.carry += n
	u := m.carry >> WorkBytesShift
	m.carry -= u << WorkBytesShift
	return u
}

// bodyQuantum is what a splice or a tunnel's copy moves at most between
// two counts: 4 units.
const bodyQuantum = 4 << WorkBytesShift

// cpuWeight is the units of work a unit of bytes of info's connection
// counts: WorkTLSBytes over TLS, else 1.
func cpuWeight(info *ConnInfo) int64 {
	if info.TLS {
		return WorkTLSBytes
	}
	return 1
}
