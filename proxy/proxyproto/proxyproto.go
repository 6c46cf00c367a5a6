// Package proxyproto writes and reads the PROXY protocol header (HAProxy's
// spec, versions 1 and 2) that tells a backend the client's address on a
// proxied TCP connection. The proxy only writes it; the decoder serves
// tests and test backends, and is fuzzed.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
)

// Decoding errors.
var (
	// ErrIncomplete: b is a prefix of a header; read more.
	ErrIncomplete = errors.New("proxyproto: incomplete header")
	// ErrInvalid: b does not start with a valid header.
	ErrInvalid = errors.New("proxyproto: invalid header")
)

// Header is one PROXY protocol header.
type Header struct {
	// Version is 1 (text) or 2 (binary).
	Version int
	// Src and Dst are the client and the address it connected to; both
	// are invalid when the header carries no addresses (v1 UNKNOWN, v2
	// AF_UNSPEC or LOCAL).
	Src, Dst netip.AddrPort
	// Local is the v2 LOCAL command: the connection was made by the proxy
	// itself, not for a client.
	Local bool
}

// v2Sig starts every version 2 header.
var v2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// v1MaxLen is the longest version 1 header, CRLF included.
const v1MaxLen = 107

// Append appends h's encoding to b. Addresses of two families, or
// missing ones, encode as "unknown".
func (h Header) Append(b []byte) []byte {
	known := !h.Local && h.Src.IsValid() && h.Dst.IsValid() && h.Src.Addr().Is4() == h.Dst.Addr().Is4()
	if h.Version == 1 {
		if !known {
			return append(b, "PROXY UNKNOWN\r\n"...)
		}
		proto := "PROXY TCP6 "
		if h.Src.Addr().Is4() {
			proto = "PROXY TCP4 "
		}
		b = append(b, proto...)
		b = h.Src.Addr().AppendTo(b)
		b = append(b, ' ')
		b = h.Dst.Addr().AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(h.Src.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(h.Dst.Port()), 10)
		return append(b, "\r\n"...)
	}
	b = append(b, v2Sig...)
	switch {
	case h.Local:
		return append(b, 0x20, 0x00, 0, 0)
	case !known:
		return append(b, 0x21, 0x00, 0, 0)
	case h.Src.Addr().Is4():
		b = append(b, 0x21, 0x11, 0, 12)
		s, d := h.Src.Addr().As4(), h.Dst.Addr().As4()
		b = append(append(b, s[:]...), d[:]...)
	default:
		b = append(b, 0x21, 0x21, 0, 36)
		s, d := h.Src.Addr().As16(), h.Dst.Addr().As16()
		b = append(append(b, s[:]...), d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, h.Src.Port())
	return binary.BigEndian.AppendUint16(b, h.Dst.Port())
}

// AppendV1 appends a version 1 header for a TCP connection from src to dst.
func AppendV1(b []byte, src, dst netip.AddrPort) []byte {
	return Header{Version: 1, Src: src, Dst: dst}.Append(b)
}

// AppendV2 appends a version 2 header for a TCP connection from src to dst.
func AppendV2(b []byte, src, dst netip.AddrPort) []byte {
	return Header{Version: 2, Src: src, Dst: dst}.Append(b)
}

// Decode reads the header at the start of b and returns it with its
// length. It returns ErrIncomplete when b is a proper prefix of a header.
// Version 2 TLVs are skipped.
func Decode(b []byte) (Header, int, error) {
	switch {
	case len(b) == 0:
		return Header{}, 0, ErrIncomplete
	case b[0] == 'P':
		return decodeV1(b)
	case b[0] == '\r':
		return decodeV2(b)
	}
	return Header{}, 0, ErrInvalid
}

func prefixErr(b, want []byte) error {
	n := min(len(b), len(want))
	if !bytes.Equal(b[:n], want[:n]) {
		return ErrInvalid
	}
	if n < len(want) {
		return ErrIncomplete
	}
	return nil
}

func decodeV1(b []byte) (Header, int, error) {
	if err := prefixErr(b, []byte("PROXY ")); err != nil {
		return Header{}, 0, err
	}
	end := bytes.Index(b[:min(len(b), v1MaxLen)], []byte("\r\n"))
	if end < 0 {
		if len(b) < v1MaxLen && bytes.IndexByte(b, '\n') < 0 {
			return Header{}, 0, ErrIncomplete
		}
		return Header{}, 0, ErrInvalid
	}
	h := Header{Version: 1}
	n := end + 2
	fields := bytes.Split(b[len("PROXY "):end], []byte(" "))
	switch string(fields[0]) {
	case "UNKNOWN":
		return h, n, nil
	case "TCP4", "TCP6":
	default:
		return Header{}, 0, ErrInvalid
	}
	if len(fields) != 5 {
		return Header{}, 0, ErrInvalid
	}
	v4 := string(fields[0]) == "TCP4"
	src, ok1 := parseAddr(fields[1], v4)
	dst, ok2 := parseAddr(fields[2], v4)
	sp, ok3 := parsePort(fields[3])
	dp, ok4 := parsePort(fields[4])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return Header{}, 0, ErrInvalid
	}
	h.Src, h.Dst = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, n, nil
}

func parseAddr(b []byte, v4 bool) (netip.Addr, bool) {
	a, err := netip.ParseAddr(string(b))
	if err != nil || a.Zone() != "" || a.Is4() != v4 {
		return netip.Addr{}, false
	}
	return a, true
}

func parsePort(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 || len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

func decodeV2(b []byte) (Header, int, error) {
	if err := prefixErr(b, v2Sig); err != nil {
		return Header{}, 0, err
	}
	if len(b) < 16 {
		return Header{}, 0, ErrIncomplete
	}
	verCmd, fam := b[12], b[13]
	n := 16 + int(binary.BigEndian.Uint16(b[14:16]))
	if verCmd>>4 != 2 || verCmd&0xf > 1 || fam>>4 > 3 || fam&0xf > 2 {
		return Header{}, 0, ErrInvalid
	}
	if len(b) < n {
		return Header{}, 0, ErrIncomplete
	}
	h := Header{Version: 2, Local: verCmd&0xf == 0}
	body := b[16:n]
	if h.Local {
		return h, n, nil
	}
	switch fam >> 4 {
	case 1:
		if len(body) < 12 {
			return Header{}, 0, ErrInvalid
		}
		h.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
	case 2:
		if len(body) < 36 {
			return Header{}, 0, ErrInvalid
		}
		h.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
	case 3:
		if len(body) < 216 {
			return Header{}, 0, ErrInvalid
		}
	}
	return h, n, nil
}
