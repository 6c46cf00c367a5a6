package l7

import (
	"io"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Blocks reads the header blocks a peer sends, for the server (a
// client's requests and trailers) and for the client to members (their
// responses and trailers) alike: a plain HEADERS frame's payload is read
// without the framer, which would allocate a frame for it, and the fields
// are decoded with the connection's HPACK decoder into a buffer the next
// block reuses, checked and bounded as they come (emit).
type h2Blocks struct {
	hdec *hpack.Decoder
	head h2Head // the header block being read
	hpay []byte // the payload of a HEADERS frame read by readPayload
}

// initBlocks makes the decoder; maxHeader bounds a field's strings.
func (b *h2Blocks) initBlocks(maxHeader int) {
	b.hdec = hpack.NewDecoder(4096, b.emit)
	b.hdec.SetMaxStringLength(maxHeader)
}

// h2KeepFields is the most fields a connection's block buffer keeps
// between blocks; a larger one is dropped.
const h2KeepFields = 64

// h2Head is a header block being decoded and the HEADERS frame that
// started it.
type h2Head struct {
	id        uint32
	end, prio bool
	dep       uint32
	fields    []hpack.HeaderField
	remain    uint32 // header list bytes still allowed
	truncated bool
	invalid   bool // a field broke the rules: the stream is reset
	regular   bool // a regular field was seen
}

// begin starts the header block of stream id, which ends the stream when
// end is set; its fields may take maxHeader bytes (RFC 7541 section 4.1
// sizes).
func (b *h2Blocks) begin(id uint32, end bool, maxHeader int) *h2Head {
	h := &b.head
	// The last block's strings go: a peer could otherwise have the
	// slots past a shorter block's fields hold those of longer ones
	// (each slot below len was cleared at the block after it was set).
	fields := h.fields
	clear(fields)
	if cap(fields) > h2KeepFields {
		fields = nil
	}
	*h = h2Head{id: id, end: end, fields: fields[:0], remain: uint32(maxHeader)}
	b.hdec.SetEmitEnabled(true)
	return h
}

// plainHeaders reports whether fh starts a HEADERS frame without padding
// or priority on a stream: its payload is all header block fragment.
// Other HEADERS frames, with their checks, are left to the framer.
func plainHeaders(fh http2.FrameHeader) bool {
	return fh.Type == http2.FrameHeaders && fh.StreamID != 0 &&
		fh.Flags&(http2.FlagHeadersPadded|http2.FlagHeadersPriority) == 0
}

// readPayload reads from r the payload of the frame whose header the
// framer just read (its length is within the frame size the framer
// enforces) into a buffer reused by the connection.
func (b *h2Blocks) readPayload(r io.Reader, n uint32) ([]byte, error) {
	if uint32(cap(b.hpay)) < n {
		b.hpay = make([]byte, n)
	}
	p := b.hpay[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	return p, nil
}

// decode decodes a fragment of the header block, the last when ended.
// Header lists far over the limit, and fragments after a field that
// broke the rules, end the connection (a connection error code) as
// x/net/http2's framer does; so does a block HPACK cannot decode.
func (b *h2Blocks) decode(frag []byte, ended bool) http2.ErrCode {
	h := &b.head
	if int64(len(frag)) > 2*int64(h.remain) || h.invalid {
		return http2.ErrCodeProtocol
	}
	if _, err := b.hdec.Write(frag); err != nil {
		return http2.ErrCodeCompression
	}
	if ended {
		if err := b.hdec.Close(); err != nil {
			return http2.ErrCodeCompression
		}
	}
	return 0
}

// emit receives the decoded fields of the current header block. After a
// field that breaks the rules, or one past the size bound, the block's
// other literals are decoded without being made strings (the decoder's
// emission is off until the next block).
func (b *h2Blocks) emit(f hpack.HeaderField) {
	h := &b.head
	if h.invalid || h.truncated {
		return
	}
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		h.invalid = true
		b.hdec.SetEmitEnabled(false)
		return
	}
	if f.IsPseudo() {
		if h.regular {
			h.invalid = true
			b.hdec.SetEmitEnabled(false)
			return
		}
	} else {
		h.regular = true
		if !validFieldName(f.Name) {
			h.invalid = true
			b.hdec.SetEmitEnabled(false)
			return
		}
	}
	size := f.Size()
	if size > h.remain {
		h.truncated, h.remain = true, 0
		b.hdec.SetEmitEnabled(false)
		return
	}
	h.remain -= size
	h.fields = append(h.fields, f)
}

// validFieldName reports whether name is a token in lower case.
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !httpguts.IsTokenRune(rune(b)) || ('A' <= b && b <= 'Z') {
			return false
		}
	}
	return true
}
