package rateshare

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/ratelimit"
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
	keys     []keyEntry // version 2
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
	if len(b) < headerSize+macSize || [4]byte(b[:4]) != magic || b[4] != wireVersion && b[4] != keysVersion {
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
	if b[4] == keysVersion {
		return d, decodeKeys(&d, body)
	}
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

// The datagram of version 2 carries the hot keys of per-client and
// per-header limits (a host of an earlier release rejects it as bad, and
// shares its total limits only); the same header, then groups instead of
// entries:
//
//	groups u16, each: tenant (u8 length, bytes) | limit id (u16 length,
//	  bytes) | keys u16, each: kind u8 (0: a client address, 16 bytes;
//	  1: a header value's hash, 8 bytes) | arrivals u32
//	| HMAC-SHA256 of everything before, truncated to 16 bytes
const keysVersion = 2

// keyEntry is one key's arrivals.
type keyEntry struct {
	tenant, id string
	key        ratelimit.SharedKey
	n          uint32
}

// keyEntrySize is what one key costs on the wire, group headers apart.
func keyEntrySize(k ratelimit.SharedKey) int {
	if k.Hash != 0 {
		return 1 + 8 + 4
	}
	return 1 + 16 + 4
}

// encodeKeys builds one datagram of as many of entries (sorted by tenant
// and id) as fit and returns the rest.
func encodeKeys(key []byte, inc, seq uint64, at time.Time, entries []keyEntry) ([]byte, []keyEntry) {
	b := make([]byte, headerSize, maxDatagram)
	copy(b, magic[:])
	b[4] = keysVersion
	binary.BigEndian.PutUint64(b[5:], inc)
	binary.BigEndian.PutUint64(b[13:], seq)
	binary.BigEndian.PutUint64(b[21:], uint64(at.UnixMicro()))
	groups, n, count := 0, 0, -1 // count: the offset of the open group's count
	for i, e := range entries {
		open := count >= 0 && entries[i-1].tenant == e.tenant && entries[i-1].id == e.id
		size := keyEntrySize(e.key)
		if !open {
			size += 1 + len(e.tenant) + 2 + len(e.id) + 2
		}
		if len(b)+size+macSize > maxDatagram && n > 0 {
			break
		}
		if !open {
			b = append(b, byte(len(e.tenant)))
			b = append(b, e.tenant...)
			b = binary.BigEndian.AppendUint16(b, uint16(len(e.id)))
			b = append(b, e.id...)
			count = len(b)
			b = append(b, 0, 0)
			groups++
		}
		binary.BigEndian.PutUint16(b[count:], binary.BigEndian.Uint16(b[count:])+1)
		if e.key.Hash != 0 {
			b = append(b, 1)
			b = binary.BigEndian.AppendUint64(b, e.key.Hash)
		} else {
			b = append(b, 0)
			b = append(b, e.key.Addr[:]...)
		}
		b = binary.BigEndian.AppendUint32(b, e.n)
		n++
	}
	binary.BigEndian.PutUint16(b[29:], uint16(groups))
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(b)[:len(b)+macSize], entries[n:]
}

// decodeKeys reads the groups of a datagram of version 2 whose MAC was
// checked; body is the datagram without its MAC.
func decodeKeys(d *datagram, body []byte) error {
	groups := int(binary.BigEndian.Uint16(body[29:]))
	r := body[headerSize:]
	for range groups {
		if len(r) < 1 {
			return errBad
		}
		tl := int(r[0])
		if len(r) < 1+tl+2 {
			return errBad
		}
		tenant := string(r[1 : 1+tl])
		r = r[1+tl:]
		il := int(binary.BigEndian.Uint16(r))
		if il > maxID || len(r) < 2+il+2 {
			return errBad
		}
		id := string(r[2 : 2+il])
		keys := int(binary.BigEndian.Uint16(r[2+il:]))
		r = r[2+il+2:]
		for range keys {
			var e keyEntry
			e.tenant, e.id = tenant, id
			switch {
			case len(r) >= 1+8+4 && r[0] == 1:
				e.key.Hash = binary.BigEndian.Uint64(r[1:])
				if e.key.Hash&1 == 0 {
					return errBad
				}
				r = r[9:]
			case len(r) >= 1+16+4 && r[0] == 0:
				copy(e.key.Addr[:], r[1:17])
				r = r[17:]
			default:
				return errBad
			}
			e.n = binary.BigEndian.Uint32(r)
			r = r[4:]
			d.keys = append(d.keys, e)
		}
	}
	if len(r) != 0 {
		return errBad
	}
	return nil
}
