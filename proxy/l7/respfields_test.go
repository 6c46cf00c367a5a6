package l7

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// respCase is a member response of TestResponseFieldsAcrossProtocols:
// the fields and trailers every member sends, the ones only an HTTP/1.1
// member can send (HTTP/2 forbids connection-specific fields, and Go's
// HTTP/2 server drops them), the Trailer field's value, and what the
// client must (want) and must not (deny, substrings) receive.
type respCase struct {
	name               string
	fields, h1Only     [][2]string
	trailers, h1Trails [][2]string
	// announce is the Trailer field's value; h1Announce is added to it
	// by the HTTP/1.1 member.
	announce, h1Announce string
	// h1Member: only an HTTP/1.1 member can send this response; status
	// is what the client gets (0: 200).
	h1Member bool
	status   int
	want     []string
	deny     []string
}

var respCases = []respCase{{
	name:   "hop-by-hop",
	fields: [][2]string{{"X-App", "1"}, {"X-Drop", "d"}},
	h1Only: [][2]string{{"Connection", "keep-alive, X-Secret"}, {"X-Secret", "s"}, {"Keep-Alive", "timeout=5"},
		{"Proxy-Connection", "keep-alive"}, {"Upgrade", "h2c"}, {"TE", "trailers"}, {"HTTP2-Settings", "AAAA"},
		{"Proxy-Authenticate", "Basic realm=lb"}},
	want: []string{"x-app: 1"},
	deny: []string{"x-secret", "keep-alive", "proxy-", "upgrade", "te:", "http2-settings", "realm=lb"},
}, {
	// The listener sets its own Alt-Svc: the member's is dropped.
	name:   "alt-svc",
	fields: [][2]string{{"Alt-Svc", `h2="other.example:443"`}, {"Server", "member"}},
	want:   []string{`alt-svc: h3=":443"; ma=60`, "server: member"},
	deny:   []string{"other.example"},
}, {
	// Trailers: what RFC 9110 section 6.5.1 bars, hop-by-hop and framing
	// fields, forwarding fields and the fields the head's Connection
	// field names do not pass; the Trailer field names what is left.
	name:       "trailers",
	fields:     [][2]string{{"X-App", "1"}},
	h1Only:     [][2]string{{"Connection", "X-Hop"}},
	announce:   "X-Checksum, Set-Cookie, Grpc-Status",
	h1Announce: ", X-Hop",
	trailers: [][2]string{{"X-Checksum", "abc"}, {"Grpc-Status", "0"}, {"Set-Cookie", "sid=1"},
		{"X-Forwarded-For", "6.6.6.6"}, {"X-Request-Id", "member-id"}, {"Vary", "x"}, {"Location", "/evil"},
		{"Date", "Mon, 30 Nov 2026 00:00:00 GMT"}},
	h1Trails: [][2]string{{"Content-Encoding", "gzip"}, {"X-Hop", "h"}, {"Content-Length", "1"}, {"Transfer-Encoding", "chunked"},
		{"Connection", "close"}, {"Host", "evil.example"}, {"Authorization", "Basic eDp5"}, {"Cache-Control", "no-store"},
		{"Trailer", "X-More"}, {"Content-Type", "text/evil"}},
	want: []string{"trailer x-checksum: abc", "trailer grpc-status: 0", "announce: x-checksum", "announce: grpc-status"},
	deny: []string{"sid=1", "6.6.6.6", "member-id", "/evil", "gzip", "evil", "x-hop", "ex8", "no-store", "x-more",
		"announce: set-cookie", "trailer vary", "trailer date"},
}, {
	// A Connection list the request side would take is taken.
	name:     "64 connection tokens",
	h1Member: true,
	fields:   [][2]string{{"X-App", "1"}},
	h1Only:   [][2]string{{"Connection", strings.Repeat("X-L, ", 63) + "X-Secret"}, {"X-Secret", "s"}},
	want:     []string{"x-app: 1"},
	deny:     []string{"x-secret", "x-l"},
}, {
	// Past the request side's bound the response is broken: 502.
	name:     "65 connection tokens",
	h1Member: true,
	fields:   [][2]string{{"X-App", "1"}},
	h1Only:   [][2]string{{"Connection", strings.Repeat("X-L, ", 64) + "X-Secret"}},
	status:   502,
}}

// respCaseMember is an HTTP/1.1 member that answers a request for
// .../<case> with respCases' <case>, in a chunked body "body".
func respCaseMember(t testing.TB) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			for {
				h, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if h == "\r\n" {
					break
				}
			}
			rc := findRespCase(strings.Fields(l)[1])
			var b strings.Builder
			b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
			for _, f := range append(slices.Clone(rc.fields), rc.h1Only...) {
				b.WriteString(f[0] + ": " + f[1] + "\r\n")
			}
			if rc.announce != "" {
				b.WriteString("Trailer: " + rc.announce + rc.h1Announce + "\r\n")
			}
			b.WriteString("Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n")
			for _, f := range append(slices.Clone(rc.trailers), rc.h1Trails...) {
				b.WriteString(f[0] + ": " + f[1] + "\r\n")
			}
			b.WriteString("\r\n")
			if _, err := io.WriteString(c, b.String()); err != nil {
				return
			}
		}
	})
}

// respCaseHandler answers as respCaseMember does, through net/http (an
// HTTP/2 member).
func respCaseHandler(w http.ResponseWriter, r *http.Request) {
	rc := findRespCase(r.URL.Path)
	h := w.Header()
	h["Date"] = nil
	h.Set("Content-Type", "text/plain")
	for _, f := range rc.fields {
		h.Add(f[0], f[1])
	}
	if rc.announce != "" {
		h.Set("Trailer", rc.announce)
	}
	_, _ = io.WriteString(w, "body")
	for _, f := range rc.trailers {
		h.Add(http.TrailerPrefix+f[0], f[1])
	}
}

func findRespCase(p string) respCase {
	name := path.Base(p)
	for _, rc := range respCases {
		if strings.ReplaceAll(rc.name, " ", "-") == name {
			return rc
		}
	}
	return respCase{name: "unknown"}
}

// readRawResponse reads an HTTP/1.1 response as it came: its status, its
// head's fields ("name: value", name in lower case; each name a Trailer
// field lists as "announce: name"), its body and its trailers ("trailer
// name: value").
func readRawResponse(br *bufio.Reader) (int, []string, string, error) {
	l, err := br.ReadString('\n')
	if err != nil {
		return 0, nil, "", err
	}
	parts := strings.Fields(l)
	if len(parts) < 2 {
		return 0, nil, "", fmt.Errorf("status line %q", l)
	}
	status, _ := strconv.Atoi(parts[1])
	var lines []string
	chunked, length := false, -1
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return 0, nil, "", err
		}
		l = strings.TrimRight(l, "\r\n")
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		k, v = strings.ToLower(k), strings.TrimSpace(v)
		switch k {
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		case "content-length":
			length, _ = strconv.Atoi(v)
		case "trailer":
			for _, n := range strings.Split(v, ",") {
				lines = append(lines, "announce: "+strings.ToLower(strings.TrimSpace(n)))
			}
			continue
		}
		lines = append(lines, k+": "+v)
	}
	var body strings.Builder
	switch {
	case chunked:
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return 0, nil, "", err
			}
			size, err := strconv.ParseInt(strings.TrimRight(l, "\r\n"), 16, 64)
			if err != nil {
				return 0, nil, "", err
			}
			if size == 0 {
				break
			}
			if _, err := io.CopyN(&body, br, size+2); err != nil {
				return 0, nil, "", err
			}
		}
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return 0, nil, "", err
			}
			if l = strings.TrimRight(l, "\r\n"); l == "" {
				break
			}
			k, v, _ := strings.Cut(l, ":")
			lines = append(lines, "trailer "+strings.ToLower(k)+": "+strings.TrimSpace(v))
		}
		return status, lines, strings.ReplaceAll(body.String(), "\r\n", ""), nil
	case length >= 0:
		_, err = io.CopyN(&body, br, int64(length))
	}
	return status, lines, body.String(), err
}

// normResp sorts what a client received and leaves out what each
// protocol frames its own way (the body's length and framing).
func normResp(lines []string) []string {
	out := []string{}
	for _, l := range lines {
		switch k, _, _ := strings.Cut(l, ":"); k {
		case "content-length", "transfer-encoding":
			continue
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// TestResponseFieldsAcrossProtocols has the same member responses relayed
// to clients over HTTP/1.1 (cleartext and TLS), HTTP/2 over TLS and h2c,
// each through the fast path and through the net/http path (a route with
// RouteExt that also edits the response's fields), from an HTTP/1.1 and
// an HTTP/2 member: the client must receive the same fields and trailers
// every way (beyond the route's edits), and what each case wants.
func TestResponseFieldsAcrossProtocols(t *testing.T) {
	t.Parallel()
	h1m, h2m := tableMembers(t, respCaseMember(t), http.HandlerFunc(respCaseHandler))
	router := tableRoutes(h1m, h2m, &HeaderEdit{Set: []HeaderField{{Name: "X-Edited", Value: "yes"}}, Remove: []string{"X-Drop"}})
	info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, AltSvc: `h3=":443"; ma=60`}
	clearStats, secureStats := &statsRecorder{}, &statsRecorder{}
	clear := proxyUnderInfo(t, New(Config{Metrics: clearStats}), info, nil)
	tlsInfo := info
	tlsInfo.TLS = true
	secure := proxyUnderInfo(t, New(Config{Metrics: secureStats}), tlsInfo, selfSigned(t))

	h1 := func(addr string, secure bool, p string) (int, []string, error) {
		conn, err := dialTest(addr, secure, "http/1.1")
		if err != nil {
			return 0, nil, err
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET "+p+" HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
			return 0, nil, err
		}
		status, lines, body, err := readRawResponse(bufio.NewReader(conn))
		if err == nil && status == 200 && body != "body" {
			err = fmt.Errorf("body %q", body)
		}
		return status, lines, err
	}
	h2tls, h2c := h2TestClient(), h2cTestClient()
	h2 := func(client *http.Client, url string) (int, []string, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = "a.example"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.Do(req.WithContext(ctx))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			return 0, nil, fmt.Errorf("protocol %s", resp.Proto)
		}
		var lines []string
		for k, vv := range resp.Header {
			for _, v := range vv {
				lines = append(lines, strings.ToLower(k)+": "+v)
			}
		}
		for k := range resp.Trailer {
			lines = append(lines, "announce: "+strings.ToLower(k))
		}
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode == 200 && string(b) != "body" {
			err = fmt.Errorf("body %q", b)
		}
		for k, vv := range resp.Trailer {
			for _, v := range vv {
				lines = append(lines, "trailer "+strings.ToLower(k)+": "+v)
			}
		}
		return resp.StatusCode, lines, err
	}

	for _, rc := range respCases {
		t.Run(rc.name, func(t *testing.T) {
			want := rc.status
			if want == 0 {
				want = 200
			}
			var ref []string
			var refName string
			for _, route := range []string{"/fast/h1", "/fast/h2", "/ext/h1", "/ext/h2"} {
				if rc.h1Member && strings.HasSuffix(route, "h2") {
					continue
				}
				p := route + "/" + strings.ReplaceAll(rc.name, " ", "-")
				for _, client := range []string{"h1", "h1 tls", "h2 tls", "h2c"} {
					rec := clearStats
					if strings.Contains(client, "tls") {
						rec = secureStats
					}
					seen := rec.count()
					var status int
					var lines []string
					var err error
					switch client {
					case "h1":
						status, lines, err = h1(clear, false, p)
					case "h1 tls":
						status, lines, err = h1(secure, true, p)
					case "h2 tls":
						status, lines, err = h2(h2tls, "https://"+secure+p)
					case "h2c":
						status, lines, err = h2(h2c, "http://"+clear+p)
					}
					name := client + " " + route
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					s := rec.after(t, seen)
					if status != want || s.Status != want {
						t.Fatalf("%s: status %d, access log %d, want %d", name, status, s.Status, want)
					}
					if want != 200 {
						if s.Outcome != OutcomeUpstreamError {
							t.Errorf("%s: access log outcome %v", name, s.Outcome)
						}
						continue
					}
					got := normResp(lines)
					// The route's edits, on the ext routes alone.
					if strings.HasPrefix(route, "/ext") {
						if !slices.Contains(got, "x-edited: yes") || slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, "x-drop:") }) {
							t.Errorf("%s: the route's edits were not applied:\n%s", name, strings.Join(got, "\n"))
						}
						got = slices.DeleteFunc(got, func(l string) bool { return l == "x-edited: yes" })
					} else {
						got = slices.DeleteFunc(got, func(l string) bool { return strings.HasPrefix(l, "x-drop:") })
					}
					joined := strings.ToLower(strings.Join(got, "\n"))
					for _, w := range rc.want {
						if !slices.Contains(got, w) {
							t.Errorf("%s: client did not receive %q:\n%s", name, w, joined)
						}
					}
					for _, d := range rc.deny {
						if strings.Contains(joined, strings.ToLower(d)) {
							t.Errorf("%s: client received %q:\n%s", name, d, joined)
						}
					}
					if n := strings.Count(joined, "alt-svc:"); n != 1 {
						t.Errorf("%s: %d Alt-Svc fields:\n%s", name, n, joined)
					}
					if ref == nil {
						ref, refName = got, name
						continue
					}
					if !slices.Equal(got, ref) {
						t.Errorf("%s differs from %s:\n%s", name, refName, lineDiff(ref, got))
					}
				}
			}
		})
	}
}

// TestRewrittenResponseAllocs: a member response the HTTP/1.1 fast path
// rewrites (hop-by-hop and Connection-named fields, the member's Alt-Svc
// beside the listener's, a Trailer field naming a barred trailer, a
// trailer section to filter) costs no allocation, and the client gets it
// as responseFields and trailerKept decide.
func TestRewrittenResponseAllocs(t *testing.T) {
	resp := "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-App: a\r\n" +
		"Alt-Svc: h2=\"other.example:443\"\r\nTrailer: X-Sum, Set-Cookie\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5\r\nhello\r\n0\r\nX-Sum: 1\r\nSet-Cookie: a=1\r\nX-Hop: 2\r\n\r\n"
	want := "HTTP/1.1 200 OK\r\nX-App: a\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\nAlt-Svc: h3=\":443\"\r\n\r\n" +
		"5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"
	be := newBackend(t, rawBackend(t, resp))
	var router Router = oneRoute(allocFree{be})
	info := ConnInfo{Router: func() Router { return router }, AltSvc: `h3=":443"`}
	addr := proxyUnderInfo(t, New(Config{}), info, nil)
	rc := newRawClient(t, addr, benchRequest, len(want))
	for range 10 {
		rc.do(t)
	}
	if got := string(rc.buf[:len(want)]); got != want {
		t.Fatalf("client got %q, want %q", got, want)
	}
	if allocs := testing.AllocsPerRun(1000, func() { rc.do(t) }); allocs > 0 {
		t.Errorf("%.2f allocations per rewritten response, want 0", allocs)
	}
}

// TestTransportResponseConnectionBound: a response that net/http's own
// transport reads (that of an HTTP/1.1 member with PROXY protocol on the
// net/http path) keeps its Connection field in its values: the fields and trailers it names are
// dropped, and past maxConnTokens elements the response is a broken one
// (502), as the HTTP/1.x parser makes it on the other paths.
func TestTransportResponseConnectionBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tokens int
		status int
	}{{64, 200}, {65, 502}} {
		resp := "HTTP/1.1 200 OK\r\nConnection: " + strings.Repeat("X-L, ", tc.tokens-1) + "X-Secret\r\nX-Secret: s\r\n" +
			"X-App: a\r\nTrailer: X-Sum, X-Secret\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\nX-Sum: 1\r\nX-Secret: t\r\n\r\n"
		member := repliesMember(t, resp)
		be := newBackend(t, member)
		be.opts.ProxyProtocol = 1
		// The route's RouteExt takes the request to net/http.
		router := testRouter{{prefix: "/", route: &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}}}}}}
		addr := proxyUnder(t, New(Config{}), router, nil)
		conn, err := dialTest(addr, false, "")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		status, lines, _, err := readRawResponse(bufio.NewReader(conn))
		if err != nil || status != tc.status {
			t.Fatalf("%d tokens: status %d, %v", tc.tokens, status, err)
		}
		if status != 200 {
			continue
		}
		got := strings.Join(normResp(lines), "\n")
		for _, w := range []string{"x-app: a", "announce: x-sum", "trailer x-sum: 1"} {
			if !strings.Contains(got, w) {
				t.Errorf("%d tokens: client did not receive %q:\n%s", tc.tokens, w, got)
			}
		}
		if strings.Contains(got, "x-secret") || strings.Contains(got, "x-l") {
			t.Errorf("%d tokens: client received a field the Connection field names:\n%s", tc.tokens, got)
		}
	}
}

// TestResponseFieldsViews gives responseFields one member head as each
// codec presents it (HTTP/1.x offsets, decoded HTTP/2 fields with the
// connection-specific ones a malformed HTTP/2 response carries, net/http
// values) and wants the same fields from each.
func TestResponseFieldsViews(t *testing.T) {
	fields := [][2]string{
		{"Content-Type", "text/plain"}, {"Connection", "X-Hop, close"}, {"X-Hop", "1"}, {"Keep-Alive", "timeout=5"},
		{"Proxy-Connection", "keep-alive"}, {"Upgrade", "h2c"}, {"TE", "trailers"}, {"HTTP2-Settings", "AAAA"},
		{"Proxy-Authenticate", "Basic"}, {"Alt-Svc", `h2=":8443"`}, {"Trailer", "X-Sum, Set-Cookie, X-Hop"},
		{"X-App", "a"}, {"Set-Cookie", "sid=1"},
	}
	want := "alt-svc: h3=\":443\"\ncontent-type: text/plain\nset-cookie: sid=1\ntrailer: X-Sum\nx-app: a"
	viewsGive(t, fields, want)
}

// TestConnectionNamedTrailerField: a Trailer field the member's
// Connection field names is hop-by-hop and does not reach the client,
// also when it names trailers trailerKept drops (the field would be
// rewritten) — in every view.
func TestConnectionNamedTrailerField(t *testing.T) {
	for _, tr := range []string{"X-Sum", "X-Sum, Set-Cookie"} {
		viewsGive(t, [][2]string{{"Connection", "Trailer"}, {"Trailer", tr}, {"X-App", "a"}}, "x-app: a")
	}
}

// viewsGive gives responseFields the member head fields in each view
// (HTTP/1.x offsets, decoded HTTP/2 fields, net/http values) and wants
// the client's fields (lower-case names, sorted, Content-Length left
// out) to be want in each, with the listener's Alt-Svc h3=":443" when
// want holds an Alt-Svc.
func viewsGive(t *testing.T, fields [][2]string, want string) {
	t.Helper()
	altSvc := ""
	if strings.Contains(want, "alt-svc:") {
		altSvc = `h3=":443"`
	}
	head := "HTTP/1.1 200 OK\r\n"
	h2 := []hpack.HeaderField{{Name: ":status", Value: "200"}}
	hdr := http.Header{}
	for _, f := range fields {
		head += f[0] + ": " + f[1] + "\r\n"
		h2 = append(h2, hpack.HeaderField{Name: strings.ToLower(f[0]), Value: f[1]})
		hdr.Add(f[0], f[1])
	}
	head += "Content-Length: 0\r\n\r\n"
	var rh respHead
	rh.reset()
	if done, ok := rh.parse([]byte(head), 4096); !done || !ok {
		t.Fatal("head does not parse")
	}
	for name, v := range map[string]fieldsView{
		"http1":  {h1b: []byte(head), h1: &rh.headLines},
		"http2":  {h2: h2},
		"values": {hdr: hdr},
	} {
		out := http.Header{}
		var rs respScratch
		if !responseFields(&v, altSvc, false, headerSink{out}, &rs) {
			t.Fatalf("%s: refused", name)
		}
		var lines []string
		for k, vv := range out {
			if strings.EqualFold(k, "content-length") {
				continue
			}
			for _, x := range vv {
				lines = append(lines, strings.ToLower(k)+": "+x)
			}
		}
		slices.Sort(lines)
		if got := strings.Join(lines, "\n"); got != want {
			t.Errorf("%s: client gets\n%s\nwant\n%s", name, got, want)
		}
	}
}

// BenchmarkRewrittenResponseHead makes the head the HTTP/1.1 fast path
// relays for a member head it must change (Connection and Keep-Alive to
// drop): responseFields through h1Sink.
func BenchmarkRewrittenResponseHead(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: keep-alive\r\n" +
		"Keep-Alive: timeout=5\r\nX-App: a\r\nDate: Mon, 30 Nov 2026 00:00:00 GMT\r\nServer: m\r\n\r\n")
	var h respHead
	h.reset()
	if done, ok := h.parse(head, 4096); !done || !ok {
		b.Fatal("head does not parse")
	}
	c := clientConn{info: &ConnInfo{}}
	for b.Loop() {
		c.appendResponseHead(head, &h, "", false)
	}
}

// TestH2MemberConnectionBound: an HTTP/2 member's response whose
// Connection fields (malformed in HTTP/2, read as an HTTP/1.1 member's)
// have more than maxConnTokens elements is a broken response (502) on
// the HTTP/2 fast path too, as on the others; within the bound, the
// fields and trailers they name do not reach the client, in the head nor
// in the trailer section.
func TestH2MemberConnectionBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tokens int
		status int
	}{{64, 200}, {65, 502}} {
		member := rawH2Responder(t, [][2]string{{":status", "200"}, {"connection", strings.Repeat("x-l, ", tc.tokens-1) + "x-secret"},
			{"x-secret", "s"}, {"x-app", "a"}, {"trailer", "x-sum, x-secret"}}, [][2]string{{"x-sum", "1"}, {"x-secret", "t"}})
		be := newBackend(t, member)
		be.opts.Protocol = H2C
		addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Host = "a.example"
		resp, err := h2cTestClient().Do(req)
		if err != nil {
			t.Fatalf("%d tokens: %v", tc.tokens, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status {
			t.Fatalf("%d tokens: status %d, %v", tc.tokens, resp.StatusCode, err)
		}
		if tc.status != 200 {
			continue
		}
		if string(b) != "body" || resp.Header.Get("X-App") != "a" || resp.Trailer.Get("X-Sum") != "1" {
			t.Errorf("%d tokens: body %q, head %v, trailers %v", tc.tokens, b, resp.Header, resp.Trailer)
		}
		if resp.Header.Get("X-Secret") != "" || resp.Trailer.Get("X-Secret") != "" {
			t.Errorf("%d tokens: the client received a field the Connection field names: head %v, trailers %v", tc.tokens, resp.Header, resp.Trailer)
		}
	}
}

// TestInterimResponseFields: an interim response (103 Early Hints) the
// HTTP/1.1 fast path relays carries the fields responseFields lets
// through, as the final response does: not the hop-by-hop ones, those
// the member's Connection field names, Proxy-Authenticate, nor the
// member's Alt-Svc beside the listener's; its other fields go on.
func TestInterimResponseFields(t *testing.T) {
	t.Parallel()
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
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\n"+
				"Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nUpgrade: h2c\r\nAlt-Svc: h2=\"evil:443\"\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	router := testRouter{{prefix: "/", route: &Route{Name: "fast", Backend: newBackend(t, member)}}}
	info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, AltSvc: `h3=":443"`}
	addr := proxyUnderInfo(t, New(Config{}), info, nil)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var interim []string
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
		interim = append(interim, strings.ToLower(strings.TrimSuffix(l, "\r\n")))
	}
	if len(interim) == 0 || !strings.HasPrefix(interim[0], "http/1.1 103") {
		t.Fatalf("interim response %q", interim)
	}
	got := strings.Join(interim[1:], "\n")
	if !strings.Contains(got, "link: </s.css>; rel=preload") {
		t.Errorf("the interim response lost its Link field:\n%s", got)
	}
	for _, d := range []string{"connection:", "x-hop:", "keep-alive:", "proxy-authenticate:", "upgrade:", "evil"} {
		if strings.Contains(got, d) {
			t.Errorf("the interim response carries %q:\n%s", d, got)
		}
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("final response %d %q", resp.StatusCode, b)
	}
}

// TestNoContentFraming: a member's 204 carrying Content-Length or
// Transfer-Encoding, which a server must not send with it (RFC 9112
// section 6.1, RFC 9110 section 8.6), reaches an HTTP/1.1 client
// without them, on the fast path and through net/http: a client that
// reads them as framing would take the next response for this one's
// content. The next response on the connection is served.
func TestNoContentFraming(t *testing.T) {
	t.Parallel()
	member := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			var framing string
			switch {
			case strings.Contains(l, "/cl"):
				framing = "Content-Length: 5\r\n"
			case strings.Contains(l, "/te"):
				framing = "Transfer-Encoding: chunked\r\n"
			}
			for l != "\r\n" {
				if l, err = br.ReadString('\n'); err != nil {
					return
				}
			}
			if _, err := io.WriteString(c, "HTTP/1.1 204 No Content\r\nX-App: a\r\n"+framing+"\r\n"); err != nil {
				return
			}
		}
	})
	be := newBackend(t, member)
	router := testRouter{
		{prefix: "/fast", route: &Route{Name: "fast", Backend: be}},
		{prefix: "/ext", route: &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}}}}},
	}
	addr := proxyUnder(t, New(Config{}), router, nil)
	for _, p := range []string{"/fast/cl", "/fast/te", "/ext/cl", "/ext/te"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		for i := range 2 {
			if _, err := io.WriteString(conn, "GET "+p+" HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			var head []string
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("%s request %d: %v (head so far %q)", p, i, err, head)
				}
				if l == "\r\n" {
					break
				}
				head = append(head, strings.ToLower(strings.TrimSuffix(l, "\r\n")))
			}
			got := strings.Join(head, "\n")
			if !strings.HasPrefix(got, "http/1.1 204") || !strings.Contains(got, "x-app: a") {
				t.Fatalf("%s request %d: head\n%s", p, i, got)
			}
			if strings.Contains(got, "transfer-encoding") || (strings.Contains(got, "content-length") && !strings.Contains(got, "content-length: 0")) {
				t.Errorf("%s request %d: framing in a 204:\n%s", p, i, got)
			}
		}
		conn.Close()
	}
}

// TestH2MemberTrailerPseudoField: an HTTP/2 member's trailer section
// with a pseudo-field is malformed (RFC 9113 section 8.1): the response
// is a broken one the client sees cut short (its stream reset), not one
// relayed whole without the field.
func TestH2MemberTrailerPseudoField(t *testing.T) {
	t.Parallel()
	member := rawH2Responder(t, [][2]string{{":status", "200"}}, [][2]string{{":status", "500"}, {"grpc-status", "0"}})
	be := newBackend(t, member)
	be.opts.Protocol = H2C
	addr := proxyUnder(t, New(Config{}), oneRoute(be), nil)
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Host = "a.example"
	resp, err := h2cTestClient().Do(req)
	if err != nil {
		return // refused before the head: also not relayed whole
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("the response was relayed whole: %d %q, trailers %v", resp.StatusCode, b, resp.Trailer)
	}
}

// rawH2Responder is an HTTP/2 member that answers every request with the
// head fields given, the body "body" and the trailer fields given, each
// field as it is (pseudo-fields and connection-specific ones too).
func rawH2Responder(t *testing.T, head, trailer [][2]string) string {
	t.Helper()
	block := func(enc *hpack.Encoder, hb *bytes.Buffer, fields [][2]string) []byte {
		hb.Reset()
		for _, hf := range fields {
			enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		return hb.Bytes()
	}
	return rawH2Streams(t, func(_ int, fr *http2.Framer) func(*http2.MetaHeadersFrame) error {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		return func(f *http2.MetaHeadersFrame) error {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block(enc, &hb, head), EndHeaders: true}); err != nil {
				return err
			}
			if err := fr.WriteData(f.StreamID, false, []byte("body")); err != nil {
				return err
			}
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block(enc, &hb, trailer), EndHeaders: true, EndStream: true})
		}
	})
}

// repliesMember is a raw HTTP/1.1 member that writes resp after each
// request head it reads (requests without a body).
func repliesMember(t *testing.T, resp string) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if l == "\r\n" {
				if _, err := io.WriteString(c, resp); err != nil {
					return
				}
			}
		}
	})
}
