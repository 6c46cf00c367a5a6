package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// State is a session's state (RFC 5880 section 4.1, "Sta").
type State uint8

// The states of a session.
const (
	AdminDown State = iota
	Down
	Init
	Up
)

func (s State) String() string {
	switch s {
	case AdminDown:
		return "admin-down"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return fmt.Sprintf("state-%d", uint8(s))
}

// Diag is why a session last left Up (RFC 5880 section 4.1, "Diag").
type Diag uint8

// The diagnostics this implementation sets or reads.
const (
	DiagNone Diag = iota
	DiagDetectExpired
	DiagEchoFailed
	DiagNeighborDown
	DiagForwardingReset
	DiagPathDown
	DiagConcatPathDown
	DiagAdminDown
	DiagReverseConcatPathDown
)

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "no diagnostic"
	case DiagDetectExpired:
		return "control detection time expired"
	case DiagEchoFailed:
		return "echo function failed"
	case DiagNeighborDown:
		return "neighbor signaled session down"
	case DiagForwardingReset:
		return "forwarding plane reset"
	case DiagPathDown:
		return "path down"
	case DiagConcatPathDown:
		return "concatenated path down"
	case DiagAdminDown:
		return "administratively down"
	case DiagReverseConcatPathDown:
		return "reverse concatenated path down"
	}
	return fmt.Sprintf("diagnostic %d", uint8(d))
}

// packetLen is the length of a control packet without authentication,
// the only kind this implementation sends or takes.
const packetLen = 24

// ErrPacket: a control packet is malformed or one this implementation
// does not take (RFC 5880 section 6.8.6, the checks before a session is
// looked up).
var ErrPacket = errors.New("invalid BFD control packet")

// packet is a BFD control packet (RFC 5880 section 4.1).
type packet struct {
	diag                        Diag
	state                       State
	poll, final                 bool
	cpi, auth, demand, multipt  bool
	mult                        uint8
	myDisc, yourDisc            uint32
	desiredMinTx, requiredMinRx time.Duration
	requiredMinEcho             time.Duration
}

// marshal encodes p (no authentication section).
func (p *packet) marshal() []byte {
	b := make([]byte, packetLen)
	b[0] = 1<<5 | byte(p.diag)&0x1f
	b[1] = byte(p.state) << 6
	for _, f := range [...]struct {
		bit byte
		set bool
	}{{0x20, p.poll}, {0x10, p.final}, {0x08, p.cpi}, {0x04, p.auth}, {0x02, p.demand}, {0x01, p.multipt}} {
		if f.set {
			b[1] |= f.bit
		}
	}
	b[2] = p.mult
	b[3] = packetLen
	binary.BigEndian.PutUint32(b[4:], p.myDisc)
	binary.BigEndian.PutUint32(b[8:], p.yourDisc)
	binary.BigEndian.PutUint32(b[12:], micros(p.desiredMinTx))
	binary.BigEndian.PutUint32(b[16:], micros(p.requiredMinRx))
	binary.BigEndian.PutUint32(b[20:], micros(p.requiredMinEcho))
	return b
}

func micros(d time.Duration) uint32 {
	us := d.Microseconds()
	if us < 0 {
		return 0
	}
	if us > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(us)
}

// unmarshal decodes b and applies the checks of RFC 5880 section 6.8.6
// that need no session: version 1, a length the datagram holds, a
// detect multiplier, no multipoint bit, a discriminator of its own, and
// no authentication (this implementation offers none; a packet with the
// A bit is discarded, as the RFC says of a session without it).
func unmarshal(b []byte) (*packet, error) {
	if len(b) < packetLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrPacket, len(b), packetLen)
	}
	if v := b[0] >> 5; v != 1 {
		return nil, fmt.Errorf("%w: version %d", ErrPacket, v)
	}
	p := &packet{
		diag:    Diag(b[0] & 0x1f),
		state:   State(b[1] >> 6),
		poll:    b[1]&0x20 != 0,
		final:   b[1]&0x10 != 0,
		cpi:     b[1]&0x08 != 0,
		auth:    b[1]&0x04 != 0,
		demand:  b[1]&0x02 != 0,
		multipt: b[1]&0x01 != 0,
		mult:    b[2],
	}
	n := int(b[3])
	switch {
	case n < packetLen:
		return nil, fmt.Errorf("%w: length field %d", ErrPacket, n)
	case n > len(b):
		return nil, fmt.Errorf("%w: length field %d over the datagram's %d bytes", ErrPacket, n, len(b))
	case p.auth:
		return nil, fmt.Errorf("%w: authenticated (not offered)", ErrPacket)
	case p.mult == 0:
		return nil, fmt.Errorf("%w: detect multiplier 0", ErrPacket)
	case p.multipt:
		return nil, fmt.Errorf("%w: multipoint bit set", ErrPacket)
	case p.poll && p.final:
		return nil, fmt.Errorf("%w: both poll and final set", ErrPacket)
	}
	p.myDisc = binary.BigEndian.Uint32(b[4:])
	p.yourDisc = binary.BigEndian.Uint32(b[8:])
	p.desiredMinTx = time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond
	p.requiredMinRx = time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond
	p.requiredMinEcho = time.Duration(binary.BigEndian.Uint32(b[20:])) * time.Microsecond
	switch {
	case p.myDisc == 0:
		return nil, fmt.Errorf("%w: my discriminator 0", ErrPacket)
	case p.yourDisc == 0 && p.state != Down && p.state != AdminDown:
		return nil, fmt.Errorf("%w: your discriminator 0 in state %s", ErrPacket, p.state)
	}
	return p, nil
}
