package vip

import (
	"bytes"
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
//	| not-ready addresses u16 (arp VIPs, then bgp VIPs), each: 4 or 16 (u8),
//	  address bytes
//	[ | held addresses u16, each: 4 or 16 (u8), address bytes
//	  | sightings u8, each: time heard without a gap in µs u32
//	  [ | partly ready addresses u16, each: 4 or 16 (u8), address bytes
//	    [ | tenant sets u16, each: 4 or 16 (u8), address bytes, digest u32,
//	        tenants u16, bit set of (tenants+7)/8 bytes ] ] ]
//	| HMAC-SHA256 of everything before, truncated to 16 bytes
//
// Flags of the heartbeat: eligible (1), leaving (2), not ready for any
// address (4), holdings (8): the sender reports settled sightings and
// reads the part in brackets, which is sent only to a peer that sets it
// (a host of an earlier version rejects trailing bytes), handing over
// (16): the sender keeps the arp VIPs it holds while its clients are
// handed over and takes no other, or, without eligible, has handed them
// over and lets its VIPs go (a host of an earlier version ignores it and
// reads only eligible, as every version before did), partly (32): the
// sender reads the inner brackets, sent only to a peer that sets it after
// the held part: the not-ready addresses the sender can carry for some of
// the tenants that share them (their attachments up here, not every
// one's). Such an address stays in the not-ready list, so that a host of
// an earlier version takes the sender for not ready, as it did. Tenants
// (64): the sender reads the tenant sets, sent only to a peer that sets
// it after the partly ready addresses: for each address that the
// attachments of several tenants share (vipSpec.Spaces) and that the
// sender can carry for some of them only (an arp VIP of the partly ready
// list; a bgp VIP, also for none of them), the tenants it carries it for.
// Bit i of the set (byte i/8, from its lowest bit) stands for the i-th of
// the address's tenants, sorted, in the sender's committed state; the
// digest (spacesDigest) and the count are those of that list, so that a
// peer whose state lists other tenants for the address (one of the two
// has not applied the latest entry) knows that it cannot read the bits.
// Bits past the count are zero. The sets are sent only after a whole
// not-ready list: one that names the bgp VIPs the sender is not ready for
// too, after its arp ones. Those go in only when every part that goes
// without them still fits with them; when they do not, the sets are left
// out, and a reader takes the sender's bgp VIPs for not known
// (servedFor). A host of an earlier version reads the list as before:
// its decisions look in it for arp VIPs alone. Ordered (128): the
// sender's incarnation is greater than that of every earlier process of
// the same host (nextIncarnation), so that a reader refuses one below the
// highest it took from that host; without it (a host of an earlier
// version, whose incarnation is random) the incarnation is only compared
// for equality.
// Flags of a sighting: eligible (1), settled (2): the sender has heard
// the peer for the whole settling time.

const (
	wireVersion  = 1
	macSize      = 16
	maxDatagram  = 8192
	flagEligible = 1 << 0
	flagLeaving  = 1 << 1
	flagNotReady = 1 << 2
	flagHoldings = 1 << 3
	flagHandover = 1 << 4
	flagPartly   = 1 << 5
	flagTenants  = 1 << 6
	flagOrdered  = 1 << 7
	flagSettled  = 1 << 1 // of a sighting
)

var wireMagic = [4]byte{'T', 'P', 'H', 'B'}

// errBadHeartbeat: a datagram is not a valid heartbeat.
var errBadHeartbeat = errors.New("bad heartbeat")

// heartbeat is one datagram of the failure detector.
type heartbeat struct {
	ID string
	// Incarnation stands for the sender's process; Seq counts up within
	// it. Ordered: the incarnation is greater than that of any earlier
	// process of the sender's host (flagOrdered); without it, it is
	// random (a host of an earlier version).
	Incarnation uint64
	Seq         uint64
	Ordered     bool
	// Revision is the state revision the sender acts on.
	Revision uint64
	// Eligible: the sender may hold VIPs (it sees a majority, its
	// interface is up and its data plane reported).
	Eligible bool
	// Leaving: the sender is shutting down; take its VIPs now.
	Leaving bool
	// Handover: the sender keeps the arp VIPs it holds while its clients
	// are handed over (drained or stopping) and takes no other: its peers
	// rank it only for the VIPs it holds. Without Eligible: it has handed
	// them over and lets its VIPs go.
	Handover bool
	// NotReadyAll: the sender is not ready for any address (it has no
	// state yet, or its list did not fit).
	NotReadyAll bool
	// Sightings are the peers the sender hears itself.
	Sightings []sighting
	// Holdings: the sender sets flagHoldings (every host of this version
	// does); Holding lists the arp VIPs it holds, sent only to peers
	// that set it.
	Holdings bool
	Holding  []netip.Addr
	// HoldingSent: the datagram carried the held addresses.
	HoldingSent bool
	// NotReady lists the addresses the sender cannot serve (for every
	// tenant that shares them). A sender puts its arp VIPs there and
	// NotReadyBGP after them, when they fit (sentParts.BGP); a reader
	// gets both in NotReady.
	NotReady    []netip.Addr
	NotReadyBGP []netip.Addr
	// ReadsPartly: the sender sets flagPartly (every host of this
	// version does); Partly lists the addresses of NotReady that it can
	// carry for some of the tenants sharing them, sent only with the held
	// part, to peers that set it; PartlySent: the datagram carried them.
	ReadsPartly bool
	Partly      []netip.Addr
	PartlySent  bool
	// ReadsTenants: the sender sets flagTenants (every host of this
	// version does); Tenants are the tenant sets of the shared addresses
	// it can carry for some of their tenants only, sorted by address,
	// sent only after the partly ready addresses, to peers that set it;
	// TenantsSent: the datagram carried them.
	ReadsTenants bool
	Tenants      []tenantSet
	TenantsSent  bool
}

// tenantSet says for which of the tenants that share an address
// (vipSpec.Spaces, sorted) a host carries it: bit i of Bits (byte i/8,
// from its lowest bit) for the i-th of them. Digest and N are the
// spacesDigest and the number of those tenants in the sender's state: a
// reader whose state gives the address other tenants cannot read Bits.
type tenantSet struct {
	Addr   netip.Addr
	Digest uint32
	N      uint16
	Bits   []byte
}

// maxSetTenants bounds the tenants of one set: an address shared by more
// goes without a set (its peers take the sender's tenants for not known).
const maxSetTenants = math.MaxUint16

// newTenantSet returns the set of the tenants of spaces (sorted) not in
// unserved.
func newTenantSet(a netip.Addr, spaces []string, unserved map[string]string) (tenantSet, bool) {
	if len(spaces) > maxSetTenants {
		return tenantSet{}, false
	}
	s := tenantSet{Addr: a, Digest: spacesDigest(spaces), N: uint16(len(spaces)), Bits: make([]byte, (len(spaces)+7)/8)}
	for i, t := range spaces {
		if _, ok := unserved[t]; !ok {
			s.Bits[i/8] |= 1 << (i % 8)
		}
	}
	return s, true
}

// tenants returns the tenants of spaces (the address's in the reader's
// state, sorted) the set carries it for, and false when the set was made
// from another list of tenants (not known).
func (s tenantSet) tenants(spaces []string) ([]string, bool) {
	if int(s.N) != len(spaces) || s.Digest != spacesDigest(spaces) {
		return nil, false
	}
	var out []string
	for i, t := range spaces {
		if s.Bits[i/8]&(1<<(i%8)) != 0 {
			out = append(out, t)
		}
	}
	return out, true
}

func (s tenantSet) equal(o tenantSet) bool {
	return s.Addr == o.Addr && s.Digest == o.Digest && s.N == o.N && bytes.Equal(s.Bits, o.Bits)
}

// wireSize is what s takes in a datagram.
func (s tenantSet) wireSize() int {
	return 1 + s.Addr.BitLen()/8 + 4 + 2 + len(s.Bits)
}

// spacesDigest is the 32-bit FNV-1a hash of the tenants, each followed by
// a zero byte (a tenant name holds none).
func spacesDigest(spaces []string) uint32 {
	h := uint32(2166136261)
	for _, t := range spaces {
		for i := 0; i < len(t); i++ {
			h = (h ^ uint32(t[i])) * 16777619
		}
		h *= 16777619 // ^0
	}
	return h
}

// marshal encodes hb and signs it with key; the held addresses go in
// only with withHolding (for a peer that reads them), after them the
// partly ready addresses when hb.PartlySent, and after those the tenant
// sets when hb.TenantsSent. A not-ready list
// that does not fit in one datagram becomes NotReadyAll; held addresses
// that do not fit are left out, so that the peer falls back to the
// ranking alone.
func (hb *heartbeat) marshal(key []byte, withHolding bool) ([]byte, error) {
	if len(hb.ID) == 0 || len(hb.ID) > math.MaxUint8 {
		return nil, fmt.Errorf("%w: node id must be 1 to 255 bytes", errBadHeartbeat)
	}
	b := hb.appendTo(make([]byte, 0, 64+len(hb.Sightings)*20+len(hb.NotReady)*5+len(hb.NotReadyBGP)*5+len(hb.Holding)*5+len(hb.Partly)*5+len(hb.Tenants)*12),
		withHolding, withHolding && hb.PartlySent, withHolding && hb.PartlySent && hb.TenantsSent)
	return append(b, sign(key, b)...), nil
}

// appendTo appends the unsigned datagram to b, with the held part for a
// peer that reads it (withHolding), after that the partly ready
// addresses (withPartly) and after those the tenant sets (withTenants).
// It allocates nothing when b has room for it (maxDatagram), so that the
// heartbeat thread can send without producing garbage. A part that does
// not fit is left out.
func (hb *heartbeat) appendTo(b []byte, withHolding, withPartly, withTenants bool) []byte {
	b, _ = hb.appendParts(b, withHolding, withPartly, withTenants)
	return b
}

// sentParts says what a datagram tells its reader of the lists of a
// heartbeat: not ready for any address (NotReadyAll, also when the
// not-ready list did not fit), and whether the bgp addresses of the
// not-ready list, the held addresses, the partly ready addresses and the
// tenant sets went in.
type sentParts struct {
	NotReadyAll, BGP, Holding, Partly, Tenants bool
}

// fit decides which parts go into a datagram (appendParts) whose header
// and n sightings take head bytes.
func (hb *heartbeat) fit(head, n int, withHolding, withPartly, withTenants bool) (sent sentParts) {
	size := head + 2 + addrsSize(hb.NotReady) + macSize
	sent.NotReadyAll = hb.NotReadyAll || size > maxDatagram
	if sent.NotReadyAll {
		size = head + 2 + macSize
	}
	if withHolding {
		if s := size + 2 + addrsSize(hb.Holding) + 1 + 4*n; s <= maxDatagram {
			size, sent.Holding = s, true
			if s := size + 2 + addrsSize(hb.Partly); withPartly && s <= maxDatagram && !sent.NotReadyAll {
				size, sent.Partly = s, true
				ts := size + 2
				for _, t := range hb.Tenants {
					ts += t.wireSize()
				}
				if withTenants && ts <= maxDatagram && len(hb.Tenants) <= math.MaxUint16 {
					size, sent.Tenants = ts, true
				}
			}
		}
	}
	// The bgp addresses take no room from the other parts: without them
	// the sets go too, so that the reader knows the list lacks them.
	if !sent.NotReadyAll {
		sent.BGP = size+addrsSize(hb.NotReadyBGP) <= maxDatagram && len(hb.NotReady)+len(hb.NotReadyBGP) <= math.MaxUint16
		sent.Tenants = sent.Tenants && sent.BGP
	}
	return sent
}

// addrsSize is what the addresses take in a datagram, after their count;
// more than maxDatagram for a list that cannot fit in one, whatever its
// length: an address takes at least 5 bytes, so a heartbeat's sizing does
// not go over every bgp VIP of a host that lists them all.
func addrsSize(as []netip.Addr) int {
	if len(as) > maxDatagram/5 {
		return maxDatagram + 1
	}
	n := 0
	for _, a := range as {
		n += 1 + a.BitLen()/8
	}
	return n
}

// appendParts is appendTo, and says what went in (the held addresses
// with withHolding, the partly ready ones with withPartly and the tenant
// sets after them with withTenants, unless they did not fit; the partly
// ready ones not when the sender is not ready for any address; the bgp
// addresses of the not-ready list as fit says).
func (hb *heartbeat) appendParts(b []byte, withHolding, withPartly, withTenants bool) (_ []byte, sent sentParts) {
	start := len(b)
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
		if !s.fits(n) {
			continue
		}
		n++
		b = append(b, byte(len(s.ID)))
		b = append(b, s.ID...)
		b = binary.BigEndian.AppendUint32(b, micros(s.Age))
		var f byte
		if s.Eligible {
			f |= flagEligible
		}
		if s.Settled {
			f |= flagSettled
		}
		b = append(b, f)
	}
	b[at] = byte(n)
	sent = hb.fit(len(b)-start, n, withHolding, withPartly, withTenants)
	switch {
	case sent.NotReadyAll:
		b = append(b, 0, 0)
	case sent.BGP:
		b = binary.BigEndian.AppendUint16(b, uint16(len(hb.NotReady)+len(hb.NotReadyBGP)))
		b = appendAddrBytes(b, hb.NotReady)
		b = appendAddrBytes(b, hb.NotReadyBGP)
	default:
		b = appendAddrs(b, hb.NotReady)
	}
	if sent.Holding {
		b = appendAddrs(b, hb.Holding)
		b = append(b, byte(n))
		k := 0
		for _, s := range hb.Sightings {
			if s.fits(k) {
				k++
				b = binary.BigEndian.AppendUint32(b, micros(s.AliveFor))
			}
		}
	}
	if sent.Partly {
		b = appendAddrs(b, hb.Partly)
	}
	if sent.Tenants {
		b = appendSets(b, hb.Tenants)
	}
	var f byte
	if hb.Holdings {
		f |= flagHoldings
	}
	if hb.Eligible {
		f |= flagEligible
	}
	if hb.Leaving {
		f |= flagLeaving
	}
	if hb.Handover {
		f |= flagHandover
	}
	if hb.ReadsPartly {
		f |= flagPartly
	}
	if hb.ReadsTenants {
		f |= flagTenants
	}
	if hb.Ordered {
		f |= flagOrdered
	}
	if sent.NotReadyAll {
		f |= flagNotReady
	}
	b[start+5] = f
	return b, sent
}

// fits reports whether s goes on the wire after n others.
func (s sighting) fits(n int) bool {
	return len(s.ID) > 0 && len(s.ID) <= math.MaxUint8 && n < math.MaxUint8
}

// micros is d in whole microseconds, within a u32.
func micros(d time.Duration) uint32 {
	return uint32(min(max(d, 0)/time.Microsecond, math.MaxUint32))
}

func appendAddrs(b []byte, as []netip.Addr) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(as)))
	return appendAddrBytes(b, as)
}

// appendAddrBytes appends the addresses without their count.
func appendAddrBytes(b []byte, as []netip.Addr) []byte {
	for _, a := range as {
		if a.Is4() {
			v := a.As4()
			b = append(b, 4)
			b = append(b, v[:]...)
		} else {
			v := a.As16()
			b = append(b, 16)
			b = append(b, v[:]...)
		}
	}
	return b
}

func appendSets(b []byte, sets []tenantSet) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(sets)))
	for _, s := range sets {
		if s.Addr.Is4() {
			v := s.Addr.As4()
			b = append(b, 4)
			b = append(b, v[:]...)
		} else {
			v := s.Addr.As16()
			b = append(b, 16)
			b = append(b, v[:]...)
		}
		b = binary.BigEndian.AppendUint32(b, s.Digest)
		b = binary.BigEndian.AppendUint16(b, s.N)
		b = append(b, s.Bits...)
	}
	return b
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
		Eligible:     flags&flagEligible != 0,
		Leaving:      flags&flagLeaving != 0,
		Handover:     flags&flagHandover != 0,
		NotReadyAll:  flags&flagNotReady != 0,
		Holdings:     flags&flagHoldings != 0,
		ReadsPartly:  flags&flagPartly != 0,
		ReadsTenants: flags&flagTenants != 0,
		Ordered:      flags&flagOrdered != 0,
	}
	hb.ID = r.str()
	for range int(r.u8()) {
		s := sighting{ID: r.str()}
		s.Age = time.Duration(r.u32()) * time.Microsecond
		f := r.u8()
		s.Eligible, s.Settled = f&flagEligible != 0, f&flagSettled != 0
		if r.err {
			break
		}
		if s.ID == "" {
			// No sender writes one (sighting.fits).
			return bad("empty node id in a sighting")
		}
		hb.Sightings = append(hb.Sightings, s)
	}
	var ok bool
	var what string
	if hb.NotReady, ok = r.addrs(); !ok {
		return bad("address length must be 4 or 16")
	}
	if hb.NotReadyAll {
		// No sender lists addresses then (appendParts), and no reader
		// looks at them: taken as none, so that the heartbeat encodes
		// back to the same bytes.
		hb.NotReady = nil
	}
	// Held addresses follow when there are bytes left (a peer sends them
	// only to hosts that read them).
	if len(r.b) > 0 {
		hb.HoldingSent = true
		if hb.Holding, ok = r.addrs(); !ok {
			return bad("address length must be 4 or 16")
		}
		if int(r.u8()) != len(hb.Sightings) && !r.err {
			return bad("times heard do not match the sightings")
		}
		for i := range hb.Sightings {
			hb.Sightings[i].AliveFor = time.Duration(r.u32()) * time.Microsecond
		}
		// The partly ready addresses follow when there are bytes left
		// (sent only to hosts that read them).
		if len(r.b) > 0 && !r.err {
			if hb.NotReadyAll {
				// No sender writes them then (appendTo).
				return bad("partly ready addresses of a host not ready for any")
			}
			hb.PartlySent = true
			if hb.Partly, ok = r.addrs(); !ok {
				return bad("address length must be 4 or 16")
			}
			// The tenant sets follow when there are bytes left (sent
			// only to hosts that read them).
			if len(r.b) > 0 && !r.err {
				hb.TenantsSent = true
				if hb.Tenants, what = r.sets(); what != "" {
					return bad(what)
				}
			}
		}
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

// addrs reads a u16 count and that many addresses (false: a length other
// than 4 or 16).
func (r *reader) addrs() ([]netip.Addr, bool) {
	var out []netip.Addr
	for range int(r.u16()) {
		n := int(r.u8())
		if r.err {
			break
		}
		if n != 4 && n != 16 {
			return nil, false
		}
		a, ok := netip.AddrFromSlice(r.bytes(n))
		if r.err || !ok {
			break
		}
		out = append(out, a)
	}
	return out, true
}

// sets reads a u16 count and that many tenant sets ("" when they are
// well formed, else what is wrong).
func (r *reader) sets() ([]tenantSet, string) {
	count := int(r.u16())
	// The bit sets are kept from one copy of the rest of the datagram
	// (the reader's buffer takes the next one), and each set takes at
	// least 11 bytes.
	r.b = bytes.Clone(r.b)
	out := make([]tenantSet, 0, min(count, len(r.b)/11))
	for range count {
		n := int(r.u8())
		if r.err {
			break
		}
		if n != 4 && n != 16 {
			return nil, "address length must be 4 or 16"
		}
		a, ok := netip.AddrFromSlice(r.bytes(n))
		s := tenantSet{Addr: a, Digest: r.u32(), N: r.u16()}
		s.Bits = r.bytes((int(s.N) + 7) / 8)
		if r.err || !ok {
			break
		}
		if s.N%8 != 0 && s.Bits[len(s.Bits)-1]>>(s.N%8) != 0 {
			// No sender writes them (newTenantSet).
			return nil, "bits set past the tenants of a set"
		}
		out = append(out, s)
	}
	return out, ""
}

func (r *reader) str() string {
	return string(r.bytes(int(r.u8())))
}
