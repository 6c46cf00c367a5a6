package l7

import (
	"bytes"
	"net/netip"
	"unsafe"
)

// Statuses the request parser refuses with. 0 means no refusal.
const (
	stBadRequest     = 400
	stTooLarge       = 431
	stBadVersion     = 505
	stMethodNotAllow = 405
)

// maxLeadingCRLF is how many empty lines may precede a request line
// (RFC 9112 section 2.2).
const maxLeadingCRLF = 4

// target forms.
const (
	formOrigin uint8 = iota
	formAbsolute
	formAsterisk
)

// reqHead is a parsed request head; positions are offsets from its start.
type reqHead struct {
	headLines
	blank int // empty lines skipped before the request line

	mS, mE int // method
	tS, tE int // request target
	minor  uint8
	form   uint8
	// authS, authE delimit the authority of an absolute-form target.
	authS, authE int
	// pS, pE delimit the path of the target; qS is where its query starts
	// (tE when none).
	pS, pE, qS int

	contentLength int64 // -1 when absent
	chunked       bool
	host          int // index of the Host field, -1 when absent
	upgrade       int // index of the Upgrade field, -1 when absent
	expect100     bool
}

func (h *reqHead) reset() {
	h.headLines.reset()
	*h = reqHead{headLines: h.headLines, contentLength: -1, host: -1, upgrade: -1}
}

// parse consumes the complete lines of b, the head received so far, and
// reports whether the head is complete. A non-zero status refuses it.
func (h *reqHead) parse(b []byte, maxBytes, maxCount int) (done bool, status int) {
	for {
		le, st := h.line(b, maxBytes)
		switch st {
		case lineMore:
			return false, 0
		case lineLong:
			return false, stTooLarge
		case lineBad:
			return false, stBadRequest // bare LF
		}
		empty := le-h.pos == 2
		switch {
		case !h.started && empty:
			if h.blank++; h.blank > maxLeadingCRLF {
				return false, stBadRequest
			}
		case !h.started:
			if st := h.parseRequestLine(b, h.pos, le-2); st != 0 {
				return false, st
			}
			h.started = true
		case empty:
			h.n = le
			return true, h.finish(b)
		default:
			switch h.addField(b, le, maxCount) {
			case lineLong:
				return false, stTooLarge
			case lineBad:
				return false, stBadRequest
			}
		}
		h.pos = le
	}
}

func (h *reqHead) parseRequestLine(b []byte, ls, le int) int {
	line := b[ls:le]
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return stBadRequest
	}
	for _, c := range line[:sp] {
		if !tchar[c] {
			return stBadRequest
		}
	}
	rest := line[sp+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return stBadRequest
	}
	for _, c := range rest[:sp2] {
		if !tgtchar[c] {
			return stBadRequest
		}
	}
	ver := rest[sp2+1:]
	switch {
	case len(ver) == 8 && string(ver[:7]) == "HTTP/1." && (ver[7] == '1' || ver[7] == '0'):
		h.minor = ver[7] - '0'
	case len(ver) >= 5 && string(ver[:5]) == "HTTP/":
		return stBadVersion
	default:
		return stBadRequest
	}
	h.mS, h.mE = ls, ls+sp
	h.tS, h.tE = ls+sp+1, ls+sp+1+sp2
	return 0
}

// finish checks the framing and connection fields of a complete head.
func (h *reqHead) finish(b []byte) int {
	if h.method(b) == "CONNECT" {
		return stMethodNotAllow
	}
	if st := h.parseTarget(b); st != 0 {
		return st
	}
	hosts := 0
	sawTE := false
	for i := range h.fields {
		f := &h.fields[i]
		v := f.value(b)
		switch f.kind {
		case hHost:
			if hosts++; hosts > 1 {
				return stBadRequest
			}
			h.host = i
		case hContentLength:
			n, ok := parseContentLength(v)
			if !ok || h.contentLength >= 0 {
				return stBadRequest
			}
			h.contentLength = n
		case hTransferEncoding:
			if sawTE || !eqFold(v, "chunked") {
				return stBadRequest
			}
			sawTE, h.chunked = true, true
		case hConnection:
			f.drop = true
			if !h.conn.add(b, f) {
				return stBadRequest
			}
		case hUpgrade:
			f.drop = true
			if h.upgrade < 0 {
				h.upgrade = i
			}
		case hTE:
			f.drop = true
		case hExpect:
			if eqFold(v, "100-continue") {
				h.expect100 = true
			}
		case hKeepAlive, hProxyConnection, hProxyAuthorization, hProxyAuthenticate, hHTTP2Settings:
			f.drop = true
		}
	}
	if h.chunked && (h.contentLength >= 0 || h.minor == 0) {
		return stBadRequest // ambiguous framing (RFC 9112 section 6.1)
	}
	if h.minor == 1 && hosts == 0 {
		return stBadRequest
	}
	if h.form == formAbsolute && h.host >= 0 {
		h.fields[h.host].drop = true // the target's authority wins
	}
	h.conn.dropListed(b, h.fields, true)
	return 0
}

// parseTarget sorts the request target into its form and finds its path.
func (h *reqHead) parseTarget(b []byte) int {
	t := b[h.tS:h.tE]
	switch {
	case t[0] == '/':
		h.form = formOrigin
		h.pS = h.tS
	case len(t) == 1 && t[0] == '*':
		if h.method(b) != "OPTIONS" {
			return stBadRequest
		}
		h.form = formAsterisk
		h.pS, h.pE, h.qS = h.tS, h.tS, h.tE
		return 0
	default:
		var skip int
		switch {
		case len(t) > 7 && eqFold(t[:7], "http://"):
			skip = 7
		case len(t) > 8 && eqFold(t[:8], "https://"):
			skip = 8
		default:
			return stBadRequest
		}
		h.form = formAbsolute
		h.authS = h.tS + skip
		e := h.authS
		for e < h.tE && b[e] != '/' && b[e] != '?' && b[e] != '#' {
			if b[e] == '@' {
				return stBadRequest // no userinfo
			}
			e++
		}
		h.authE = e
		h.pS = e
	}
	e := h.pS
	for e < h.tE && b[e] != '?' && b[e] != '#' {
		e++
	}
	h.pE, h.qS = e, e
	return 0
}

func (h *reqHead) method(b []byte) string { return unsafeString(b[h.mS:h.mE]) }

// hostValue returns the request's authority: the absolute-form target's,
// else the Host field's, else nil.
func (h *reqHead) hostValue(b []byte) []byte {
	if h.form == formAbsolute {
		return b[h.authS:h.authE]
	}
	if h.host >= 0 {
		return h.fields[h.host].value(b)
	}
	return nil
}

// view presents the request whose head is b.
func (h *reqHead) view(b []byte) reqView {
	return reqView{method: b[h.mS:h.mE], authority: h.hostValue(b), target: b[h.pS:h.tE], fieldsView: fieldsView{h1b: b, h1: &h.headLines}}
}

// keepAlive reports whether the client wants the connection kept open.
func (h *reqHead) keepAlive() bool {
	if h.conn.close {
		return false
	}
	return h.minor == 1 || h.conn.keepAlive
}

// hasBody reports whether a body follows the head.
func (h *reqHead) hasBody() bool { return h.chunked || h.contentLength > 0 }

// upgradeTo returns the Upgrade value a request asks for, nil when it is not
// an upgrade that may be forwarded: h2c upgrades and upgrades with a body
// are served as plain requests.
func (h *reqHead) upgradeTo(b []byte) []byte {
	if h.upgrade < 0 || !h.conn.upgrade || h.hasBody() || h.minor == 0 {
		return nil
	}
	v := h.fields[h.upgrade].value(b)
	if len(v) == 0 || hasToken(v, "h2c") {
		return nil
	}
	return v
}

// fieldValue returns the value of the first field named name, or nil.
func (h *reqHead) fieldValue(b []byte, name string) []byte {
	for i := range h.fields {
		f := &h.fields[i]
		if !f.drop && eqFoldMixed(f.name(b), name) {
			return f.value(b)
		}
	}
	return nil
}

// eqFoldMixed compares b with s in any ASCII case (s may hold capitals).
func eqFoldMixed(b []byte, s string) bool {
	return eqFoldBytes(b, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// normalizeHost writes host without its port and trailing dot, in lower
// case, to dst[:0]. It refuses what is neither a DNS name (letters, digits,
// '-', '_' and '.'), an IPv4 address nor a bracketed IPv6 address, and a
// port that is not a number.
func normalizeHost(dst, host []byte) ([]byte, bool) {
	dst = dst[:0]
	if len(host) == 0 {
		return dst, true
	}
	if host[0] == '[' {
		end := bytes.IndexByte(host, ']')
		if end < 0 || !validPort(host[end+1:]) {
			return nil, false
		}
		a, err := netip.ParseAddr(unsafeString(host[1:end]))
		if err != nil || !a.Is6() || a.Zone() != "" {
			return nil, false
		}
		dst = append(dst, '[')
		dst = a.AppendTo(dst)
		return append(dst, ']'), true
	}
	if i := bytes.LastIndexByte(host, ':'); i >= 0 {
		if !validPort(host[i:]) {
			return nil, false
		}
		host = host[:i]
	}
	if len(host) > 0 && host[len(host)-1] == '.' {
		host = host[:len(host)-1]
	}
	if len(host) == 0 || len(host) > 253 {
		return nil, false
	}
	for _, c := range host {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		default:
			return nil, false
		}
		dst = append(dst, c)
	}
	if bytes.Contains(dst, []byte("..")) || dst[0] == '.' || dst[len(dst)-1] == '.' {
		return nil, false
	}
	return dst, true
}

// validPort accepts "" or ":" followed by at most five digits.
func validPort(p []byte) bool {
	if len(p) == 0 {
		return true
	}
	if p[0] != ':' || len(p) > 6 {
		return false
	}
	for _, c := range p[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
