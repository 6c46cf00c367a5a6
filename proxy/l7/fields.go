package l7

import (
	"bytes"
)

// Character classes of RFC 9110.
var (
	tchar   [256]bool // token characters
	vchar   [256]bool // field-value characters: VCHAR, obs-text, SP, HTAB
	hexval  [256]int8 // value of a hex digit, -1 otherwise
	tgtchar [256]bool // request-target characters (no CTL, SP or DEL)
)

func init() {
	for c := 0; c < 256; c++ {
		hexval[c] = -1
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			tchar[c] = true
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), byte(c)) >= 0:
			tchar[c] = true
		}
		vchar[c] = (c >= 0x21 && c != 0x7f) || c == ' ' || c == '\t'
		tgtchar[c] = c > 0x20 && c != 0x7f
	}
	for c := '0'; c <= '9'; c++ {
		hexval[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		hexval[c] = int8(c - 'a' + 10)
		hexval[c-'a'+'A'] = int8(c - 'a' + 10)
	}
}

// hdrKind classifies the header fields the proxy acts on.
type hdrKind uint8

const (
	hOther hdrKind = iota
	hHost
	hContentLength
	hTransferEncoding
	hConnection
	hKeepAlive
	hProxyConnection
	hTE
	hUpgrade
	hExpect
	hXFF
	hXFProto
	hXFHost
	hForwarded
	hRequestID
	hXRealIP
	hTrueClientIP
	hXClientIP
	hXFPort
	hProxyAuthorization
	hProxyAuthenticate
	hHTTP2Settings
	hTrailer
	hClientAddr // another field naming the client or its path (clientAddrName)
)

// classify returns the kind of a header field name (any case).
func classify(name []byte) hdrKind {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return hTE
		}
	case 4:
		if eqFold(name, "host") {
			return hHost
		}
	case 6:
		if eqFold(name, "expect") {
			return hExpect
		}
	case 7:
		if eqFold(name, "upgrade") {
			return hUpgrade
		}
		if eqFold(name, "trailer") {
			return hTrailer
		}
	case 9:
		if eqFold(name, "forwarded") {
			return hForwarded
		}
		if eqFold(name, "x-real-ip") {
			return hXRealIP
		}
	case 11:
		if eqFold(name, "x-client-ip") {
			return hXClientIP
		}
	case 10:
		if eqFold(name, "connection") {
			return hConnection
		}
		if eqFold(name, "keep-alive") {
			return hKeepAlive
		}
	case 12:
		if eqFold(name, "x-request-id") {
			return hRequestID
		}
	case 14:
		if eqFold(name, "content-length") {
			return hContentLength
		}
		if eqFold(name, "http2-settings") {
			return hHTTP2Settings
		}
		if eqFold(name, "true-client-ip") {
			return hTrueClientIP
		}
	case 15:
		if eqFold(name, "x-forwarded-for") {
			return hXFF
		}
	case 16:
		if eqFold(name, "proxy-connection") {
			return hProxyConnection
		}
		if eqFold(name, "x-forwarded-host") {
			return hXFHost
		}
		if eqFold(name, "x-forwarded-port") {
			return hXFPort
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return hTransferEncoding
		}
		if eqFold(name, "x-forwarded-proto") {
			return hXFProto
		}
	case 18:
		if eqFold(name, "proxy-authenticate") {
			return hProxyAuthenticate
		}
	case 19:
		if eqFold(name, "proxy-authorization") {
			return hProxyAuthorization
		}
	}
	if clientAddrName(name) {
		return hClientAddr
	}
	return hOther
}

// clientAddrNames are fields that proxies and CDNs use to name the client
// (or, X-Request-Id, the request), besides the X-Forwarded family.
var clientAddrNames = [...]string{
	"client-ip", "x-real-ip", "x-client-ip", "true-client-ip", "cf-connecting-ip",
	"fastly-client-ip", "x-originating-ip", "x-cluster-client-ip",
	"x-original-forwarded-for", "forwarded", "x-request-id",
}

// clientAddrName reports whether name, in any case and with '_' read as
// '-', is X-Forwarded or starts with X-Forwarded-, or is one of
// clientAddrNames. Many members read X_Forwarded_For as X-Forwarded-For
// (CGI and its kin turn both into HTTP_X_FORWARDED_FOR), so an untrusted
// client may send neither.
func clientAddrName(name []byte) bool {
	if len(name) >= len("x-forwarded") && eqFoldDash(name[:len("x-forwarded")], "x-forwarded") &&
		(len(name) == len("x-forwarded") || name[len("x-forwarded")] == '-' || name[len("x-forwarded")] == '_') {
		return true
	}
	for _, s := range clientAddrNames {
		if len(s) == len(name) && eqFoldDash(name, s) {
			return true
		}
	}
	return false
}

// eqFoldDash is eqFold with '_' in b read as '-'.
func eqFoldDash(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// eqFold reports whether b equals the lower-case ASCII string s in any case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// eqFoldBytes compares two byte strings in any ASCII case.
func eqFoldBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x >= 'A' && x <= 'Z' {
			x += 'a' - 'A'
		}
		if y >= 'A' && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// field is one header line, as offsets from the start of its head.
type field struct {
	ns, ne uint32 // name
	vs, ve uint32 // value without surrounding whitespace
	le     uint32 // end of the line, after CRLF
	kind   hdrKind
	drop   bool // not forwarded
}

func (f *field) name(b []byte) []byte  { return b[f.ns:f.ne] }
func (f *field) value(b []byte) []byte { return b[f.vs:f.ve] }

// parseField parses the header line b[ls:le-2] (le is past its CRLF) into f.
// It refuses obs-fold, whitespace before the colon, empty names and
// control characters in values.
func parseField(b []byte, ls, le int, f *field) bool {
	line := b[ls : le-2]
	c := bytes.IndexByte(line, ':')
	if c <= 0 {
		return false
	}
	for _, ch := range line[:c] {
		if !tchar[ch] {
			return false
		}
	}
	v := c + 1
	for v < len(line) && (line[v] == ' ' || line[v] == '\t') {
		v++
	}
	e := len(line)
	for e > v && (line[e-1] == ' ' || line[e-1] == '\t') {
		e--
	}
	for _, ch := range line[v:e] {
		if !vchar[ch] {
			return false
		}
	}
	*f = field{ns: uint32(ls), ne: uint32(ls + c), vs: uint32(ls + v), ve: uint32(ls + e), le: uint32(le)}
	f.kind = classify(line[:c])
	return true
}

// parseContentLength parses a Content-Length value: digits only, at most
// 18 of them.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// nextToken splits a comma-separated list: it returns the first element
// without surrounding whitespace and the rest after its comma.
func nextToken(v []byte) (tok, rest []byte) {
	i := bytes.IndexByte(v, ',')
	if i < 0 {
		tok, rest = v, nil
	} else {
		tok, rest = v[:i], v[i+1:]
	}
	for len(tok) > 0 && (tok[0] == ' ' || tok[0] == '\t') {
		tok = tok[1:]
	}
	for len(tok) > 0 && (tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
		tok = tok[:len(tok)-1]
	}
	return tok, rest
}

// hasToken reports whether the comma-separated list v holds tok (any case).
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v = nextToken(v)
		if eqFold(t, tok) {
			return true
		}
	}
	return false
}
