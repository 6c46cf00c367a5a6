package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Exchange runs the HTTP/2 server on one end of a pipe, writes the
// client preface, a SETTINGS frame and in, then a PING, and returns what
// the server wrote until it answered that PING or closed. It fails the
// test when the server's output is not a well-formed frame sequence (its
// header blocks must decode) or when the server does not end.
func h2Exchange(t *testing.T, in []byte) []byte {
	s := New(Config{HeaderTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, BodyTimeout: time.Second,
		WriteTimeout: time.Second, MaxHeaderBytes: 4096, H2MaxConcurrentStreams: 8})
	defer s.Close()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		_, _ = io.Copy(w, r.Body)
		w.Header().Set("X-T", "end")
	})
	rt := testRouter{{route: &Route{Name: "echo", Handler: echo}}}
	info := &ConnInfo{Router: func() Router { return rt }}
	cli, srv := net.Pipe()
	done := make(chan struct{})
	ap := netip.MustParseAddrPort("192.0.2.1:1")
	go func() {
		defer close(done)
		s.serveH2Conn(context.Background(), srv, srv, tls.ConnectionState{}, info, ap, ap)
	}()
	var w bytes.Buffer
	w.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&w, nil)
	_ = fr.WriteSettings()
	w.Write(in)
	_ = fr.WritePing(false, [8]byte{'e', 'n', 'd'})
	go func() {
		_ = cli.SetWriteDeadline(time.Now().Add(3 * time.Second))
		_, _ = cli.Write(w.Bytes())
	}()
	// Read until the PING's answer and a quiet moment after it, a GOAWAY,
	// the end of the connection, or half a second.
	var out []byte
	buf := make([]byte, 32<<10)
	end := time.Now().Add(500 * time.Millisecond)
	acked := false
	for time.Now().Before(end) {
		wait := 50 * time.Millisecond
		if acked {
			wait = 10 * time.Millisecond
		}
		_ = cli.SetReadDeadline(time.Now().Add(wait))
		n, err := cli.Read(buf)
		out = append(out, buf[:n]...)
		if n > 0 {
			var away bool
			acked, away = h2Seen(out)
			if away {
				break
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !acked {
				continue
			}
			break
		}
	}
	_ = cli.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not end after the client closed")
	}
	b := out
	check := http2.NewFramer(nil, bytes.NewReader(b))
	check.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	check.SetMaxReadFrameSize(1 << 24)
	for {
		_, err := check.ReadFrame()
		if err == nil {
			continue
		}
		var se http2.StreamError
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &se) {
			break
		}
		t.Fatalf("the server wrote a malformed frame sequence: %v", err)
	}
	return b
}

// h2Seen reports whether the frames in out answer the final PING and
// whether they hold a GOAWAY.
func h2Seen(out []byte) (acked, away bool) {
	r := http2.NewFramer(nil, bytes.NewReader(out))
	r.SetMaxReadFrameSize(1 << 24)
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return acked, away
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			acked = acked || (f.IsAck() && f.Data == [8]byte{'e', 'n', 'd'})
		case *http2.GoAwayFrame:
			away = true
		}
	}
}

// h2Seeds are frame sequences a client may send after its SETTINGS.
func h2Seeds() [][]byte {
	var seeds [][]byte
	block := func(fields ...string) []byte {
		var b bytes.Buffer
		enc := hpack.NewEncoder(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return b.Bytes()
	}
	get := block(":method", "GET", ":scheme", "https", ":authority", "x", ":path", "/a")
	post := block(":method", "POST", ":scheme", "https", ":authority", "x", ":path", "/p", "content-length", "5", "te", "trailers")
	add := func(f func(fr *http2.Framer)) {
		var b bytes.Buffer
		f(http2.NewFramer(&b, nil))
		seeds = append(seeds, b.Bytes())
	}
	add(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get, EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: post, EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("hel"))
		_ = fr.WriteData(1, true, []byte("lo"))
	})
	add(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: post[:4]})
		_ = fr.WriteContinuation(3, true, post[4:])
		_ = fr.WriteData(3, false, []byte("hello"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block("x-t", "1"), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get, EndStream: true, EndHeaders: true})
		_ = fr.WriteWindowUpdate(1, 100)
		_ = fr.WriteWindowUpdate(0, 100)
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 3})
	})
	add(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":method", "GET", ":path", "/", "connection", "x"), EndStream: true, EndHeaders: true})
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	return seeds
}

// FuzzH2Frames feeds arbitrary frame sequences to the HTTP/2 server: it
// must never panic or hang, and what it writes back must be well-formed
// frames with decodable header blocks.
func FuzzH2Frames(f *testing.F) {
	for _, s := range h2Seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h2Exchange(t, in)
	})
}

// FuzzH2HeaderBlock feeds arbitrary HPACK header blocks, split in a HEADERS
// and a CONTINUATION frame, to the HTTP/2 server.
func FuzzH2HeaderBlock(f *testing.F) {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/"}, {"cookie", "a=1"}, {"cookie", "b=2"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	f.Add(b.Bytes(), uint16(3), true)
	f.Add([]byte{0x3f, 0xe1, 0x1f, 0x82}, uint16(0), false) // table size update, then :method GET
	f.Add([]byte{0x80}, uint16(1), true)                    // index 0
	f.Fuzz(func(t *testing.T, blk []byte, cut uint16, end bool) {
		k := int(cut) % (len(blk) + 1)
		var w bytes.Buffer
		fr := http2.NewFramer(&w, nil)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:k], EndStream: end, EndHeaders: false})
		_ = fr.WriteContinuation(1, true, blk[k:])
		h2Exchange(t, w.Bytes())
	})
}

func TestH2ExchangeAnswers(t *testing.T) {
	for i, s := range h2Seeds()[:3] {
		out := h2Exchange(t, s)
		r := http2.NewFramer(nil, bytes.NewReader(out))
		r.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		var status string
		var body []byte
		for {
			fr, err := r.ReadFrame()
			if err != nil {
				break
			}
			switch fr := fr.(type) {
			case *http2.MetaHeadersFrame:
				if v := fr.PseudoValue("status"); v != "" {
					status = v
				}
			case *http2.DataFrame:
				body = append(body, fr.Data()...)
			}
		}
		want := ""
		if i > 0 {
			want = "hello"
		}
		if status != "200" || string(body) != want {
			t.Errorf("seed %d: status %q body %q", i, status, body)
		}
	}
}
