package l7

import "bytes"

// What the request and response parsers share: the walk over the lines of
// a head received so far, its fields, and the elements of its Connection
// fields.

// maxConnTokens bounds the elements of a head's Connection fields, empty
// ones included, in a request and in a member's response alike: each
// field of the head is looked up among the names they list (dropListed,
// connListed), so their number times the fields' is the work a head
// costs. A request over it is refused (400), a response over it is a
// broken response (ErrUpstreamProtocol: 502, OutcomeUpstreamError).
const maxConnTokens = 64

// headLines is the part of a head parsed so far. Every position is an
// offset from the start of the head, so the head may move inside its
// buffer while it is parsed incrementally.
type headLines struct {
	pos     int  // next unparsed byte
	started bool // the first line is parsed
	n       int  // head length, set when complete
	fields  []field
	conn    connList
}

// reset empties h, keeping its slices' storage.
func (h *headLines) reset() {
	*h = headLines{fields: h.fields[:0], conn: connList{tokens: h.conn.tokens[:0], names: h.conn.names[:0]}}
}

// How a line of a head reads (headLines.line, addField).
const (
	lineOK   = iota
	lineMore // no complete line yet
	lineLong // past the bound on bytes or fields
	lineBad  // a bare LF, a malformed field
)

// line returns the end (past its LF) of the next complete line of b,
// which starts at h.pos. b may hold at most maxBytes.
func (h *headLines) line(b []byte, maxBytes int) (le, st int) {
	i := bytes.IndexByte(b[h.pos:], '\n')
	if i < 0 {
		if len(b) > maxBytes {
			return 0, lineLong
		}
		return 0, lineMore
	}
	le = h.pos + i + 1
	switch {
	case le > maxBytes:
		return 0, lineLong
	case i == 0 || b[le-2] != '\r':
		return 0, lineBad
	}
	return le, lineOK
}

// addField parses the field line from h.pos to le; the head may hold
// maxCount fields.
func (h *headLines) addField(b []byte, le, maxCount int) int {
	if len(h.fields) >= maxCount {
		return lineLong
	}
	h.fields = append(h.fields, field{})
	if !parseField(b, h.pos, le, &h.fields[len(h.fields)-1]) {
		return lineBad
	}
	return lineOK
}

// connList is what the Connection fields of a head say: its options and
// the names of the fields it lists.
type connList struct {
	close, keepAlive, upgrade bool
	tokens                    [][2]int // listed names, as offsets
	// names holds the listed names again, each followed by a comma: a
	// copy that outlives the head's bytes, for the trailer section at
	// the end of the body (trailerKept).
	names []byte
	n     int // elements seen
}

// add records the elements of the Connection field f; false when the
// Connection fields have more than maxConnTokens elements.
func (l *connList) add(b []byte, f *field) bool {
	for i, end := int(f.vs), int(f.ve); i < end; {
		s, e, next := listToken(b, i, end)
		i = next
		if l.n++; l.n > maxConnTokens {
			return false
		}
		tok := b[s:e]
		switch {
		case eqFold(tok, "close"):
			l.close = true
		case eqFold(tok, "keep-alive"):
			l.keepAlive = true
		case eqFold(tok, "upgrade"):
			l.upgrade = true
		case e > s:
			l.tokens = append(l.tokens, [2]int{s, e})
			l.names = append(append(l.names, tok...), ',')
		}
	}
	return true
}

// dropListed drops the fields of the head b that the Connection fields
// name, except the ones that frame the message and (keepHost) Host.
// It reports whether it dropped one.
func (l *connList) dropListed(b []byte, fields []field, keepHost bool) bool {
	if len(l.tokens) == 0 {
		return false
	}
	dropped := false
	for i := range fields {
		f := &fields[i]
		switch f.kind {
		case hContentLength, hTransferEncoding:
			continue
		case hHost:
			if keepHost {
				continue
			}
		}
		name := f.name(b)
		for _, t := range l.tokens {
			if eqFoldBytes(name, b[t[0]:t[1]]) {
				f.drop, dropped = true, true
				break
			}
		}
	}
	return dropped
}

// listToken returns the bounds of the token of a comma-separated list
// that starts at b[i] (the list ends at end), without the blanks around
// it, and where the next token starts.
func listToken(b []byte, i, end int) (s, e, next int) {
	j := i
	for j < end && b[j] != ',' {
		j++
	}
	s, e = i, j
	for s < e && (b[s] == ' ' || b[s] == '\t') {
		s++
	}
	for e > s && (b[e-1] == ' ' || b[e-1] == '\t') {
		e--
	}
	return s, e, j + 1
}
