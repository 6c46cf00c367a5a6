package rateshare

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"
)

// The datagram, version 1, integers big-endian:
//
//	magic "TPRS" | version 1 | incarnation u64 | seq u64 | unix time in µs i64
//	| entries u16, each: tenant (u8 length, bytes) | limit id (u16 length,
//	  bytes) | arrivals u32
//	| HMAC-SHA256 of everything before, truncated to 16 bytes

const (
	wireVersion = 1
	macSize     = 16
	headerSize  = 4 + 1 + 8 + 8 + 8 + 2
	maxDatagram = 8192
	maxTenant   = 255
	maxID       = 1024
)

var magic = [4]byte{'T', 'P', 'R', 'S'}

var errBad = errors.New("bad rate share datagram")

type entry struct {
	tenant, id string
	n          uint32
}

type datagram struct {
	inc, seq uint64
	at       time.Time
	entries  []entry
}

// encode builds one datagram of as many entries as fit and returns the
// rest.
func encode(key []byte, inc, seq uint64, at time.Time, entries []entry) ([]byte, []entry) {
	b := make([]byte, headerSize, maxDatagram)
	copy(b, magic[:])
	b[4] = wireVersion
	binary.BigEndian.PutUint64(b[5:], inc)
	binary.BigEndian.PutUint64(b[13:], seq)
	binary.BigEndian.PutUint64(b[21:], uint64(at.UnixMicro()))
	n := 0
	for _, e := range entries {
		size := 1 + len(e.tenant) + 2 + len(e.id) + 4
		if len(b)+size+macSize > maxDatagram && n > 0 {
			break
		}
		b = append(b, byte(len(e.tenant)))
		b = append(b, e.tenant...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.id)))
		b = append(b, e.id...)
		b = binary.BigEndian.AppendUint32(b, e.n)
		n++
	}
	binary.BigEndian.PutUint16(b[29:], uint16(n))
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(b)[:len(b)+macSize], entries[n:]
}

// decode checks a datagram's MAC and reads it.
func decode(key []byte, b []byte) (datagram, error) {
	var d datagram
	if len(b) < headerSize+macSize || [4]byte(b[:4]) != magic || b[4] != wireVersion {
		return d, errBad
	}
	body, mac := b[:len(b)-macSize], b[len(b)-macSize:]
	m := hmac.New(sha256.New, key)
	m.Write(body)
	if !hmac.Equal(m.Sum(nil)[:macSize], mac) {
		return d, errBad
	}
	d.inc = binary.BigEndian.Uint64(b[5:])
	d.seq = binary.BigEndian.Uint64(b[13:])
	d.at = time.UnixMicro(int64(binary.BigEndian.Uint64(b[21:])))
	count := int(binary.BigEndian.Uint16(b[29:]))
	r := body[headerSize:]
	for range count {
		if len(r) < 1 {
			return d, errBad
		}
		tl := int(r[0])
		if len(r) < 1+tl+2 {
			return d, errBad
		}
		tenant := string(r[1 : 1+tl])
		r = r[1+tl:]
		il := int(binary.BigEndian.Uint16(r))
		if il > maxID || len(r) < 2+il+4 {
			return d, errBad
		}
		id := string(r[2 : 2+il])
		r = r[2+il:]
		d.entries = append(d.entries, entry{tenant, id, binary.BigEndian.Uint32(r)})
		r = r[4:]
	}
	if len(r) != 0 {
		return d, errBad
	}
	return d, nil
}
