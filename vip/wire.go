package vip

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// The heartbeat datagram, version 1, all integers big-endian:
//
//	magic "TPHB" | version 1 | flags | incarnation u64 | seq u64 | revision u64
//	| id (u8 length, bytes)
//	| sightings u8, each: id (u8 length, bytes), age in µs u32, flags u8
//	| not-ready addresses u16, each: 4 or 16 (u8), address bytes
//	| HMAC-SHA256 of everything before, truncated to 16 bytes
//
// Flags of the heartbeat: eligible (1), leaving (2), not ready for any
// address (4). Flags of a sighting: eligible (1).

const (
	wireVersion  = 1
	macSize      = 16
	maxDatagram  = 8192
	flagEligible = 1 << 0
	flagLeaving  = 1 << 1
	flagNotReady = 1 << 2
)

var wireMagic = [4]byte{'T', 'P', 'H', 'B'}

// errBadHeartbeat: a datagram is not a valid heartbeat.
var errBadHeartbeat = errors.New("bad heartbeat")

// heartbeat is one datagram of the failure detector.
type heartbeat struct {
	ID string
	// Incarnation is random per process start; Seq counts up within it.
	Incarnation uint64
	Seq         uint64
	// Revision is the state revision the sender acts on.
	Revision uint64
	// Eligible: the sender may hold VIPs (it sees a majority, its
	// interface is up and its data plane reported).
	Eligible bool
	// Leaving: the sender is shutting down; take its VIPs now.
	Leaving bool
	// NotReadyAll: the sender is not ready for any address (it has no
	// state yet, or its list did not fit).
	NotReadyAll bool
	// Sightings are the peers the sender hears itself.
	Sightings []sighting
	// NotReady lists the addresses the sender cannot serve.
	NotReady []netip.Addr
}

// marshal encodes hb and signs it with key. A not-ready list that does
// not fit in one datagram becomes NotReadyAll.
func (hb *heartbeat) marshal(key []byte) ([]byte, error) {
	if len(hb.ID) == 0 || len(hb.ID) > math.MaxUint8 {
		return nil, fmt.Errorf("%w: node id must be 1 to 255 bytes", errBadHeartbeat)
	}
	b := make([]byte, 0, 64+len(hb.Sightings)*16+len(hb.NotReady)*5)
	b = append(b, wireMagic[:]...)
	b = append(b, wireVersion, 0)
	b = binary.BigEndian.AppendUint64(b, hb.Incarnation)
	b = binary.BigEndian.AppendUint64(b, hb.Seq)
	b = binary.BigEndian.AppendUint64(b, hb.Revision)
	b = append(b, byte(len(hb.ID)))
	b = append(b, hb.ID...)
	n := 0
	at := len(b)
	b = append(b, 0)
	for _, s := range hb.Sightings {
		if len(s.ID) == 0 || len(s.ID) > math.MaxUint8 || n == math.MaxUint8 {
			continue
		}
		n++
		b = append(b, byte(len(s.ID)))
		b = append(b, s.ID...)
		age := max(s.Age, 0) / time.Microsecond
		b = binary.BigEndian.AppendUint32(b, uint32(min(age, math.MaxUint32)))
		var f byte
		if s.Eligible {
			f |= flagEligible
		}
		b = append(b, f)
	}
	b[at] = byte(n)
	notReadyAll := hb.NotReadyAll
	size := len(b) + 2 + macSize
	for _, a := range hb.NotReady {
		size += 1 + a.BitLen()/8
	}
	if size > maxDatagram {
		notReadyAll = true
	}
	if notReadyAll {
		b = append(b, 0, 0)
	} else {
		b = binary.BigEndian.AppendUint16(b, uint16(len(hb.NotReady)))
		for _, a := range hb.NotReady {
			s := a.AsSlice()
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
	}
	var f byte
	if hb.Eligible {
		f |= flagEligible
	}
	if hb.Leaving {
		f |= flagLeaving
	}
	if notReadyAll {
		f |= flagNotReady
	}
	b[5] = f
	return append(b, sign(key, b)...), nil
}

func sign(key, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)[:macSize]
}

// parseHeartbeat decodes a datagram and checks its signature.
func parseHeartbeat(b, key []byte) (*heartbeat, error) {
	bad := func(what string) (*heartbeat, error) {
		return nil, fmt.Errorf("%w: %s", errBadHeartbeat, what)
	}
	if len(b) < 4+2+24+1+1+2+macSize {
		return bad("too short")
	}
	if len(b) > maxDatagram {
		return bad("too long")
	}
	if [4]byte(b[:4]) != wireMagic {
		return bad("not a teapot-lb heartbeat")
	}
	if b[4] != wireVersion {
		return bad(fmt.Sprintf("version %d, want %d", b[4], wireVersion))
	}
	body, mac := b[:len(b)-macSize], b[len(b)-macSize:]
	if !hmac.Equal(mac, sign(key, body)) {
		return bad("signature does not match (another cluster, or a forged datagram)")
	}
	flags := body[5]
	r := reader{b: body[6:]}
	hb := &heartbeat{
		Incarnation: r.u64(), Seq: r.u64(), Revision: r.u64(),
		Eligible:    flags&flagEligible != 0,
		Leaving:     flags&flagLeaving != 0,
		NotReadyAll: flags&flagNotReady != 0,
	}
	hb.ID = r.str()
	for range int(r.u8()) {
		s := sighting{ID: r.str()}
		s.Age = time.Duration(r.u32()) * time.Microsecond
		s.Eligible = r.u8()&flagEligible != 0
		if r.err {
			break
		}
		hb.Sightings = append(hb.Sightings, s)
	}
	for range int(r.u16()) {
		n := int(r.u8())
		if n != 4 && n != 16 {
			return bad("address length must be 4 or 16")
		}
		a, ok := netip.AddrFromSlice(r.bytes(n))
		if r.err || !ok {
			break
		}
		hb.NotReady = append(hb.NotReady, a)
	}
	if r.err {
		return bad("truncated")
	}
	if len(r.b) != 0 {
		return bad("trailing bytes")
	}
	if hb.ID == "" {
		return bad("empty node id")
	}
	return hb, nil
}

// reader takes fields off a byte slice; past the end it yields zeros and
// sets err.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) bytes(n int) []byte {
	if r.err || len(r.b) < n {
		r.err = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() uint8 {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.bytes(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str() string {
	return string(r.bytes(int(r.u8())))
}
