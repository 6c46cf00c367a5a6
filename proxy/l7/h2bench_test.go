package l7

import (
	"bytes"
	"crypto/tls"
	"io"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2RawClient sends one pre-encoded request at a time on stream ids it
// counts itself and reads frames until the stream ends, without
// allocating per request.
type h2RawClient struct {
	c    *tls.Conn
	id   uint32
	blk  []byte
	out  []byte
	hdr  [9]byte
	buf  []byte
	body int
}

func newH2RawClient(t testing.TB, addr string) *h2RawClient {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "bench.example"}, {":path", "/bench"}, {"user-agent", "h2load"}, {"accept", "*/*"}}
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	rc := &h2RawClient{c: c, id: 1, blk: bytes.Clone(hb.Bytes()), buf: make([]byte, 1<<16)}
	rc.out = make([]byte, 9+len(rc.blk))
	rc.do(t) // the fields enter the dynamic table; later requests refer to them
	hb.Reset()
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	rc.blk = bytes.Clone(hb.Bytes())
	rc.out = make([]byte, 9+len(rc.blk))
	return rc
}

// do sends a request and reads until its stream ends; it returns the
// response body length.
func (rc *h2RawClient) do(t testing.TB) int {
	h := rc.out
	n := len(rc.blk)
	h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n)
	h[3] = byte(http2.FrameHeaders)
	h[4] = byte(http2.FlagHeadersEndHeaders | http2.FlagHeadersEndStream)
	h[5], h[6], h[7], h[8] = byte(rc.id>>24), byte(rc.id>>16), byte(rc.id>>8), byte(rc.id)
	copy(h[9:], rc.blk)
	if _, err := rc.c.Write(h); err != nil {
		t.Fatal(err)
	}
	body := 0
	for {
		if _, err := io.ReadFull(rc.c, rc.hdr[:]); err != nil {
			t.Fatal(err)
		}
		ln := int(rc.hdr[0])<<16 | int(rc.hdr[1])<<8 | int(rc.hdr[2])
		if _, err := io.ReadFull(rc.c, rc.buf[:ln]); err != nil {
			t.Fatal(err)
		}
		typ, flags := http2.FrameType(rc.hdr[3]), http2.Flags(rc.hdr[4])
		sid := uint32(rc.hdr[5]&0x7f)<<24 | uint32(rc.hdr[6])<<16 | uint32(rc.hdr[7])<<8 | uint32(rc.hdr[8])
		if typ == http2.FrameGoAway || (typ == http2.FrameRSTStream && sid == rc.id) {
			t.Fatalf("stream %d: frame %v", rc.id, typ)
		}
		if sid != rc.id {
			continue
		}
		if typ == http2.FrameData {
			body += ln
		}
		if (typ == http2.FrameData || typ == http2.FrameHeaders) && flags&http2.FlagDataEndStream != 0 {
			rc.id += 2
			return body
		}
	}
}

// TestH2Allocs counts the allocations of one HTTP/2 request over TLS
// proxied to an HTTP/1.1 member, all in this process. Two remain, none
// in this package: crypto/tls allocates one per record read (its
// atLeastReader), once in the test's client and once in the server
// (HEADERS frames are read without the framer, which would allocate a
// HeadersFrame for each; cleartext requests allocate nothing:
// TestServedPathAllocs in proxy). Under the race
// detector sync.Pool drops entries at random, and crypto/tls's record
// buffer pool then allocates about two more.
func TestH2Allocs(t *testing.T) {
	be := newBackend(t, rawBackend(t, rawResponse))
	addr := proxyUnder(t, New(Config{}), oneRoute(allocFree{be}), selfSigned(t))
	rc := newH2RawClient(t, addr)
	for range 20 {
		if n := rc.do(t); n != 13 {
			t.Fatalf("body of %d bytes, want 13", n)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() { rc.do(t) })
	limit := 2.0
	if raceEnabled {
		limit += 2.5
	}
	if allocs > limit {
		t.Errorf("%.1f allocations per HTTP/2 request, want at most %.1f", allocs, limit)
	}
}

func BenchmarkProxyH2(b *testing.B) {
	be := newBackend(b, rawBackend(b, rawResponse))
	addr := proxyUnder(b, New(Config{}), oneRoute(allocFree{be}), selfSigned(b))
	rc := newH2RawClient(b, addr)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rc.do(b)
	}
}

// BenchmarkH2Ping is one PING and its ACK on the connection of
// BenchmarkProxyH2 (the client's side included, as there): against a
// request, what a control frame costs the host (cpubudget's and this
// package's WorkControlFrames).
func BenchmarkH2Ping(b *testing.B) {
	be := newBackend(b, rawBackend(b, rawResponse))
	addr := proxyUnder(b, New(Config{H2MaxControlFramesPerSecond: 1 << 30}), oneRoute(allocFree{be}), selfSigned(b))
	rc := newH2RawClient(b, addr)
	ping := make([]byte, 9+8)
	ping[2], ping[3] = 8, byte(http2.FramePing)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rc.c.Write(ping); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := io.ReadFull(rc.c, rc.hdr[:]); err != nil {
				b.Fatal(err)
			}
			ln := int(rc.hdr[0])<<16 | int(rc.hdr[1])<<8 | int(rc.hdr[2])
			if _, err := io.ReadFull(rc.c, rc.buf[:ln]); err != nil {
				b.Fatal(err)
			}
			if http2.FrameType(rc.hdr[3]) == http2.FramePing {
				break
			}
		}
	}
}

// BenchmarkH2Ping64 is 64 PINGs sent in one write and their ACKs, as a
// flood sends them: what one control frame costs when frames come
// together.
func BenchmarkH2Ping64(b *testing.B) {
	be := newBackend(b, rawBackend(b, rawResponse))
	addr := proxyUnder(b, New(Config{H2MaxControlFramesPerSecond: 1 << 30}), oneRoute(allocFree{be}), selfSigned(b))
	rc := newH2RawClient(b, addr)
	pings := make([]byte, 64*17)
	for i := range 64 {
		pings[i*17+2], pings[i*17+3] = 8, byte(http2.FramePing)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rc.c.Write(pings); err != nil {
			b.Fatal(err)
		}
		for acks := 0; acks < 64; {
			if _, err := io.ReadFull(rc.c, rc.hdr[:]); err != nil {
				b.Fatal(err)
			}
			ln := int(rc.hdr[0])<<16 | int(rc.hdr[1])<<8 | int(rc.hdr[2])
			if _, err := io.ReadFull(rc.c, rc.buf[:ln]); err != nil {
				b.Fatal(err)
			}
			if http2.FrameType(rc.hdr[3]) == http2.FramePing {
				acks++
			}
		}
	}
}

// BenchmarkH2Priority64 is 64 PRIORITY frames (answered by nothing) and
// one PING sent in one write, until the PING's ACK: against
// BenchmarkH2Ping, what a control frame that is not answered costs.
func BenchmarkH2Priority64(b *testing.B) {
	be := newBackend(b, rawBackend(b, rawResponse))
	addr := proxyUnder(b, New(Config{H2MaxControlFramesPerSecond: 1 << 30}), oneRoute(allocFree{be}), selfSigned(b))
	rc := newH2RawClient(b, addr)
	out := make([]byte, 64*14+17)
	for i := range 64 {
		f := out[i*14:]
		f[2], f[3], f[8] = 5, byte(http2.FramePriority), 1 // stream 1, depends on 0
	}
	out[64*14+2], out[64*14+3] = 8, byte(http2.FramePing)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rc.c.Write(out); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := io.ReadFull(rc.c, rc.hdr[:]); err != nil {
				b.Fatal(err)
			}
			ln := int(rc.hdr[0])<<16 | int(rc.hdr[1])<<8 | int(rc.hdr[2])
			if _, err := io.ReadFull(rc.c, rc.buf[:ln]); err != nil {
				b.Fatal(err)
			}
			if http2.FrameType(rc.hdr[3]) == http2.FramePing {
				break
			}
		}
	}
}
