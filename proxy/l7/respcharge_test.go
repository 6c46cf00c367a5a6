package l7

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// chargedGet sends one GET / through a proxy serving router from client
// ("h1", "h1.0": HTTP/1.0, "h2c", or "h3": an H3Conn as the HTTP/3 codec
// hands it requests), fails unless the response is 200 with body want,
// and returns the units the tenant's CPU budget counted.
func chargedGet(t *testing.T, router Router, client, want string) int64 {
	t.Helper()
	cpu := &unitCount{}
	info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, CPU: cpu}
	if client == "h3" {
		s := New(Config{})
		defer s.Close()
		info.TLS = true
		c := s.NewH3Conn(&info, netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:443"))
		defer c.Close()
		r := httptest.NewRequest("GET", "https://a.example/", nil)
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/3.0", 3, 0
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		if w.Code != 200 || w.Body.String() != want {
			t.Fatalf("%s: %d %.100q", client, w.Code, w.Body)
		}
		return cpu.n.Load()
	}
	addr := proxyUnderInfo(t, New(Config{}), info, nil)
	if client == "h2c" {
		c := h2cTestClient()
		c.Timeout = 20 * time.Second
		defer c.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Host = "a.example"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", client, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("%s: %d %.100q, %v", client, resp.StatusCode, b, err)
		}
		c.CloseIdleConnections()
		return cpu.n.Load()
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	proto := "HTTP/1.1"
	if client == "h1.0" {
		proto = "HTTP/1.0"
	}
	if _, err := io.WriteString(conn, "GET / "+proto+"\r\nHost: a.example\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read as it came: net/http's client refuses a chunked body with
	// as much framing as the tests send.
	raw, err := io.ReadAll(conn)
	head, body, _ := bytes.Cut(raw, []byte("\r\n\r\n"))
	if bytes.Contains(bytes.ToLower(head), []byte("transfer-encoding: chunked")) {
		body = dechunk(body)
	}
	if err != nil || len(head) < 12 || string(head[9:12]) != "200" || string(body) != want {
		t.Fatalf("%s: %.100q, body %.100q, %v", client, head, body, err)
	}
	conn.Close()
	return cpu.n.Load()
}

// dechunk returns the data of a chunked body (extensions skipped, the
// trailer section dropped), nil when it is malformed.
func dechunk(b []byte) []byte {
	var out []byte
	for {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		if !ok {
			return nil
		}
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 64)
		if err != nil || int64(len(rest)) < n+2 {
			return nil
		}
		if n == 0 {
			return out
		}
		out = append(out, rest[:n]...)
		b = rest[n+2:]
	}
}

// fastAndExt are the routes of the charge tests: the fast path to be,
// and the net/http path (RouteExt) to be.
func fastAndExt(be *testBackend) map[string]Router {
	return map[string]Router{
		"fast": testRouter{{prefix: "/", route: &Route{Name: "fast", Backend: be}}},
		"ext":  testRouter{{prefix: "/", route: &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}}}}}},
	}
}

// TestExtInterimResponsesCharged: the interim (1xx) responses an
// HTTP/1.1 member sends before its final one count toward the tenant's
// CPU budget on the net/http path (a route with RouteExt), read by our
// transport and by net/http's (a PROXY protocol member, through
// httptrace's Got1xxResponse), to an HTTP/1.1 and an HTTP/2 client: 160
// 3,000-byte 103 heads (480,000 bytes) charge at least 7 units more than
// none, whether their bytes are in a field or where net/http's hook does
// not see them (a reason phrase, blanks before a value).
func TestExtInterimResponsesCharged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, interim string }{
		{"field", strings.Repeat("HTTP/1.1 103 Early Hints\r\nX-Pad: "+strings.Repeat("p", 3000)+"\r\n\r\n", 160)},
		// Bytes net/http's transport reads and does not give its hook.
		{"reason phrase", strings.Repeat("HTTP/1.1 103 "+strings.Repeat("p", 3000)+"\r\n\r\n", 160)},
		{"blank value", strings.Repeat("HTTP/1.1 103 Early Hints\r\nX-Pad:"+strings.Repeat(" ", 3000)+"\r\n\r\n", 160)},
	} {
		testExtInterimResponsesCharged(t, c.name, c.interim)
	}
}

func testExtInterimResponsesCharged(t *testing.T, name, interim string) {
	for _, pp := range []uint8{0, 1} {
		for _, client := range []string{"h1", "h2c", "h3"} {
			units := func(interim string) int64 {
				be := newBackend(t, repliesMember(t, interim+"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				be.opts.ProxyProtocol = pp
				return chargedGet(t, fastAndExt(be)["ext"], client, "ok")
			}
			bare, with := units(""), units(interim)
			t.Logf("%s, proxy protocol %d, %s client: %d units without interim responses, %d with", name, pp, client, bare, with)
			if with-bare < 7 {
				t.Errorf("%s, proxy protocol %d, %s client: with 160 3,000-byte interim responses: %d units, without: %d; want at least 7 more", name, pp, client, with, bare)
			}
		}
	}
}

// interimH2Member is an HTTP/2 member that answers each request with n
// interim responses (103, with a field of 3,000 bytes that its encoder
// indexes after the first: each later HEADERS frame is a few bytes that
// decode to 3,000), then 200 with body "ok".
func interimH2Member(t *testing.T, n int) string {
	t.Helper()
	return rawH2Streams(t, func(_ int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		pad := strings.Repeat("p", 3000)
		return func(f *http2.MetaHeadersFrame) error {
			for range n {
				hb.Reset()
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "103"})
				enc.WriteField(hpack.HeaderField{Name: "x-pad", Value: pad})
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
					return err
				}
			}
			return answerH2(fr, f.StreamID, "ok")
		}
	})
}

// continuationH2Member is an HTTP/2 member that answers each request with
// n interim responses (103) whose HEADERS frame holds the status alone,
// each followed by 10 CONTINUATION frames of 12,800 bytes that decode to
// nothing (dynamic table size updates, which the decoder takes anywhere
// in a block while its table is empty), then 200 with body "ok": 128,104
// bytes a block, within the bound of a block's bytes (twice
// MaxHeaderBytes and h2BlockSlack).
func continuationH2Member(t *testing.T, n int) string {
	t.Helper()
	status := []byte{0x08, 3, '1', '0', '3'} // :status 103, literal, not indexed
	fill := bytes.Repeat([]byte{0x20}, 12800)
	return rawH2Streams(t, func(_ int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
		return func(f *http2.MetaHeadersFrame) error {
			for range n {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: status}); err != nil {
					return err
				}
				for i := range 10 {
					if err := fr.WriteContinuation(f.StreamID, i == 9, fill); err != nil {
						return err
					}
				}
			}
			return answerH2(fr, f.StreamID, "ok")
		}
	})
}

// TestH2MemberInterimCharged: the interim (1xx) HEADERS frames of an
// HTTP/2 member count toward the tenant's CPU budget, by the bytes their
// fields decode to, on the HTTP/2 fast path (awaitHead, h2Conn's
// chargeRead) and through the net/http path (h2Transport), to an HTTP/1.1
// and an HTTP/2 client: 160 103 responses with a 3,000-byte field charge
// at least 7 units more than none, and 10 whose header blocks go on in
// 128,000 bytes of CONTINUATION frames that decode to no field (1,281,040
// bytes) at least 19 more, by the bytes of their frames.
func TestH2MemberInterimCharged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ route, client string }{{"fast", "h2c"}, {"fast", "h1"}, {"ext", "h2c"}, {"ext", "h1"}, {"ext", "h3"}} {
		units := func(n int) int64 {
			be := newBackend(t, interimH2Member(t, n))
			be.opts.Protocol = H2C
			return chargedGet(t, fastAndExt(be)[c.route], c.client, "ok")
		}
		bare, with := units(0), units(160)
		t.Logf("%s route, %s client: %d units without interim responses, %d with", c.route, c.client, bare, with)
		if with-bare < 7 {
			t.Errorf("%s route, %s client: with 160 interim responses of 3,000 bytes: %d units, without: %d; want at least 7 more", c.route, c.client, with, bare)
		}
		cont := func(n int) int64 {
			be := newBackend(t, continuationH2Member(t, n))
			be.opts.Protocol = H2C
			return chargedGet(t, fastAndExt(be)[c.route], c.client, "ok")
		}
		bare, with = cont(0), cont(10)
		t.Logf("%s route, %s client: %d units without interim responses, %d with 10 in 128,000 bytes of CONTINUATION frames each", c.route, c.client, bare, with)
		if with-bare < 19 {
			t.Errorf("%s route, %s client: with 10 interim responses in 128,000 bytes of CONTINUATION frames each: %d units, without: %d; want at least 19 more", c.route, c.client, with, bare)
		}
	}
}

// TestChunkFramingCharged: the chunk-size lines and chunk extensions of
// an HTTP/1.1 member's chunked response count toward the tenant's CPU
// budget as the body's bytes, also where they are not relayed: the
// HTTP/2 fast path (which sends the data as DATA), the net/http path
// (h1RespBody, to an HTTP/1.1 and an HTTP/2 client) and the HTTP/1.1 fast
// path to an HTTP/1.0 client (which gets the body de-chunked); the
// HTTP/1.1 fast path relays them as they came. 1,000 1-byte chunks with
// 4,000-byte extensions (about 4,009,000 bytes, 61 units) charge at least
// 60 units more than 1,000 1-byte chunks without.
func TestChunkFramingCharged(t *testing.T) {
	t.Parallel()
	response := func(ext string) string {
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strings.Repeat("1"+ext+"\r\nx\r\n", 1000) + "0\r\n\r\n"
	}
	want := strings.Repeat("x", 1000)
	ext := ";x=" + strings.Repeat("p", 4000)
	for _, c := range []struct{ route, client string }{{"fast", "h2c"}, {"fast", "h1"}, {"fast", "h1.0"}, {"ext", "h2c"}, {"ext", "h1"}, {"ext", "h3"}} {
		units := func(ext string) int64 {
			be := newBackend(t, repliesMember(t, response(ext)))
			return chargedGet(t, fastAndExt(be)[c.route], c.client, want)
		}
		bare, with := units(""), units(ext)
		t.Logf("%s route, %s client: %d units with bare chunk-size lines, %d with extensions", c.route, c.client, bare, with)
		if with-bare < 60 {
			t.Errorf("%s route, %s client: with 4,000-byte chunk extensions: %d units, without: %d; want at least 60 more", c.route, c.client, with, bare)
		}
	}
}

// blockH2Member is an HTTP/2 member that answers each request with 200
// and body "ok"; with frames, the header block of its head (or of its
// trailers, with trailers) goes on in that many CONTINUATION frames of
// 1,280 bytes that decode to no field (dynamic table size updates).
func blockH2Member(t *testing.T, frames int, trailers bool) string {
	t.Helper()
	head := []byte{0x08, 3, '2', '0', '0'}         // :status 200, literal, not indexed
	trailer := []byte{0, 3, 'x', '-', 't', 1, '1'} // x-t: 1, literal, not indexed
	fill := bytes.Repeat([]byte{0x20}, 1280)
	block := func(fr *http2.Framer, id uint32, frag []byte, end, long bool) error {
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: !long || frames == 0})
		for i := 0; long && i < frames && err == nil; i++ {
			err = fr.WriteContinuation(id, i == frames-1, fill)
		}
		return err
	}
	return rawH2Member(t, func(_ int, fr *http2.Framer, c net.Conn) {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				if block(fr, f.StreamID, head, false, !trailers) != nil ||
					fr.WriteData(f.StreamID, !trailers, []byte("ok")) != nil ||
					(trailers && block(fr, f.StreamID, trailer, true, true) != nil) {
					return
				}
			}
		}
	})
}

// TestH2MemberHeadBlocksCharged: the header blocks of an HTTP/2 member's
// head and trailers count toward the tenant's CPU budget by the bytes of
// their frames, on the HTTP/2 fast path and through the net/http path
// (h2Transport), to HTTP/1.1, HTTP/2 and HTTP/3 clients: their fields are
// bounded, and so are the bytes of the CONTINUATION frames they come in
// (twice MaxHeaderBytes and h2BlockSlack, TestH2MemberEmptyContinuations),
// but not to what they decode to. A block that goes on in 100 frames of
// 1,280 bytes that decode to no field (128,900 bytes more) charges at
// least a unit more than one that does not.
func TestH2MemberHeadBlocksCharged(t *testing.T) {
	t.Parallel()
	for _, trailers := range []bool{false, true} {
		what := "head"
		if trailers {
			what = "trailers"
		}
		for _, c := range []struct{ route, client string }{{"fast", "h2c"}, {"fast", "h1"}, {"ext", "h2c"}, {"ext", "h1"}, {"ext", "h3"}} {
			units := func(frames int) int64 {
				be := newBackend(t, blockH2Member(t, frames, trailers))
				be.opts.Protocol = H2C
				return chargedGet(t, fastAndExt(be)[c.route], c.client, "ok")
			}
			bare, with := units(0), units(100)
			t.Logf("%s, %s route, %s client: %d units in one frame, %d in 100 CONTINUATION frames more", what, c.route, c.client, bare, with)
			if with-bare < 1 {
				t.Errorf("%s, %s route, %s client: with 128,900 bytes of CONTINUATION frames: %d units, without: %d; want at least 1 more", what, c.route, c.client, with, bare)
			}
		}
	}
}

// TestEndlessInterimHeadTimeout: a member that sends interim (1xx)
// responses without end, one every few milliseconds, is answered by the
// response head timeout (504) on every path, also through net/http's
// transport (PROXY protocol), where each interim head is bounded by
// MaxResponseHeaderBytes alone and their number by that timeout only.
func TestEndlessInterimHeadTimeout(t *testing.T) {
	t.Parallel()
	h1 := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if l == "\r\n" {
				break
			}
		}
		for {
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	h2 := rawH2Streams(t, func(_ int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		return func(f *http2.MetaHeadersFrame) error {
			for {
				hb.Reset()
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "103"})
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
					return err
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	const rht = 300 * time.Millisecond
	for _, c := range []struct {
		member, route string
		pp            uint8
	}{{"h1", "fast", 0}, {"h1", "ext", 0}, {"h1", "ext", 1}, {"h2", "fast", 0}, {"h2", "ext", 0}, {"h2", "ext", 1}} {
		addr := h1
		if c.member == "h2" {
			addr = h2
		}
		be := newBackend(t, addr)
		be.opts.ProxyProtocol = c.pp
		be.opts.ResponseHeaderTimeout = rht
		if c.member == "h2" {
			be.opts.Protocol = H2C
		}
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return fastAndExt(be)[c.route] }}
		paddr := proxyUnderInfo(t, New(Config{}), info, nil)
		conn, err := net.Dial("tcp", paddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		t0 := time.Now()
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
		// The HTTP/1.1 fast path relays interim responses: skip them.
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode < 200 && time.Since(t0) < 10*rht {
			resp, err = http.ReadResponse(br, nil)
		}
		d := time.Since(t0)
		if err != nil {
			t.Errorf("%s member, %s route, proxy protocol %d: %v after %v", c.member, c.route, c.pp, err, d)
			continue
		}
		t.Logf("%s member, %s route, proxy protocol %d: %d after %v", c.member, c.route, c.pp, resp.StatusCode, d)
		if resp.StatusCode != 504 || d > 10*rht {
			t.Errorf("%s member, %s route, proxy protocol %d: %d after %v; want 504 after about %v", c.member, c.route, c.pp, resp.StatusCode, d, rht)
		}
	}
}

// chunkedAnswer is a chunked response with status code whose body is
// 1,000 1-byte chunks, each with extension ext.
func chunkedAnswer(code int, ext string) string {
	return "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strings.Repeat("1"+ext+"\r\nx\r\n", 1000) + "0\r\n\r\n"
}

// TestDroppedResponseFramingCharged: the framing of a chunked response
// the proxy reads and drops counts toward the tenant's CPU budget as the
// relayed ones' does: a retried attempt's response (discardResponse, to
// an HTTP/1.1, an HTTP/2 and an HTTP/3 client) and a mirrored request's
// (discardWriter). 1,000 1-byte chunks with 4,000-byte extensions (about
// 4,009,000 bytes, 61 units) charge at least 60 units more than 1,000
// bare ones.
func TestDroppedResponseFramingCharged(t *testing.T) {
	t.Parallel()
	ext := ";x=" + strings.Repeat("p", 4000)
	for _, client := range []string{"h1", "h2c", "h3"} {
		units := func(ext string) int64 {
			// Odd requests get a 503 with the chunked body, even ones 200.
			var n atomic.Int32
			member := rawServer(t, func(c net.Conn) {
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if l != "\r\n" {
						continue
					}
					resp := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
					if n.Add(1)%2 == 1 {
						resp = chunkedAnswer(503, ext)
					}
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
				}
			})
			be := newBackend(t, member)
			route := &Route{Name: "retry", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}},
				Retry: &Retry{Codes: []int{503}, Attempts: 1, Backoff: time.Millisecond}}}
			return chargedGet(t, testRouter{{prefix: "/", route: route}}, client, "ok")
		}
		bare, with := units(""), units(ext)
		t.Logf("retried response, %s client: %d units with bare chunk-size lines, %d with extensions", client, bare, with)
		if with-bare < 60 {
			t.Errorf("retried response, %s client: with 4,000-byte chunk extensions: %d units, without: %d; want at least 60 more", client, with, bare)
		}
	}
	mirrored := func(ext string) int64 {
		member := newBackend(t, repliesMember(t, chunkedAnswer(200, ext)))
		s := New(Config{})
		defer s.Close()
		cpu := &unitCount{}
		r, _ := http.NewRequest("GET", "http://a.example/", nil)
		ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), false, nil)
		q := &rtRequest{r: r, path: "/", ca: &ca, scope: &connScope{s: s, cpu: cpu}, stats: &RequestStats{Tenant: "t"}}
		if !s.mirror(q, []Mirror{{Backend: member, Numerator: 1, Denominator: 1}}) {
			t.Fatal("mirror refused a request")
		}
		waitUntil(t, 20*time.Second, "the copy answered", func() bool {
			s.mirrors.mu.Lock()
			defer s.mirrors.mu.Unlock()
			return s.mirrors.total == 0
		})
		return cpu.n.Load()
	}
	bare, with := mirrored(""), mirrored(ext)
	t.Logf("mirrored response: %d units with bare chunk-size lines, %d with extensions", bare, with)
	if with-bare < 60 {
		t.Errorf("mirrored response: with 4,000-byte chunk extensions: %d units, without: %d; want at least 60 more", with, bare)
	}
}
