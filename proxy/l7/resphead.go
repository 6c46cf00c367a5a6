package l7

import (
	"bytes"
)

// respMaxFields bounds the header fields of a member's response.
const respMaxFields = 256

// Body framings of a response.
const (
	bodyNone uint8 = iota
	bodyLength
	bodyChunked
	bodyClose // until the member closes the connection
)

// respHead is a parsed response head; positions are offsets from its start.
type respHead struct {
	headLines
	sl int // end of the status line, after its CRLF

	minor  uint8
	status int

	contentLength int64
	chunked       bool
	closeFraming  bool // Transfer-Encoding without a final chunked
	// edit is set when a field must be dropped before the head is relayed.
	edit bool
}

func (h *respHead) reset() {
	h.headLines.reset()
	*h = respHead{headLines: h.headLines, contentLength: -1}
}

// parse consumes the complete lines of b and reports whether the head is
// complete; ok=false means the member sent something that is not HTTP/1.x.
func (h *respHead) parse(b []byte, maxBytes int) (done, ok bool) {
	for {
		le, st := h.line(b, maxBytes)
		switch st {
		case lineMore:
			return false, true
		case lineLong, lineBad:
			return false, false
		}
		switch {
		case !h.started:
			if !h.parseStatusLine(b[:le-2]) {
				return false, false
			}
			h.started, h.sl = true, le
		case le-h.pos == 2:
			h.n = le
			return true, h.finish(b)
		default:
			if h.addField(b, le, respMaxFields) != lineOK {
				return false, false
			}
		}
		h.pos = le
	}
}

// parseStatusLine parses "HTTP/1.x NNN reason".
func (h *respHead) parseStatusLine(line []byte) bool {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return false
	}
	switch line[7] {
	case '0', '1':
		h.minor = line[7] - '0'
	default:
		return false
	}
	s := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return false
		}
		s = s*10 + int(c-'0')
	}
	if s < 100 {
		return false
	}
	for _, c := range line[12:] {
		if !vchar[c] {
			return false
		}
	}
	h.status = s
	return true
}

func (h *respHead) finish(b []byte) bool {
	var cl *field
	for i := range h.fields {
		f := &h.fields[i]
		v := f.value(b)
		switch f.kind {
		case hContentLength:
			n, ok := parseContentLength(v)
			if !ok || (h.contentLength >= 0 && n != h.contentLength) {
				return false
			}
			if h.contentLength >= 0 {
				f.drop, h.edit = true, true // an identical duplicate
			} else {
				cl = f
			}
			h.contentLength = n
		case hTransferEncoding:
			last := v
			for rest := v; len(rest) > 0; {
				var t []byte
				t, rest = nextToken(rest)
				if len(t) > 0 {
					last = t
				}
			}
			if eqFold(last, "chunked") && !h.closeFraming && !h.chunked && h.minor == 1 {
				h.chunked = true
			} else {
				h.chunked, h.closeFraming = false, true
			}
		case hConnection:
			f.drop, h.edit = true, true
			if !h.conn.add(b, f) {
				return false
			}
		case hKeepAlive, hProxyConnection, hTE, hUpgrade, hProxyAuthenticate, hHTTP2Settings:
			f.drop, h.edit = true, true
		case hTrailer:
			h.edit = true // responseFields may rewrite it
		}
	}
	if (h.status < 200 && h.status != 101) || h.status == 204 {
		// Such a response ends with its head, and a server must not
		// send it Content-Length or Transfer-Encoding (RFC 9112 section
		// 6.1, RFC 9110 section 8.6): a client that read them as framing
		// would take what follows for its content. (A 101's head is the
		// tunnel's.)
		for i := range h.fields {
			if f := &h.fields[i]; f.kind == hContentLength || f.kind == hTransferEncoding {
				f.drop, h.edit = true, true
			}
		}
		h.contentLength, h.chunked, h.closeFraming, cl = -1, false, false, nil
	}
	if (h.chunked || h.closeFraming) && cl != nil {
		// Transfer-Encoding overrides Content-Length, which must not be
		// relayed (RFC 9112 section 6.3).
		cl.drop, h.edit = true, true
		h.contentLength = -1
	}
	if h.conn.dropListed(b, h.fields, false) {
		h.edit = true
	}
	return true
}

// framing returns how the body of this response to a request is delimited.
func (h *respHead) framing(head bool) uint8 {
	switch {
	case head, h.status < 200, h.status == 204, h.status == 304:
		return bodyNone
	case h.chunked:
		return bodyChunked
	case h.closeFraming:
		return bodyClose
	case h.contentLength >= 0:
		return bodyLength
	}
	return bodyClose
}

// reusable reports whether the member keeps the connection open.
func (h *respHead) reusable() bool {
	if h.conn.close {
		return false
	}
	return h.minor == 1 || h.conn.keepAlive
}

// dotSegment reports whether a path segment is "." (1) or ".." (2),
// percent-encoded or not.
func dotSegment(seg []byte) int {
	dots := 0
	for i := 0; i < len(seg); {
		switch {
		case seg[i] == '.':
			i++
		case i+2 < len(seg) && seg[i] == '%' && seg[i+1] == '2' && (seg[i+2] == 'e' || seg[i+2] == 'E'):
			i += 3
		default:
			return 0
		}
		if dots++; dots > 2 {
			return 0
		}
	}
	return dots
}

// needsClean reports whether path is not in normal form: it has a dot
// segment, a percent-escape of an unreserved character (ALPHA DIGIT - . _ ~)
// or an escape written with lower-case hex digits.
func needsClean(p []byte) bool {
	hasDot := bytes.IndexByte(p, '.') >= 0
	pct := bytes.IndexByte(p, '%')
	if !hasDot && pct < 0 {
		return false
	}
	for i := pct; i >= 0 && i+2 < len(p); {
		if v, ok := escapeAt(p, i); ok && (unreserved[v] || isLowerHex(p[i+1]) || isLowerHex(p[i+2])) {
			return true
		}
		n := bytes.IndexByte(p[i+1:], '%')
		if n < 0 {
			break
		}
		i += 1 + n
	}
	if !hasDot {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		j := i + 1
		for j < len(p) && p[j] != '/' {
			j++
		}
		if dotSegment(p[i+1:j]) != 0 {
			return true
		}
		i = j - 1
	}
	return false
}

// escapeAt decodes the percent-escape at p[i], if it is a valid one.
func escapeAt(p []byte, i int) (byte, bool) {
	if i+2 >= len(p) || p[i] != '%' {
		return 0, false
	}
	hi, lo := hexval[p[i+1]], hexval[p[i+2]]
	if hi < 0 || lo < 0 {
		return 0, false
	}
	return byte(hi)<<4 | byte(lo), true
}

func isLowerHex(c byte) bool { return c >= 'a' && c <= 'f' }

// unreserved marks the characters of RFC 3986 section 2.3.
var unreserved = func() (u [256]bool) {
	for c := 0; c < 256; c++ {
		u[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~'
	}
	return u
}()

// cleanPath normalises the absolute path p into dst[:0], like HAProxy's
// normalize-uri percent-decode-unreserved, percent-to-uppercase and
// path-strip-dot/dotdot: escapes of unreserved characters are decoded,
// the other escapes get upper-case hex digits, and dot segments are
// resolved (RFC 3986 sections 6.2.2 and 5.2.4). Everything else, "%2F"
// and empty segments included, stays as written, so routing and the member
// see the same path.
func cleanPath(dst, p []byte) []byte {
	dst = append(dst[:0], '/')
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	for {
		j := bytes.IndexByte(p, '/')
		last := j < 0
		seg := p
		if !last {
			seg = p[:j]
		}
		start := len(dst)
		dst = appendNormalSegment(dst, seg)
		switch string(dst[start:]) {
		case ".":
			dst = dst[:start]
		case "..":
			dst = dst[:start]
			if len(dst) > 1 {
				t := dst[:len(dst)-1]
				dst = dst[:bytes.LastIndexByte(t, '/')+1]
			}
		default:
			if !last {
				dst = append(dst, '/')
			}
		}
		if last {
			return dst
		}
		p = p[j+1:]
	}
}

// appendNormalSegment appends seg with its escapes normalised.
func appendNormalSegment(dst, seg []byte) []byte {
	for i := 0; i < len(seg); i++ {
		v, ok := escapeAt(seg, i)
		switch {
		case !ok:
			dst = append(dst, seg[i])
		case unreserved[v]:
			dst = append(dst, v)
			i += 2
		default:
			dst = append(dst, '%', upperHex(seg[i+1]), upperHex(seg[i+2]))
			i += 2
		}
	}
	return dst
}

func upperHex(c byte) byte {
	if isLowerHex(c) {
		return c - 'a' + 'A'
	}
	return c
}
