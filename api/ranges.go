package api

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// Range is an inclusive span of addresses of one family.
type Range struct{ From, To netip.Addr }

// Contains reports whether a lies inside r.
func (r Range) Contains(a netip.Addr) bool {
	return a.IsValid() && r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0
}

// Overlaps reports whether r and o share an address.
func (r Range) Overlaps(o Range) bool {
	return r.From.Compare(o.To) <= 0 && o.From.Compare(r.To) <= 0
}

// String renders "from-to", the form ParsePoolRanges reads back.
func (r Range) String() string {
	return r.From.String() + "-" + r.To.String()
}

// rangeError is a parse failure of one pool entry; it wraps ErrInvalid.
type rangeError struct{ reason string }

func (e *rangeError) Error() string { return e.reason }
func (e *rangeError) Unwrap() error { return ErrInvalid }

func rangeErrorf(format string, args ...any) error {
	return &rangeError{reason: reasonf(format, args)}
}

const rangeExample = "like 192.0.2.0/28, 192.0.2.10-192.0.2.20 or 2001:db8::/120"

// ParsePoolRanges parses a VIPPool's cidrs: CIDRs in canonical form
// ("192.0.2.0/28", "2001:db8::/120") or inclusive ranges of one family
// ("192.0.2.10-192.0.2.20"). The error names the entry ("cidrs[2]: ...")
// and wraps ErrInvalid.
func ParsePoolRanges(cidrs []string) ([]Range, error) {
	out := make([]Range, 0, len(cidrs))
	for i, s := range cidrs {
		pr, err := parsePoolRange(s)
		if err != nil {
			return nil, fmt.Errorf("cidrs[%d]: %w", i, err)
		}
		out = append(out, pr.Range)
	}
	return out, nil
}

// poolRange is one parsed pool entry with the part allocation may hand out.
type poolRange struct {
	Range
	text string
	// bits is the prefix length of a CIDR entry, -1 for an a-b range.
	bits int
	// usable excludes the IPv4 network and broadcast addresses of CIDRs
	// shorter than /31 and the IPv6 subnet-router anycast address of CIDRs
	// shorter than /127.
	usable Range
}

// reserved says why a lies in the range but is never handed out, or "".
func (p poolRange) reserved(a netip.Addr) string {
	if !p.Contains(a) || p.usable.Contains(a) {
		return ""
	}
	switch {
	case a.Is6():
		return "the subnet-router anycast address of " + p.text
	case a == p.From:
		return "the network address of " + p.text
	default:
		return "the broadcast address of " + p.text
	}
}

func parsePoolRange(raw string) (poolRange, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return poolRange{}, rangeErrorf("empty; give a CIDR or a range, %s", rangeExample)
	}
	if from, to, ok := strings.Cut(s, "-"); ok {
		a, err := parseVIPAddr(strings.TrimSpace(from))
		if err != nil {
			return poolRange{}, err
		}
		b, err := parseVIPAddr(strings.TrimSpace(to))
		if err != nil {
			return poolRange{}, err
		}
		if a.Is4() != b.Is4() {
			return poolRange{}, rangeErrorf("%s: %s and %s are of different families", s, a, b)
		}
		if a.Compare(b) > 0 {
			return poolRange{}, rangeErrorf("%s: start %s is after end %s", s, a, b)
		}
		r := Range{From: a, To: b}
		return poolRange{Range: r, text: s, bits: -1, usable: r}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return poolRange{}, rangeErrorf("%s is not a CIDR or a range, %s", Excerpt(raw), rangeExample)
		}
		if p.Addr().Is4In6() {
			return poolRange{}, rangeErrorf("%s is an IPv4-mapped IPv6 prefix; write it in IPv4 form", s)
		}
		if m := p.Masked(); m != p {
			return poolRange{}, rangeErrorf("%s is not in canonical form; use %s", s, m)
		}
		return prefixRange(p, s), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" && !a.Is4In6() {
		return poolRange{}, rangeErrorf("%s is a single address; write it as %s/%d", s, a, a.BitLen())
	}
	return poolRange{}, rangeErrorf("%s is not a CIDR or a range, %s", Excerpt(raw), rangeExample)
}

// parseVIPAddr parses an address as written in pools and VIP requests.
func parseVIPAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, rangeErrorf("%s is not an IP address", Excerpt(s))
	case a.Zone() != "":
		return netip.Addr{}, rangeErrorf("%s: zones are not allowed; use %s", s, a.WithZone(""))
	case a.Is4In6():
		return netip.Addr{}, rangeErrorf("%s is an IPv4-mapped IPv6 address; use %s", s, a.Unmap())
	}
	return a, nil
}

func prefixRange(p netip.Prefix, text string) poolRange {
	from := p.Addr()
	to := lastAddr(p)
	r := Range{From: from, To: to}
	u := r
	switch {
	case from.Is4() && p.Bits() < 31:
		u = Range{From: from.Next(), To: to.Prev()}
	case from.Is6() && p.Bits() < 127:
		u = Range{From: from.Next(), To: to}
	}
	return poolRange{Range: r, text: text, bits: p.Bits(), usable: u}
}

// lastAddr returns the highest address of a masked prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	u := toU128(p.Addr())
	host := 128 - p.Bits()
	if p.Addr().Is4() {
		host = 32 - p.Bits()
	}
	var mask u128
	switch {
	case host >= 128:
		mask = u128{^uint64(0), ^uint64(0)}
	case host > 64:
		mask = u128{(1 << (host - 64)) - 1, ^uint64(0)}
	case host == 64:
		mask = u128{0, ^uint64(0)}
	default:
		mask = u128{0, (1 << host) - 1}
	}
	return fromU128(u128{u.hi | mask.hi, u.lo | mask.lo}, p.Addr().Is4())
}

// parseRanges parses a pool's entries, skipping broken ones (validation
// reports those; stored pools never have any).
func parseRanges(cidrs []string) []poolRange {
	out := make([]poolRange, 0, len(cidrs))
	for _, s := range cidrs {
		if pr, err := parsePoolRange(s); err == nil {
			out = append(out, pr)
		}
	}
	return out
}

func rangesContain(rs []poolRange, a netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

func usableContain(rs []poolRange, a netip.Addr) bool {
	for _, r := range rs {
		if r.usable.Contains(a) {
			return true
		}
	}
	return false
}

// u128 is an address as a 128-bit number, for offsets inside ranges.
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func fromU128(u u128, is4 bool) netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	a := netip.AddrFrom16(b)
	if is4 {
		return a.Unmap()
	}
	return a
}

func (u u128) add(n uint64) u128 {
	lo := u.lo + n
	hi := u.hi
	if lo < u.lo {
		hi++
	}
	return u128{hi, lo}
}

func (u u128) sub(v u128) u128 {
	lo := u.lo - v.lo
	hi := u.hi - v.hi
	if u.lo < v.lo {
		hi--
	}
	return u128{hi, lo}
}

// PrefixRange is the range of addresses p covers.
func PrefixRange(p netip.Prefix) Range {
	p = p.Masked()
	return Range{From: p.Addr(), To: lastAddr(p)}
}
