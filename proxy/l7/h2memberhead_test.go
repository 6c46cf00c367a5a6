package l7

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// memberBlock encodes fields (name, value pairs) with enc, which keeps
// its dynamic table across the blocks of one member connection.
func memberBlock(enc *hpack.Encoder, hb *bytes.Buffer, kv ...string) []byte {
	hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(hb.Bytes())
}

// TestH2MemberResponseHeads sends an HTTP/2 member's response heads and
// trailers as members may frame them, well-formed or not, through the
// proxy to an HTTP/2 client: a well-formed head is relayed whatever
// frames carry it; a malformed one fails its request with 502 (its
// stream reset, the connection kept) or, for a block that cannot be
// decoded, ends the member connection; the next request is served
// either way.
func TestH2MemberResponseHeads(t *testing.T) {
	t.Parallel()
	type answer func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error
	long := strings.Repeat("v", 6000)
	for _, tc := range []struct {
		name   string
		answer answer
		// head, when answer is nil: the member answers with one HEADERS
		// frame of these fields (name, value, ...) and a body "ok".
		head    []string
		status  int
		header  string // a field the client must see, name: value
		trailer string // a trailer the client must see, name: value
	}{
		{name: "one HEADERS frame", status: 200, header: "x-a: 1", answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: memberBlock(enc, hb, ":status", "200", "x-a", "1"), EndHeaders: true})
			return fr.WriteData(id, true, []byte("ok"))
		}},
		{name: "head in HEADERS and two CONTINUATION frames, trailers", status: 200, header: "x-split: abcdef", trailer: "grpc-status: 0", answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			blk := memberBlock(enc, hb, ":status", "200", "x-split", "abcdef", "trailer", "grpc-status")
			a, b := len(blk)/3, 2*len(blk)/3
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:a]})
			_ = fr.WriteContinuation(id, false, blk[a:b])
			_ = fr.WriteContinuation(id, true, blk[b:])
			_ = fr.WriteData(id, false, []byte("ok"))
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: memberBlock(enc, hb, "grpc-status", "0"), EndHeaders: true, EndStream: true})
		}},
		{name: "padded HEADERS with a priority", status: 200, header: "x-p: 2", answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: memberBlock(enc, hb, ":status", "200", "x-p", "2"), EndHeaders: true,
				PadLength: 7, Priority: http2.PriorityParam{StreamDep: 0, Weight: 9}})
			return fr.WriteData(id, true, []byte("ok"))
		}},
		{name: "an interim 103 first", status: 200, header: "x-final: yes", answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: memberBlock(enc, hb, ":status", "103", "link", "</a>"), EndHeaders: true})
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: memberBlock(enc, hb, ":status", "200", "x-final", "yes"), EndHeaders: true})
			return fr.WriteData(id, true, []byte("ok"))
		}},
		{name: "a field name in upper case", status: 502, head: []string{":status", "200", "X-Up", "1"}},
		{name: "a value with a line feed", status: 502, head: []string{":status", "200", "x-v", "a\nb"}},
		{name: "a pseudo-field after a regular one", status: 502, head: []string{"x-a", "1", ":status", "200"}},
		{name: "a request pseudo-field in a response", status: 502, head: []string{":status", "200", ":path", "/"}},
		{name: "two :status fields", status: 502, head: []string{":status", "200", ":status", "204"}},
		{name: "no :status", status: 502, head: []string{"x-a", "1"}},
		{name: "a head over MaxHeaderBytes", status: 502, answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			blk := memberBlock(enc, hb, ":status", "200", "x-long", long)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:len(blk)/2]})
			_ = fr.WriteContinuation(id, true, blk[len(blk)/2:])
			return fr.WriteData(id, true, []byte("ok"))
		}},
		{name: "a block HPACK cannot decode", status: 502, answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x80}, EndHeaders: true}) // index 0
		}},
		{name: "trailers with END_STREAM after a body, in two frames", status: 200, trailer: "x-t: done", answer: func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer, id uint32) error {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: memberBlock(enc, hb, ":status", "200", "trailer", "x-t"), EndHeaders: true})
			_ = fr.WriteData(id, false, []byte("ok"))
			blk := memberBlock(enc, hb, "x-t", "done")
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:len(blk)/2], EndStream: true})
			return fr.WriteContinuation(id, true, blk[len(blk)/2:])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			member := rawH2Streams(t, func(_ int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				return func(f *http2.MetaHeadersFrame) error {
					if f.PseudoValue("path") == "/case" && tc.answer != nil {
						return tc.answer(fr, enc, &hb, f.StreamID)
					}
					if f.PseudoValue("path") == "/case" {
						_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: memberBlock(enc, &hb, tc.head...), EndHeaders: true})
						return fr.WriteData(f.StreamID, true, []byte("ok"))
					}
					_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: memberBlock(enc, &hb, ":status", "200", "x-next", "1"), EndHeaders: true})
					return fr.WriteData(f.StreamID, true, []byte("next"))
				}
			})
			be := newBackend(t, member)
			be.opts.Protocol = H2C
			addr := proxyUnder(t, New(Config{MaxHeaderBytes: 4096}), oneRoute(be), nil)
			client := h2cTestClient()
			get := func(path string) (*http.Response, []byte, error) {
				req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
				req.Host = "a.example"
				resp, err := client.Do(req)
				if err != nil {
					return nil, nil, err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp, b, err
			}
			for round := range 2 { // the second round meets the member's dynamic table filled
				resp, body, err := get("/case")
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if resp.StatusCode != tc.status {
					t.Fatalf("round %d: status %d, want %d (body %q)", round, resp.StatusCode, tc.status, body)
				}
				if tc.status == 200 && string(body) != "ok" {
					t.Errorf("round %d: body %q, want ok", round, body)
				}
				if tc.header != "" {
					name, value, _ := strings.Cut(tc.header, ": ")
					if got := resp.Header.Get(name); got != value {
						t.Errorf("round %d: %s: %q, want %q", round, name, got, value)
					}
				}
				if tc.trailer != "" {
					name, value, _ := strings.Cut(tc.trailer, ": ")
					if got := resp.Trailer.Get(name); got != value {
						t.Errorf("round %d: trailer %s: %q, want %q (trailers %v)", round, name, got, value, resp.Trailer)
					}
				}
				resp, body, err = get("/next")
				if err != nil || resp.StatusCode != 200 || string(body) != "next" || resp.Header.Get("x-next") != "1" {
					t.Fatalf("round %d: the next request: %v %v %q", round, err, resp, body)
				}
			}
		})
	}
}

// quietH2Member is an HTTP/2 member that answers every request with the
// head, body and trailers of a gRPC call, pre-encoded, reading and
// writing frames without allocating: what TestH2MemberAllocs counts is
// the proxy's.
func quietH2Member(t testing.TB) string {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	var w bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	// The first answer of a connection has its fields as literals,
	// which both encoders index; the others refer to them, as a
	// member's encoder would.
	var answers [2][]byte
	for i := range answers {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: memberBlock(enc, &hb, ":status", "200", "content-type", "application/grpc", "grpc-accept-encoding", "gzip"), EndHeaders: true})
		_ = fr.WriteData(1, false, []byte{0, 0, 0, 0, 3, 'a', 'b', 'c'})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: memberBlock(enc, &hb, "grpc-status", "0", "grpc-message", "ok"), EndHeaders: true, EndStream: true})
		answers[i] = bytes.Clone(w.Bytes())
		w.Reset()
	}
	_ = fr.WriteSettings()
	_ = fr.WriteSettingsAck()
	settings := bytes.Clone(w.Bytes())
	ack := settings[9:]
	// Where the stream id of each of an answer's three frames is.
	ids := func(answer []byte) []int {
		var at []int
		for off := 0; off < len(answer); {
			at = append(at, off+5)
			off += 9 + (int(answer[off])<<16 | int(answer[off+1])<<8 | int(answer[off+2]))
		}
		return at
	}
	return rawServer(t, func(c net.Conn) {
		out, at, first := bytes.Clone(answers[0]), ids(answers[0]), true
		var pre [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(c, pre[:]); err != nil {
			return
		}
		if _, err := c.Write(settings[:9]); err != nil {
			return
		}
		var h [9]byte
		buf := make([]byte, 1<<16)
		for {
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return
			}
			n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			if _, err := io.ReadFull(c, buf[:n]); err != nil {
				return
			}
			typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
			switch {
			case typ == http2.FrameSettings && flags&http2.FlagSettingsAck == 0:
				if _, err := c.Write(ack); err != nil {
					return
				}
			case (typ == http2.FrameHeaders || typ == http2.FrameData) && flags&http2.FlagDataEndStream != 0:
				for _, i := range at {
					copy(out[i:i+4], h[5:9])
				}
				if _, err := c.Write(out); err != nil {
					return
				}
				if first {
					out, at, first = bytes.Clone(answers[1]), ids(answers[1]), false
				}
			}
		}
	})
}

// TestH2MemberAllocs counts the allocations of one HTTP/2 request over
// TLS proxied to an HTTP/2 member whose answer is a gRPC call's (head,
// body, trailers), all in this process: the member and the client
// allocate nothing per request, and crypto/tls allocates one per record
// read on each side of the client connection (TestH2Allocs). Before the
// proxy read the member's header blocks itself (h2Blocks) and took a
// free stream slot without a context (reserveFree), a request cost 27.
func TestH2MemberAllocs(t *testing.T) {
	be := newBackend(t, quietH2Member(t))
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(allocFree{be}), selfSigned(t))
	rc := newH2RawClient(t, addr)
	for range 20 {
		if n := rc.do(t); n != 8 {
			t.Fatalf("body of %d bytes, want 8", n)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() { rc.do(t) })
	limit := 2.0
	if raceEnabled {
		// sync.Pool drops entries at random: crypto/tls's record
		// buffers, and the pooled member stream with its two channels
		// and field buffers, are then allocated again. (Decoding the
		// member's header blocks with x/net/http2's framer cost 25.)
		limit += 6
	}
	t.Logf("%.1f allocations per request", allocs)
	if allocs > limit {
		t.Errorf("%.1f allocations per HTTP/2 request to an HTTP/2 member, want at most %.1f", allocs, limit)
	}
}

// TestH2BlocksKeepNoOldFields decodes a block of many literal fields,
// then shorter ones, as a peer (a member, a client) may send them: no
// slot of the connection's field buffer keeps a string of an earlier
// block, and after a field that breaks the rules the decoder makes no
// more strings of that block's literals.
func TestH2BlocksKeepNoOldFields(t *testing.T) {
	var b h2Blocks
	b.initBlocks(1 << 20)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.SetMaxDynamicTableSizeLimit(0) // literals every time
	enc.SetMaxDynamicTableSize(0)
	block := func(n int, name string) []byte {
		hb.Reset()
		for i := range n {
			_ = enc.WriteField(hpack.HeaderField{Name: name, Value: strings.Repeat("v", 100+i)})
		}
		return bytes.Clone(hb.Bytes())
	}
	for _, n := range []int{40, 20, 5, 1} {
		h := b.begin(1, true, 1<<20)
		if code := b.decode(block(n, "x-f"), true); code != 0 {
			t.Fatalf("block of %d fields: %v", n, code)
		}
		if len(h.fields) != n {
			t.Fatalf("block of %d fields decoded to %d", n, len(h.fields))
		}
		for i, f := range h.fields[len(h.fields):cap(h.fields)] {
			if f.Name != "" || f.Value != "" {
				t.Fatalf("after a block of %d fields, slot %d keeps %q (%d bytes) of an earlier block", n, n+i, f.Name, len(f.Value))
			}
		}
	}
	// A field name in upper case, then many literals: the block is
	// invalid, and its later fields are not kept.
	h := b.begin(3, true, 1<<20)
	bad := append(block(1, "X-Bad"), block(30, "x-after")...)
	if code := b.decode(bad, true); code != 0 {
		t.Fatalf("invalid block: connection error %v", code)
	}
	if !h.invalid || len(h.fields) != 0 {
		t.Fatalf("invalid block: invalid %v, %d fields kept", h.invalid, len(h.fields))
	}
	// What decoding costs: the invalid block's later literals are not
	// made strings (with the encoder's table off, every literal of a
	// valid block is one).
	good := block(31, "x-good")
	cost := func(blk []byte) float64 {
		return testing.AllocsPerRun(20, func() {
			b.begin(7, true, 1<<20)
			_ = b.decode(blk, true)
		})
	}
	if valid, invalid := cost(good), cost(bad); invalid > 5 || valid < 30 {
		t.Errorf("allocations decoding a block of 31 literals: %.0f valid, %.0f with the first field invalid (want at most 5)", valid, invalid)
	}
	// The next block decodes again.
	h = b.begin(5, true, 1<<20)
	if code := b.decode(block(2, "x-ok"), true); code != 0 || h.invalid || len(h.fields) != 2 {
		t.Fatalf("block after an invalid one: code %v, invalid %v, %d fields", code, h.invalid, len(h.fields))
	}
}

// FuzzH2MemberResponse has an HTTP/2 member answer the proxy's first
// request on a connection (stream 1) with arbitrary frames, then close
// the connection: whatever the member sends, the proxy must not panic,
// and the client's request must end (with the member's response or an
// error status) within the proxy's own timeouts (2 s each here: a member
// that allows no stream has the request wait for a slot that long).
func FuzzH2MemberResponse(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	seed := func(write func(fr *http2.Framer)) {
		var w bytes.Buffer
		write(http2.NewFramer(&w, nil))
		f.Add(w.Bytes())
	}
	head := memberBlock(enc, &hb, ":status", "200", "content-type", "application/grpc", "x-a", "1")
	trailer := memberBlock(enc, &hb, "grpc-status", "0")
	seed(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head, EndHeaders: true})
		_ = fr.WriteData(1, false, []byte{0, 0, 0, 0, 2, 'o', 'k'})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: trailer, EndHeaders: true, EndStream: true})
	})
	seed(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head[:3]})
		_ = fr.WriteContinuation(1, false, head[3:6])
		_ = fr.WriteContinuation(1, true, head[6:])
		_ = fr.WriteData(1, true, []byte("ok"))
	})
	seed(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: memberBlock(enc, &hb, ":status", "103"), EndHeaders: true, PadLength: 3})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head, EndHeaders: true, Priority: http2.PriorityParam{Weight: 7}})
		_ = fr.WriteWindowUpdate(0, 100)
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteData(1, true, nil)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: trailer, EndHeaders: true, EndStream: true}) // late
	})
	seed(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: memberBlock(enc, &hb, ":status", "200", "X-Up", "1"), EndHeaders: true})
		_ = fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
		_ = fr.WriteGoAway(1, http2.ErrCodeNo, nil)
	})
	seed(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x80}, EndHeaders: true})
	})
	seed(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: head, EndHeaders: true})
		_ = fr.WriteContinuation(1, true, nil)
	})

	var input atomic.Pointer[[]byte]
	member := rawServer(f, func(c net.Conn) {
		var pre [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(c, pre[:]); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		if fr.WriteSettings() != nil {
			return
		}
		for {
			fm, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if _, ok := fm.(*http2.HeadersFrame); ok {
				break
			}
		}
		if in := input.Load(); in != nil {
			_, _ = c.Write(*in)
		}
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = io.Copy(io.Discard, c) // let the proxy read before the close
	})
	be := newBackend(f, member)
	be.opts.Protocol = H2C
	addr := proxyUnder(f, New(Config{ResponseHeaderTimeout: 2 * time.Second, BodyTimeout: 2 * time.Second, ConnectTimeout: 2 * time.Second}), oneRoute(be), nil)
	client := h2cTestClient()
	f.Fuzz(func(t *testing.T, in []byte) {
		input.Store(&in)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
		req.Host = "a.example"
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the request did not end: %v", err)
			}
			return
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if ctx.Err() != nil {
			t.Fatalf("the response did not end: %v", err)
		}
	})
}
