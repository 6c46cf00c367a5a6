package l7

import (
	"bytes"
	"errors"
)

// errBadChunk reports chunked framing that does not follow RFC 9112
// section 7.1: a bad size, a missing CRLF, a bare LF, a control character
// in an extension or trailer, or an overlong line.
var errBadChunk = errors.New("malformed chunked encoding")

// Limits of the chunked decoder.
const (
	maxChunkLine    = 4096     // chunk-size line, extensions included
	maxChunkSize    = 1 << 56  // anything larger is refused
	maxTrailerBytes = 64 << 10 // the whole trailer section
)

// chunked states.
const (
	csSize   uint8 = iota
	csSizeWS       // whitespace after the size: only more or CR may follow
	csExt
	csSizeLF
	csData
	csDataCR
	csDataLF
	csTrailerStart
	csTrailerName
	csTrailerValue
	csTrailerLF
	csEndLF
	csDone
)

// chunked validates a chunked body as it streams through. It never copies:
// step says which bytes of its input are chunk data and which are framing,
// so a caller may relay the encoding as it came (passthrough) or only the
// data (decoding).
type chunked struct {
	st      uint8
	digits  uint8
	n       int64 // size being read, then data left in the chunk
	line    int   // bytes of the current size line
	trailer int   // bytes of the trailer section
	total   int64 // data bytes seen
}

// done reports whether the last chunk and the trailer section ended.
func (c *chunked) done() bool { return c.st == csDone }

// inTrailer reports whether the decoder is past the last chunk.
func (c *chunked) inTrailer() bool { return c.st >= csTrailerStart }

// step consumes a prefix of b: n bytes that are chunk data (data=true) or
// framing. It stops at the start and end of each chunk's data, at the
// start of the trailer section and after the final CRLF, so bytes after
// the body are never consumed.
func (c *chunked) step(b []byte) (n int, data bool, err error) {
	if c.st == csData {
		k := int64(len(b))
		if k > c.n {
			k = c.n
		}
		c.n -= k
		c.total += k
		if c.n == 0 {
			c.st = csDataCR
		}
		return int(k), true, nil
	}
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch c.st {
		case csSize:
			if v := hexval[ch]; v >= 0 {
				if c.n >= maxChunkSize>>4 {
					return i, false, errBadChunk
				}
				c.n = c.n<<4 | int64(v)
				c.digits++
				c.line++
				continue
			}
			if c.digits == 0 {
				return i, false, errBadChunk
			}
			switch ch {
			case '\r':
				c.st = csSizeLF
			case ';':
				c.st = csExt
			case ' ', '\t':
				c.st = csSizeWS
			default:
				return i, false, errBadChunk
			}
		case csSizeWS:
			if c.line++; c.line > maxChunkLine {
				return i, false, errBadChunk
			}
			switch ch {
			case '\r':
				c.st = csSizeLF
			case ' ', '\t':
			default:
				return i, false, errBadChunk // "5 ;x" and "5 5" are refused
			}
		case csExt:
			if c.line++; c.line > maxChunkLine {
				return i, false, errBadChunk
			}
			if ch == '\r' {
				c.st = csSizeLF
			} else if !vchar[ch] {
				return i, false, errBadChunk
			}
		case csSizeLF:
			if ch != '\n' {
				return i, false, errBadChunk
			}
			c.line, c.digits = 0, 0
			if c.n == 0 {
				c.st = csTrailerStart
				return i + 1, false, nil
			}
			c.st = csData
			return i + 1, false, nil
		case csDataCR:
			if ch != '\r' {
				return i, false, errBadChunk
			}
			c.st = csDataLF
		case csDataLF:
			if ch != '\n' {
				return i, false, errBadChunk
			}
			c.st = csSize
		case csTrailerStart:
			if ch == '\r' {
				c.st = csEndLF
				continue
			}
			if !tchar[ch] {
				return i, false, errBadChunk // also refuses obs-fold
			}
			c.st = csTrailerName
			c.trailer++
		case csTrailerName:
			if c.trailer++; c.trailer > maxTrailerBytes {
				return i, false, errBadChunk
			}
			if ch == ':' {
				c.st = csTrailerValue
			} else if !tchar[ch] {
				return i, false, errBadChunk
			}
		case csTrailerValue:
			if c.trailer++; c.trailer > maxTrailerBytes {
				return i, false, errBadChunk
			}
			if ch == '\r' {
				c.st = csTrailerLF
			} else if !vchar[ch] {
				return i, false, errBadChunk
			}
		case csTrailerLF:
			if ch != '\n' {
				return i, false, errBadChunk
			}
			c.st = csTrailerStart
		case csEndLF:
			if ch != '\n' {
				return i, false, errBadChunk
			}
			c.st = csDone
			return i + 1, false, nil
		case csDone:
			return i, false, nil
		}
	}
	return len(b), false, nil
}

// scanBody is scan that also stops at the start of a trailer section
// that holds fields (its first byte is not the final CR, or is not there
// yet), so that the caller can hold those fields back (trailerKept).
func (c *chunked) scanBody(b []byte) (int, error) {
	off := 0
	for off < len(b) && c.st != csDone {
		if c.st == csTrailerStart && b[off] != '\r' {
			break
		}
		n, _, err := c.step(b[off:])
		off += n
		if err != nil {
			return off, err
		}
	}
	return off, nil
}

// heldTrailer holds a chunked trailer section that has fields until it
// ends, so that only the fields trailerKept keeps go on, with the final
// CRLF (copyBody for requests, relayBody for responses); maxTrailerBytes
// bounds it.
type heldTrailer struct {
	buf     []byte
	holding bool
}

// holds reports whether in, the rest of a chunked body ck decodes, is
// (the rest of) a trailer section with fields. A section whose final
// CRLF was split between reads (csEndLF) holds none: it is relayed as
// it comes.
func (t *heldTrailer) holds(ck *chunked, in []byte) bool {
	return t.holding || (ck.st == csTrailerStart && in[0] != '\r')
}

// take holds the part of the section in in: n bytes of it. When the
// section ended (done), t.buf is what goes on: the fields trailerKept
// keeps (certField and listed are its) and the final CRLF.
func (t *heldTrailer) take(ck *chunked, in []byte, certField string, listed []byte) (n int, done bool, err error) {
	n, err = ck.scan(in)
	if !t.holding {
		t.holding, t.buf = true, t.buf[:0]
	}
	t.buf = append(t.buf, in[:n]...)
	if err != nil || !ck.done() {
		t.holding = err == nil
		return n, false, err
	}
	t.holding = false
	t.buf = keepTrailer(t.buf, certField, listed)
	return n, true, nil
}

// sent lets a large section's buffer go once it is sent: it is not kept
// for the next.
func (t *heldTrailer) sent() {
	if cap(t.buf) > 4<<10 {
		t.buf = nil
	}
}

// keepTrailer compacts a whole chunked trailer section t (its fields and
// the final CRLF, as chunked validated it) in place to the fields
// trailerKept keeps (certField and listed are its), and returns it.
func keepTrailer(t []byte, certField string, listed []byte) []byte {
	out := t[:0]
	for len(t) > 0 {
		i := bytes.IndexByte(t, '\n')
		if i < 0 {
			break
		}
		line := t[:i+1]
		t = t[i+1:]
		if len(line) == 2 { // the final CRLF
			out = append(out, line...)
			break
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		if trailerKept(name, certField, listed) {
			out = append(out, line...) // never overtakes t: it only shrinks
		}
	}
	return out
}

// scan consumes as much of b as belongs to the body and reports how many
// bytes that was; the caller relays them as they are.
func (c *chunked) scan(b []byte) (int, error) {
	off := 0
	for off < len(b) && c.st != csDone {
		n, _, err := c.step(b[off:])
		off += n
		if err != nil {
			return off, err
		}
	}
	return off, nil
}
