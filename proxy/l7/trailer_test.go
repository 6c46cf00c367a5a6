package l7

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// trailerMember is an HTTP/1.1 member that answers each request with its
// body and the trailer lines it received as they came ("name: value",
// name in lower case), one a line.
func trailerMember(t testing.TB) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, err := br.ReadString('\n'); err != nil { // request line
				return
			}
			chunked, length := false, 0
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				l = strings.TrimRight(l, "\r\n")
				if l == "" {
					break
				}
				k, v, _ := strings.Cut(l, ":")
				switch strings.ToLower(k) {
				case "transfer-encoding":
					chunked = strings.Contains(strings.ToLower(v), "chunked")
				case "content-length":
					length, _ = strconv.Atoi(strings.TrimSpace(v))
				}
			}
			var body bytes.Buffer
			lines := []string{}
			if chunked {
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					size, err := strconv.ParseInt(strings.TrimRight(l, "\r\n"), 16, 64)
					if err != nil {
						return
					}
					if size == 0 {
						break
					}
					if _, err := io.CopyN(&body, br, size+2); err != nil {
						return
					}
					body.Truncate(body.Len() - 2)
				}
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					l = strings.TrimRight(l, "\r\n")
					if l == "" {
						break
					}
					k, v, _ := strings.Cut(l, ":")
					lines = append(lines, strings.ToLower(k)+": "+strings.TrimSpace(v))
				}
			} else if _, err := io.CopyN(&body, br, int64(length)); err != nil {
				return
			}
			out := "body: " + body.String() + "\n" + strings.Join(lines, "\n")
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
		}
	})
}

// trailerHandler answers as trailerMember does, from net/http's request
// (an HTTP/2 member: r.Trailer once the body is read).
func trailerHandler(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	lines := []string{}
	for k, vv := range r.Trailer {
		for _, v := range vv {
			lines = append(lines, strings.ToLower(k)+": "+v)
		}
	}
	_, _ = io.WriteString(w, "body: "+string(b)+"\n"+strings.Join(lines, "\n"))
}

// trailerFieldsSent are the trailers of TestRequestTrailersFiltered: one
// of no kind the proxy acts on, then fields a trailer must not carry
// (trailerKept: RFC 9110 section 6.5.1's authentication, request
// modifiers and content format among them).
var trailerFieldsSent = [][2]string{
	{"X-Checksum", "abc"},
	{"Cookie", "sid=1"}, {"If-Match", `"v1"`}, {"Content-Type", "text/evil"}, {"Authorization", "Basic eDp5"},
	{"X-Forwarded-For", "6.6.6.6"}, {"X-Real-IP", "6.6.6.6"}, {"X_Forwarded_For", "6.6.6.6"},
	{"X-Client-Subject", "CN=admin"}, {"x_client_subject", "CN=admin2"},
	{"Forwarded", "for=6.6.6.6"}, {"X-Request-Id", "spoofed-id"}, {"Content-Length", "1"},
}

// h1TrailerPost sends a chunked POST with trailerFieldsSent (and, over
// HTTP/1.x, fields HTTP/2 forbids in a trailer: Host, Transfer-Encoding,
// Connection, and X-Hop, which the head's Connection field names) and
// returns the response body; split sends the trailer section in pieces.
func h1TrailerPost(addr string, secure, split bool, path string) (string, error) {
	conn, err := dialTest(addr, secure, "http/1.1")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	req := "POST " + path + " HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\nConnection: X-Hop\r\n\r\n" +
		"3\r\nhel\r\n2\r\nlo\r\n0\r\n"
	for _, f := range trailerFieldsSent {
		req += f[0] + ": " + f[1] + "\r\n"
	}
	req += "Host: evil.example\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nX-Hop: h\r\n\r\n"
	// split: the trailer section comes in pieces, the first with the
	// last chunk.
	cuts := []int{len(req)}
	if split {
		i := strings.Index(req, "0\r\n") + 3
		cuts = []int{i, i + 5, i + 30, len(req) - 1, len(req)}
	}
	at := 0
	for _, cut := range cuts {
		if _, err := io.WriteString(conn, req[at:cut]); err != nil {
			return "", err
		}
		at = cut
		if split {
			time.Sleep(20 * time.Millisecond)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// h2TrailerPost sends a POST as HEADERS, DATA and a trailing HEADERS with
// trailerFieldsSent over HTTP/2 (TLS, or h2c with prior knowledge) and
// returns the response body.
func h2TrailerPost(addr string, secure bool, path string) (string, error) {
	conn, err := dialTest(addr, secure, "h2")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return "", err
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	block := func(fields [][2]string) []byte {
		hb.Reset()
		for _, f := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: strings.ToLower(f[0]), Value: f[1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	if err := fr.WriteSettings(); err != nil {
		return "", err
	}
	head := block([][2]string{{":method", "POST"}, {":scheme", scheme}, {":authority", "a.example"}, {":path", path}, {"trailer", "x-checksum"}})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head, EndHeaders: true}); err != nil {
		return "", err
	}
	if err := fr.WriteData(1, false, []byte("hello")); err != nil {
		return "", err
	}
	tr := block(trailerFieldsSent)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: tr, EndHeaders: true, EndStream: true}); err != nil {
		return "", err
	}
	var body []byte
	status := ""
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "", err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" {
				status = s
			}
			if f.StreamEnded() {
				return "", fmt.Errorf("status %s without a body", status)
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				if status != "200" {
					return "", fmt.Errorf("status %s: %s", status, body)
				}
				return string(body), nil
			}
		case *http2.RSTStreamFrame:
			return "", fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return "", fmt.Errorf("GOAWAY: %v", f.ErrCode)
		}
	}
}

// trailerBodyH3 is a request body that fills its request's Trailer map
// when it ends, as an HTTP/3 codec's does.
type trailerBodyH3 struct {
	r       *strings.Reader
	trailer http.Header
}

func (b *trailerBodyH3) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		for _, f := range trailerFieldsSent {
			b.trailer[f[0]] = append(b.trailer[f[0]], f[1])
		}
	}
	return n, err
}

func (b *trailerBodyH3) Close() error { return nil }

// h3TrailerPost serves a POST with trailerFieldsSent through an H3Conn of
// s (the HTTP/3 codec hands requests over as net/http values).
func h3TrailerPost(s *Server, info ConnInfo, path string) (string, error) {
	info.TLS = true
	c := s.NewH3Conn(&info, netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:443"))
	defer c.Close()
	r := httptest.NewRequest("POST", "https://a.example"+path, nil)
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/3.0", 3, 0
	r.Header.Set("Trailer", "X-Checksum")
	r.Trailer = http.Header{}
	r.Body = &trailerBodyH3{r: strings.NewReader("hello"), trailer: r.Trailer}
	r.ContentLength = -1
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	if w.Code != 200 {
		return "", fmt.Errorf("status %d: %s", w.Code, w.Body)
	}
	return w.Body.String(), nil
}

// TestRequestTrailersFiltered: a request's trailer section carries on
// only fields of no kind the proxy acts on (trailerKept), from every
// client protocol (HTTP/1.1 cleartext and TLS, HTTP/2 over TLS, h2c,
// HTTP/3 as its codec hands requests over),
// through the fast path and the net/http path (RouteExt), to an HTTP/1.1
// member that records the trailer lines as they came and to an HTTP/2
// member (net/http's r.Trailer), from an untrusted and a trusted client
// on a listener with a client-certificate field: the member gets the body
// and X-Checksum, and none of the client-address, certificate, request-id,
// framing or routing fields the client put in its trailers.
func TestRequestTrailersFiltered(t *testing.T) {
	t.Parallel()
	h1m, h2m := tableMembers(t, trailerMember(t), http.HandlerFunc(trailerHandler))
	router := tableRoutes(h1m, h2m, nil)
	want := []string{"body: hello", "x-checksum: abc"}
	for _, trusted := range []bool{false, true} {
		cfg := Config{}
		if trusted {
			cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }}
		info.ClientCertHeader, info.ClientSubject = "X-Client-Subject", "CN=alice,O=acme"
		srv := New(cfg)
		clear := proxyUnderInfo(t, srv, info, nil)
		tlsInfo := info
		tlsInfo.TLS = true
		secure := proxyUnderInfo(t, New(cfg), tlsInfo, selfSigned(t))
		for _, path := range []string{"/fast/h1", "/fast/h2", "/ext/h1", "/ext/h2"} {
			for _, client := range []string{"h1", "h1 split", "h1 tls", "h2 tls", "h2c", "h3"} {
				name := fmt.Sprintf("%s %s trusted=%v", client, path, trusted)
				var body string
				var err error
				switch client {
				case "h1":
					body, err = h1TrailerPost(clear, false, false, path)
				case "h1 split":
					body, err = h1TrailerPost(clear, false, true, path)
				case "h1 tls":
					body, err = h1TrailerPost(secure, true, false, path)
				case "h2 tls":
					body, err = h2TrailerPost(secure, true, path)
				case "h2c":
					body, err = h2TrailerPost(clear, false, path)
				case "h3":
					body, err = h3TrailerPost(srv, info, path)
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				got := strings.Split(strings.TrimSpace(body), "\n")
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("%s: member received\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		}
	}
}

// pairBackend answers every second blank line it reads (the head's, then
// a chunked body's end) with resp, without allocating per request.
func pairBackend(t testing.TB, resp string) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		buf := make([]byte, 16<<10)
		out := []byte(resp)
		n, seen := 0, 0
		for {
			k, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += k
			for {
				i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if i < 0 {
					break
				}
				if seen++; seen%2 == 0 {
					if _, err := c.Write(out); err != nil {
						return
					}
				}
				n = copy(buf, buf[i+4:n])
			}
		}
	})
}

// TestChunkedTrailerAllocs: holding back a chunked request's trailer
// section on the fast path allocates nothing per request beyond what a
// chunked body without trailers costs (the held section's buffer is the
// connection's).
func TestChunkedTrailerAllocs(t *testing.T) {
	var allocs [2]float64
	for i, req := range []string{
		"POST /b HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST /b HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
	} {
		be := newBackend(t, pairBackend(t, rawResponse))
		addr := proxyUnder(t, New(Config{}), oneRoute(allocFree{be}), nil)
		rc := newRawClient(t, addr, req, len(rawResponse))
		for range 10 {
			rc.do(t)
		}
		allocs[i] = testing.AllocsPerRun(1000, func() { rc.do(t) })
	}
	t.Logf("allocations per chunked request: %.2f without trailers, %.2f with", allocs[0], allocs[1])
	if allocs[1] > allocs[0] {
		t.Errorf("%.2f allocations per request with trailers, %.2f without", allocs[1], allocs[0])
	}
}

// TestHeldTrailerCharged: the trailer section of a chunked request is
// charged to the tenant's CPU budget like the body bytes before it, on
// the fast path (which holds it back) and on the net/http path: eight
// requests on one connection, each a chunked body of no data with a
// trailer section of 60,000 bytes (480,000 bytes, 7 units of
// 1<<WorkBytesShift), count at least 7 units beyond what the same
// requests count without their trailers.
func TestHeldTrailerCharged(t *testing.T) {
	t.Parallel()
	member := rawServer(t, func(c net.Conn) {
		br := bufio.NewReaderSize(c, 4096)
		blanks := 0
		for {
			l, err := br.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				continue // a long trailer line
			}
			if err != nil {
				return
			}
			if string(l) != "\r\n" {
				continue
			}
			if blanks++; blanks%2 == 0 {
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
					return
				}
			}
		}
	})
	be := newBackend(t, member)
	router := testRouter{
		{prefix: "/fast", route: &Route{Name: "fast", Backend: be}},
		{prefix: "/ext", route: &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}}}}},
	}
	units := func(path, trailer string) int64 {
		cpu := &unitCount{}
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, CPU: cpu}
		addr := proxyUnderInfo(t, New(Config{}), info, nil)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(conn)
		for i := range 8 {
			req := "POST " + path + " HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + trailer + "\r\n"
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: status %d", i, resp.StatusCode)
			}
		}
		conn.Close()
		return cpu.n.Load()
	}
	pad := "X-Pad: " + strings.Repeat("p", 60000-len("X-Pad: \r\n")) + "\r\n"
	for _, path := range []string{"/fast", "/ext"} {
		bare := units(path, "")
		held := units(path, pad)
		if held-bare < 7 {
			t.Errorf("%s: with 60,000-byte trailer sections: %d units, without: %d; want at least 7 more", path, held, bare)
		}
	}
}

// TestEmptyTrailerSplitAtFinalLF: a chunked body without trailer fields
// whose final CRLF is split between two reads ("0\r\n\r", then "\n" with
// the next request right after it) reaches the member whole on the fast
// path, and the next request on the connection is served.
func TestEmptyTrailerSplitAtFinalLF(t *testing.T) {
	t.Parallel()
	member := newBackend(t, pairBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	addr := proxyUnder(t, New(Config{}), oneRoute(member), nil)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := "POST /s HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	first, rest := req[:len(req)-1], req[len(req)-1:]+req
	if _, err := io.WriteString(conn, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := io.WriteString(conn, rest); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("response %d: %d %q", i, resp.StatusCode, b)
		}
	}
}

// TestResponseTrailerSplitBetweenReads: an HTTP/1.1 member whose trailer
// section arrives in several reads (a gRPC member flushing grpc-status
// before grpc-message) has every field of it reach the client, on the
// HTTP/1.1 and the HTTP/2 fast paths.
func TestResponseTrailerSplitBetweenReads(t *testing.T) {
	t.Parallel()
	parts := []string{
		"HTTP/1.1 200 OK\r\nTrailer: Grpc-Status, Grpc-Message, X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n",
		"Grpc-Status: 0\r\n",
		"Grpc-Mess",
		"age: ok\r\nX-Sum: 1\r\n",
		"\r\n",
	}
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
			for _, p := range parts {
				if _, err := io.WriteString(c, p); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // each part a read of its own
			}
		}
	})
	router := testRouter{{prefix: "/", route: &Route{Name: "fast", Backend: newBackend(t, member)}}}
	addr := proxyUnder(t, New(Config{}), router, nil)
	want := map[string]string{"Grpc-Status": "0", "Grpc-Message": "ok", "X-Sum": "1"}

	// HTTP/1.1 client: the held trailer section.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "body" {
		t.Fatalf("h1: body %q, %v", b, err)
	}
	for k, v := range want {
		if got := resp.Trailer.Get(k); got != v {
			t.Errorf("h1: trailer %s %q, want %q (trailers %v)", k, got, v, resp.Trailer)
		}
	}

	// HTTP/2 client: the fast path's trailer HEADERS.
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Host = "a.example"
	resp, err = h2cTestClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "body" {
		t.Fatalf("h2: body %q, %v", b, err)
	}
	for k, v := range want {
		if got := resp.Trailer.Get(k); got != v {
			t.Errorf("h2: trailer %s %q, want %q (trailers %v)", k, got, v, resp.Trailer)
		}
	}
}

// TestH2FastResponseTrailerCharged: the trailer section of an HTTP/1.1
// member's response that the HTTP/2 fast path reads and parses counts
// toward the tenant's CPU budget like the body bytes it relays, also when
// none of its fields reaches the client (the member's Connection field
// names them): eight responses with 60,000-byte sections charge at least
// 7 units more than eight without.
func TestH2FastResponseTrailerCharged(t *testing.T) {
	t.Parallel()
	units := func(trailer string) int64 {
		member := repliesMember(t, "HTTP/1.1 200 OK\r\nConnection: X-Pad\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"+trailer+"\r\n")
		router := testRouter{{prefix: "/", route: &Route{Name: "fast", Backend: newBackend(t, member)}}}
		cpu := &unitCount{}
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, CPU: cpu}
		addr := proxyUnderInfo(t, New(Config{}), info, nil)
		client := h2cTestClient()
		client.Timeout = 20 * time.Second
		defer client.CloseIdleConnections()
		for i := range 8 {
			req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
			req.Host = "a.example"
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "ok" || len(resp.Trailer) != 0 {
				t.Fatalf("request %d: body %q, trailers %v, %v", i, b, resp.Trailer, err)
			}
		}
		client.CloseIdleConnections()
		return cpu.n.Load()
	}
	pad := "X-Pad: " + strings.Repeat("p", 60000-len("X-Pad: \r\n")) + "\r\n"
	bare := units("")
	held := units(pad)
	if held-bare < 7 {
		t.Errorf("with 60,000-byte trailer sections: %d units, without: %d; want at least 7 more", held, bare)
	}
}

// TestInterimResponsesCharged: the interim (1xx) responses a member
// sends before its final one count toward the tenant's CPU budget like
// body bytes, relayed (HTTP/1.1 fast path) or read and skipped (HTTP/2
// fast path): 160 3,000-byte 103 heads charge at least 7 units.
func TestInterimResponsesCharged(t *testing.T) {
	t.Parallel()
	interim := strings.Repeat("HTTP/1.1 103 Early Hints\r\nX-Pad: "+strings.Repeat("p", 3000)+"\r\n\r\n", 160)
	units := func(h2 bool, interim string) int64 {
		member := repliesMember(t, interim+"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		router := testRouter{{prefix: "/", route: &Route{Name: "fast", Backend: newBackend(t, member)}}}
		cpu := &unitCount{}
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, CPU: cpu}
		addr := proxyUnderInfo(t, New(Config{}), info, nil)
		if h2 {
			client := h2cTestClient()
			client.Timeout = 20 * time.Second
			defer client.CloseIdleConnections()
			req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
			req.Host = "a.example"
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("h2: %d %q", resp.StatusCode, b)
			}
			client.CloseIdleConnections()
		} else {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(conn)
			if !bytes.HasSuffix(b, []byte("\r\n\r\nok")) || bytes.Count(b, []byte(" 103 ")) != strings.Count(interim, " 103 ") {
				t.Fatalf("h1: %d bytes, %d interim responses: %.200q", len(b), bytes.Count(b, []byte(" 103 ")), b)
			}
		}
		return cpu.n.Load()
	}
	for _, h2 := range []bool{false, true} {
		bare, with := units(h2, ""), units(h2, interim)
		if with-bare < 7 {
			t.Errorf("h2 %v: with 160 3,000-byte interim responses: %d units, without: %d; want at least 7 more", h2, with, bare)
		}
	}
}

// TestExtResponseTrailerCharged: the trailer section of an HTTP/1.1
// member's response read through net/http (a route with RouteExt) counts
// toward the tenant's CPU budget, also when none of its fields reaches
// the client: eight responses with 60,000-byte sections charge at least
// 7 units more than eight without, to an HTTP/1.1 and an HTTP/2 client.
func TestExtResponseTrailerCharged(t *testing.T) {
	t.Parallel()
	units := func(h2 bool, trailer string) int64 {
		member := repliesMember(t, "HTTP/1.1 200 OK\r\nConnection: X-Pad\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"+trailer+"\r\n")
		be := newBackend(t, member)
		router := testRouter{{prefix: "/", route: &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}}}}}}
		cpu := &unitCount{}
		info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, CPU: cpu}
		addr := proxyUnderInfo(t, New(Config{}), info, nil)
		if h2 {
			client := h2cTestClient()
			client.Timeout = 20 * time.Second
			defer client.CloseIdleConnections()
			for i := range 8 {
				req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
				req.Host = "a.example"
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "ok" || len(resp.Trailer) != 0 {
					t.Fatalf("request %d: body %q, trailers %v", i, b, resp.Trailer)
				}
			}
			client.CloseIdleConnections()
			return cpu.n.Load()
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(conn)
		for i := range 8 {
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" || len(resp.Trailer) != 0 {
				t.Fatalf("request %d: body %q, trailers %v", i, b, resp.Trailer)
			}
		}
		conn.Close()
		return cpu.n.Load()
	}
	pad := "X-Pad: " + strings.Repeat("p", 60000-len("X-Pad: \r\n")) + "\r\n"
	for _, h2 := range []bool{false, true} {
		bare := units(h2, "")
		held := units(h2, pad)
		if held-bare < 7 {
			t.Errorf("h2 %v: with 60,000-byte trailer sections: %d units, without: %d; want at least 7 more", h2, held, bare)
		}
	}
}
