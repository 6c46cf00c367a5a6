package l7

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawFieldsMember is an HTTP/1.1 member that answers each request with
// the header lines it received, as "name: value" (name in lower case),
// one a line, in the order they came.
func rawFieldsMember(t testing.TB) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, err := br.ReadString('\n'); err != nil { // request line
				return
			}
			var lines []string
			length := 0
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
				k, v = strings.ToLower(k), strings.TrimSpace(v)
				if k == "content-length" {
					length, _ = strconv.Atoi(v)
				}
				lines = append(lines, k+": "+v)
			}
			if _, err := io.CopyN(io.Discard, br, int64(length)); err != nil {
				return
			}
			body := strings.Join(lines, "\n")
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
}

// netFieldsHandler answers with the fields an HTTP/2 member received, as
// rawFieldsMember does, the :authority as "host".
func netFieldsHandler(w http.ResponseWriter, r *http.Request) {
	lines := []string{"host: " + r.Host}
	for k, vv := range r.Header {
		for _, v := range vv {
			lines = append(lines, strings.ToLower(k)+": "+v)
		}
	}
	_, _ = io.WriteString(w, strings.Join(lines, "\n"))
}

// tableMembers returns the backends of the cross-protocol tables: the
// HTTP/1.1 member at h1 and an h2c member serving h2.
func tableMembers(t testing.TB, h1 string, h2 http.Handler) (*testBackend, *testBackend) {
	h1m := newBackend(t, h1)
	h2m := newBackend(t, h2cServer(t, h2))
	h2m.opts.Protocol = H2C
	return h1m, h2m
}

// tableRoutes returns the routes of the cross-protocol tables: /fast/h1
// and /fast/h2 serve h1 (an HTTP/1.1 member) and h2 (an HTTP/2 one)
// through the fast paths, /ext/h1 and /ext/h2 through net/http (a
// RouteExt, with respEdit as its response-header edits when not nil).
func tableRoutes(h1, h2 Backend, respEdit *HeaderEdit) testRouter {
	ext := func(be Backend) *Route {
		return &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: be, Weight: 1}}, ResponseHeaders: respEdit}}
	}
	return testRouter{
		{prefix: "/fast/h1", route: &Route{Name: "fast", Backend: h1}},
		{prefix: "/fast/h2", route: &Route{Name: "fast", Backend: h2}},
		{prefix: "/ext/h1", route: ext(h1)},
		{prefix: "/ext/h2", route: ext(h2)},
	}
}

// h2cTestClient is an HTTP/2 client with prior knowledge over cleartext.
func h2cTestClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
}

// dialTest dials addr, over TLS asking for proto when secure, with a
// deadline of 10 seconds.
func dialTest(addr string, secure bool, proto string) (net.Conn, error) {
	var conn net.Conn
	var err error
	if secure {
		conn, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, nil
}

// fwdCase is a request of TestForwardedFieldsAcrossProtocols: the fields
// every client sends, the ones only an HTTP/1.x client can send (HTTP/2
// forbids connection-specific fields), and what the member must (want)
// and must not (deny, substrings) receive.
type fwdCase struct {
	name   string
	fields [][2]string
	h1Only [][2]string
	// absolute: HTTP/1.x clients send the absolute-form target
	// http://a.example/... with Host b.example; HTTP/2 clients, whose
	// only authority is :authority, send a.example there.
	absolute bool
	want     func(trusted, cert bool) []string
	deny     func(trusted, cert bool) []string
}

var generatedID = regexp.MustCompile(`^x-request-id: [0-9a-f]{32}$`)

// normFields sorts what a member received and writes what the protocol
// itself decides in one form: the LB's own request id, and the scheme
// (https over TLS) in X-Forwarded-Proto and Forwarded.
func normFields(body string) []string {
	lines := strings.Split(strings.TrimSpace(body), "\n")
	for i, l := range lines {
		switch {
		case generatedID.MatchString(l):
			lines[i] = "x-request-id: <generated>"
		case l == "x-forwarded-proto: http" || l == "x-forwarded-proto: https":
			lines[i] = "x-forwarded-proto: <scheme>"
		case strings.HasPrefix(l, "forwarded: for=127.0.0.1;"):
			lines[i] = strings.TrimSuffix(strings.TrimSuffix(l, "=https"), "=http") + "=<scheme>"
		}
	}
	slices.Sort(lines)
	return lines
}

// TestForwardedFieldsAcrossProtocols sends the same requests over
// HTTP/1.1 (cleartext and TLS), HTTP/2 over TLS and h2c, each through the
// fast path and through the net/http path (a route with RouteExt), to an
// HTTP/1.1 and to an HTTP/2 member, from an untrusted and a trusted
// client, on a listener with and without a client-certificate field: the
// member must receive the same fields every way (beyond the scheme and
// the LB's random request id), and what each case wants.
func TestForwardedFieldsAcrossProtocols(t *testing.T) {
	t.Parallel()
	h1m, h2m := tableMembers(t, rawFieldsMember(t), http.HandlerFunc(netFieldsHandler))
	router := tableRoutes(h1m, h2m, nil)
	common := [][2]string{{"User-Agent", "table"}, {"Accept-Encoding", "identity"}, {"X-App", "1"}}
	spoof := [][2]string{
		{"X-Forwarded-For", "10.6.6.9"}, {"Forwarded", "for=10.6.6.10"}, {"X-Real-IP", "10.6.6.6"},
		{"X_Forwarded_For", "10.6.6.11"}, {"X-Forwarded-Proto", "gopher"}, {"X-Forwarded-Host", "evil.example"},
		{"X-Client-Subject", "CN=mallory"}, {"x_client_subject", "CN=mallory2"},
	}
	none := func(bool, bool) []string { return nil }
	cases := []fwdCase{{
		name:   "spoofed",
		fields: append(slices.Clone(common), spoof...),
		want: func(trusted, cert bool) []string {
			w := []string{"x-forwarded-for: 127.0.0.1", "x-request-id: <generated>", "host: a.example"}
			if trusted {
				w = append(w, "x-forwarded-for: 10.6.6.9", "x_forwarded_for: 10.6.6.11", "x-real-ip: 10.6.6.6",
					"forwarded: for=10.6.6.10", "x-forwarded-proto: gopher", "x-forwarded-host: evil.example")
			} else {
				w = append(w, "x-forwarded-proto: <scheme>", "x-forwarded-host: a.example",
					"forwarded: for=127.0.0.1;host=a.example;proto=<scheme>")
			}
			if cert {
				w = append(w, "x-client-subject: CN=alice,O=acme")
			} else {
				w = append(w, "x-client-subject: CN=mallory", "x_client_subject: CN=mallory2")
			}
			return w
		},
		deny: func(trusted, cert bool) []string {
			var d []string
			if !trusted {
				d = append(d, "10.6.6.", "evil.example", "gopher")
			}
			if cert {
				d = append(d, "mallory")
			}
			return d
		},
	}, {
		// The certificate field among others of no kind the core acts
		// on (an HTTP/1.x client's lines are copied in runs).
		name:   "cert field after others",
		fields: append(slices.Clone(common), [2]string{"x_client_subject", "CN=mallory"}, [2]string{"X-After", "1"}),
		want: func(_, cert bool) []string {
			if cert {
				return []string{"x-client-subject: CN=alice,O=acme", "x-after: 1", "x-app: 1"}
			}
			return []string{"x_client_subject: CN=mallory", "x-after: 1"}
		},
		deny: func(_, cert bool) []string {
			if cert {
				return []string{"mallory"}
			}
			return nil
		},
	}, {
		name:   "request id",
		fields: append(slices.Clone(common), [2]string{"X-Request-Id", "client-chosen-id"}),
		want: func(trusted, _ bool) []string {
			if trusted {
				return []string{"x-request-id: client-chosen-id"}
			}
			return []string{"x-request-id: <generated>"}
		},
		deny: func(trusted, _ bool) []string {
			if trusted {
				return []string{"<generated>"}
			}
			return []string{"client-chosen-id"}
		},
	}, {
		// A trusted client's first usable X-Request-Id is kept: printable
		// ASCII without blanks, at most 200 bytes.
		name: "unusable request ids",
		fields: append(slices.Clone(common), [2]string{"X-Request-Id", "has space"}, [2]string{"X-Request-Id", "id-caf\u00e9"},
			[2]string{"X-Request-Id", strings.Repeat("l", 201)}, [2]string{"X-Request-Id", "usable-id"}),
		want: func(trusted, _ bool) []string {
			if trusted {
				return []string{"x-request-id: usable-id"}
			}
			return []string{"x-request-id: <generated>"}
		},
		deny: func(trusted, _ bool) []string {
			d := []string{"has space", "caf", "lllll"}
			if trusted {
				return append(d, "<generated>")
			}
			return append(d, "usable-id")
		},
	}, {
		name:   "connection-named",
		fields: append(slices.Clone(common), [2]string{"X-Other", "o"}),
		h1Only: [][2]string{{"Connection", "keep-alive, X-Secret, X-Forwarded-Host"}, {"X-Secret", "s"}, {"Keep-Alive", "timeout=5"},
			{"Proxy-Connection", "keep-alive"}},
		want: func(bool, bool) []string { return []string{"x-other: o", "x-forwarded-host: a.example"} },
		deny: func(bool, bool) []string { return []string{"x-secret", "keep-alive", "connection"} },
	}, {
		name:   "te trailers",
		fields: append(slices.Clone(common), [2]string{"TE", "trailers"}),
		want:   func(bool, bool) []string { return []string{"te: trailers"} },
		deny:   none,
	}, {
		name:   "hop-by-hop",
		fields: append(slices.Clone(common), [2]string{"Proxy-Authorization", "Basic eDp5"}, [2]string{"Cookie", "a=1; b=2"}),
		want:   func(bool, bool) []string { return []string{"cookie: a=1; b=2"} },
		deny:   func(bool, bool) []string { return []string{"proxy-authorization"} },
	}, {
		name:     "absolute target",
		fields:   common,
		absolute: true,
		want: func(bool, bool) []string {
			return []string{"host: a.example", "x-forwarded-host: a.example", "forwarded: for=127.0.0.1;host=a.example;proto=<scheme>"}
		},
		deny: func(bool, bool) []string { return []string{"b.example"} },
	}}

	h2tls, h2c := h2TestClient(), h2cTestClient()
	h1 := func(addr string, secure bool, path string, c fwdCase) (string, error) {
		conn, err := dialTest(addr, secure, "http/1.1")
		if err != nil {
			return "", err
		}
		defer conn.Close()
		req := "GET " + path + " HTTP/1.1\r\nHost: a.example\r\n"
		if c.absolute {
			req = "GET http://a.example" + path + " HTTP/1.1\r\nHost: b.example\r\n"
		}
		for _, f := range append(slices.Clone(c.fields), c.h1Only...) {
			req += f[0] + ": " + f[1] + "\r\n"
		}
		if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
			return "", err
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
	h2 := func(client *http.Client, url string, c fwdCase) (string, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = "a.example"
		for _, f := range c.fields {
			req.Header[f[0]] = append(req.Header[f[0]], f[1])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.Do(req.WithContext(ctx))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			return "", fmt.Errorf("%s %d: %s", resp.Proto, resp.StatusCode, b)
		}
		return string(b), err
	}

	for _, trusted := range []bool{false, true} {
		for _, cert := range []bool{false, true} {
			cfg := Config{}
			if trusted {
				cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
			info := ConnInfo{Listener: "test", LB: "t/lb", Tenant: "t", Router: func() Router { return router }, AccessLog: 1}
			if cert {
				info.ClientCertHeader, info.ClientSubject = "X-Client-Subject", "CN=alice,O=acme"
			}
			clearStats, secureStats := &statsRecorder{}, &statsRecorder{}
			cfg.Metrics = clearStats
			clear := proxyUnderInfo(t, New(cfg), info, nil)
			tlsInfo := info
			tlsInfo.TLS = true
			cfg.Metrics = secureStats
			secure := proxyUnderInfo(t, New(cfg), tlsInfo, selfSigned(t))
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s trusted=%v cert=%v", c.name, trusted, cert), func(t *testing.T) {
					var ref []string
					var refName, refStats string
					for _, path := range []string{"/fast/h1", "/fast/h2", "/ext/h1", "/ext/h2"} {
						for _, client := range []string{"h1", "h1 tls", "h2 tls", "h2c"} {
							var body string
							var err error
							rec := clearStats
							if strings.Contains(client, "tls") {
								rec = secureStats
							}
							seen := rec.count()
							switch client {
							case "h1":
								body, err = h1(clear, false, path, c)
							case "h1 tls":
								body, err = h1(secure, true, path, c)
							case "h2 tls":
								body, err = h2(h2tls, "https://"+secure+path, c)
							case "h2c":
								body, err = h2(h2c, "http://"+clear+path, c)
							}
							name := client + " " + path
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							// The access log names the request as every
							// protocol does, with the id the member got.
							s := rec.after(t, seen)
							if want := memberID(body); s.RequestID != want {
								t.Errorf("%s: access log request id %q, member received %q", name, s.RequestID, want)
							}
							if s.Path != path {
								t.Errorf("%s: access log path %q", name, s.Path)
							}
							// Every codec and path counts the request
							// alike: where it came, its route and member,
							// its protocol and its bytes.
							route := strings.Split(path, "/")[1]
							h2 := strings.HasPrefix(client, "h2")
							if s.Listener != "test" || s.LB != "t/lb" || s.Tenant != "t" || s.Route != route || !s.Member.IsValid() ||
								s.HTTP2 != h2 || s.HTTP3 || s.ResponseBytes != int64(len(body)) || s.AccessLog != 1 {
								t.Errorf("%s: figures %+v (body %d bytes)", name, s, len(body))
							}
							figures := fmt.Sprintf("%s %s status=%d outcome=%v client=%v", s.Method, s.Host, s.Status, s.Outcome, s.Client.Addr())
							got := normFields(body)
							if ref == nil {
								ref, refName, refStats = got, name, figures
								for _, w := range c.want(trusted, cert) {
									if !slices.Contains(got, w) {
										t.Errorf("%s: member did not receive %q:\n%s", name, w, strings.Join(got, "\n"))
									}
								}
								for _, d := range c.deny(trusted, cert) {
									if strings.Contains(strings.ToLower(strings.Join(got, "\n")), strings.ToLower(d)) {
										t.Errorf("%s: member received %q:\n%s", name, d, strings.Join(got, "\n"))
									}
								}
								continue
							}
							if !slices.Equal(got, ref) {
								t.Errorf("%s differs from %s:\n%s", name, refName, lineDiff(ref, got))
							}
							if figures != refStats {
								t.Errorf("%s: figures %q, %s's %q", name, figures, refName, refStats)
							}
						}
					}
				})
			}
		}
	}
}

// lineDiff shows the lines only a has (-) and only b has (+).
func lineDiff(a, b []string) string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("(same lines, other counts)\n%q\n%q", a, b)
	}
	return strings.Join(out, "\n")
}

// memberID returns the X-Request-Id a member received.
func memberID(body string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, "x-request-id: "); ok {
			return v
		}
	}
	return ""
}

func (r *statsRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.stats)
}

// after waits for the figures of the request after the first n.
func (r *statsRecorder) after(t *testing.T, n int) RequestStats {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		if len(r.stats) > n {
			s := r.stats[n]
			r.mu.Unlock()
			return s
		}
		r.mu.Unlock()
	}
	t.Fatal("no figures reported")
	return RequestStats{}
}

// TestForwardedEmptyHost: an HTTP/1.1 request whose Host field is empty
// (a target without an authority, RFC 9112 section 3.2) and an HTTP/1.0
// one without Host reach an HTTP/1.1 member with an empty Host field,
// which an HTTP/1.1 request must carry, on the fast path and through
// net/http alike.
func TestForwardedEmptyHost(t *testing.T) {
	t.Parallel()
	h1m := newBackend(t, rawFieldsMember(t))
	router := testRouter{
		{prefix: "/fast", route: &Route{Name: "fast", Backend: h1m}},
		{prefix: "/ext", route: &Route{Name: "ext", Ext: &RouteExt{Backends: []WeightedBackend{{Backend: h1m, Weight: 1}}}}},
	}
	addr := proxyUnderInfo(t, New(Config{}), ConnInfo{Listener: "test", Router: func() Router { return router }}, nil)
	for _, path := range []string{"/fast", "/ext"} {
		for _, req := range []string{"GET " + path + " HTTP/1.1\r\nHost:\r\n\r\n", "GET " + path + " HTTP/1.0\r\n\r\n"} {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("%q: %v", req, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			conn.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%q: status %d: %s", req, resp.StatusCode, b)
			}
			if lines := strings.Split(string(b), "\n"); lines[0] != "host: " || slices.Contains(lines[1:], "host: ") {
				t.Errorf("%q: the member received, Host not first or not once:\n%s", req, b)
			}
		}
	}
}

// TestH2MalformedRequestLine: an HTTP/2 request whose :method is not a
// token or whose :path holds a blank or a control byte is malformed
// (RFC 9113 section 8.1.1): the stream is reset with PROTOCOL_ERROR and
// no member receives it, where an HTTP/1.1 member would read another
// target in the request line made of them ("GET /admin /open HTTP/1.1").
func TestH2MalformedRequestLine(t *testing.T) {
	t.Parallel()
	lines := make(chan string, 16)
	member := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		l, err := br.ReadString('\n')
		if err != nil {
			return
		}
		lines <- strings.TrimRight(l, "\r\n")
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
	be := newBackend(t, member)
	router := testRouter{{prefix: "/", route: &Route{Name: "r", Backend: be}}}
	addr := proxyUnder(t, New(Config{}), router, selfSigned(t))
	for _, tc := range []struct{ method, path string }{
		{"GET /admin", "/open"},
		{"GET", "/open /admin"},
		{"GET", "/open\t/admin"},
		{"G(ET", "/open"},
		{"GET", "/open"}, // well-formed: reaches the member
	} {
		h := dialH2(t, addr)
		h.hb.Reset()
		for _, f := range [][2]string{{":method", tc.method}, {":scheme", "https"}, {":authority", "a.example"}, {":path", tc.path}} {
			_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		blk := bytes.Clone(h.hb.Bytes())
		if err := h.write(func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk, EndStream: true, EndHeaders: true})
		}); err != nil {
			t.Fatal(err)
		}
		ok := tc.method == "GET" && tc.path == "/open"
		deadline := time.Now().Add(10 * time.Second)
		for h.resets.Load() == 0 && time.Now().Before(deadline) {
			if _, answered := h.status.Load(uint32(1)); answered {
				break
			}
			time.Sleep(time.Millisecond)
		}
		st, answered := h.status.Load(uint32(1))
		switch {
		case ok && (!answered || st != "200"):
			t.Errorf("%q %q: status %v, resets %d", tc.method, tc.path, st, h.resets.Load())
		case !ok && (answered || h.resets.Load() != 1):
			t.Errorf("%q %q: answered %v (status %v), resets %d", tc.method, tc.path, answered, st, h.resets.Load())
		}
		select {
		case l := <-lines:
			if !ok {
				t.Errorf("%q %q: the member received %q", tc.method, tc.path, l)
			}
		case <-time.After(50 * time.Millisecond):
			if ok {
				t.Errorf("the well-formed request did not reach the member")
			}
		}
	}
}
