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
	pos     int
	started bool
	n       int
	sl      int // end of the status line, after its CRLF

	minor  uint8
	status int

	fields        []field
	contentLength int64
	chunked       bool
	closeFraming  bool // Transfer-Encoding without a final chunked
	connClose     bool
	connKeepAlive bool
	// edit is set when a field must be dropped before the head is relayed.
	edit       bool
	connTokens [][2]int
}

func (h *respHead) reset() {
	*h = respHead{fields: h.fields[:0], connTokens: h.connTokens[:0], contentLength: -1}
}

// parse consumes the complete lines of b and reports whether the head is
// complete; ok=false means the member sent something that is not HTTP/1.x.
func (h *respHead) parse(b []byte, maxBytes int) (done, ok bool) {
	for {
		rest := b[h.pos:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return false, len(b) <= maxBytes
		}
		le := h.pos + i + 1
		if le > maxBytes || i == 0 || rest[i-1] != '\r' {
			return false, false
		}
		switch {
		case !h.started:
			if !h.parseStatusLine(b[:le-2]) {
				return false, false
			}
			h.started, h.sl = true, le
		case i == 1:
			h.n = le
			return true, h.finish(b)
		default:
			if len(h.fields) >= respMaxFields {
				return false, false
			}
			h.fields = append(h.fields, field{})
			if !parseField(b, h.pos, le, &h.fields[len(h.fields)-1]) {
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
			h.connectionTokens(b, f)
		case hKeepAlive, hProxyConnection, hTE, hUpgrade, hProxyAuthenticate, hHTTP2Settings:
			f.drop, h.edit = true, true
		}
	}
	if (h.chunked || h.closeFraming) && cl != nil {
		// Transfer-Encoding overrides Content-Length, which must not be
		// relayed (RFC 9112 section 6.3).
		cl.drop, h.edit = true, true
		h.contentLength = -1
	}
	if len(h.connTokens) > 0 {
		for i := range h.fields {
			f := &h.fields[i]
			if f.kind == hContentLength || f.kind == hTransferEncoding {
				continue
			}
			for _, t := range h.connTokens {
				if eqFoldBytes(f.name(b), b[t[0]:t[1]]) {
					f.drop = true
					break
				}
			}
		}
	}
	return true
}

func (h *respHead) connectionTokens(b []byte, f *field) {
	for i, end := int(f.vs), int(f.ve); i < end; {
		j := i
		for j < end && b[j] != ',' {
			j++
		}
		s, e := i, j
		for s < e && (b[s] == ' ' || b[s] == '\t') {
			s++
		}
		for e > s && (b[e-1] == ' ' || b[e-1] == '\t') {
			e--
		}
		tok := b[s:e]
		switch {
		case eqFold(tok, "close"):
			h.connClose = true
		case eqFold(tok, "keep-alive"):
			h.connKeepAlive = true
		case e > s:
			h.connTokens = append(h.connTokens, [2]int{s, e})
		}
		i = j + 1
	}
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
	if h.connClose {
		return false
	}
	return h.minor == 1 || h.connKeepAlive
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

// needsClean reports whether path has a dot segment.
func needsClean(p []byte) bool {
	if bytes.IndexByte(p, '.') < 0 && bytes.IndexByte(p, '%') < 0 {
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

// cleanPath resolves the dot segments of the absolute path p into dst[:0]
// (RFC 3986 section 5.2.4), leaving every other segment as written.
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
		switch dotSegment(seg) {
		case 1:
		case 2:
			if len(dst) > 1 {
				t := dst[:len(dst)-1]
				dst = dst[:bytes.LastIndexByte(t, '/')+1]
			}
		default:
			dst = append(dst, seg...)
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
