package l7

import (
	"bytes"
	"io"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET http://a.example:80/p?q HTTP/1.1\r\nHost: b\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
	"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, X-A\r\nUpgrade: websocket\r\nX-A: 1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n",
	"\r\nGET /a/../b HTTP/1.0\r\nX-Forwarded-For: 1.2.3.4\r\nX-Request-Id: id\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
}

// FuzzRequestHead checks that the parser never panics, that it gives the
// same answer however the head is split across reads, and that the head
// it forwards parses again with the same framing and no hop-by-hop field.
func FuzzRequestHead(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		var h reqHead
		h.reset()
		done, st := h.parse(in, 4096, 50)
		// Incremental: the same bytes in two parts.
		var h2 reqHead
		h2.reset()
		cut := int(split) % (len(in) + 1)
		done2, st2 := h2.parse(in[:cut], 4096, 50)
		if !done2 && st2 == 0 {
			done2, st2 = h2.parse(in, 4096, 50)
		}
		if done != done2 || st != st2 || (done && h.n != h2.n) {
			t.Fatalf("split at %d: (%v,%d) vs (%v,%d)", cut, done, st, done2, st2)
		}
		if !done || st != 0 {
			return
		}
		b := in[:h.n]
		host, ok := normalizeHost(nil, h.hostValue(b))
		if !ok {
			return
		}
		path := b[h.pS:h.pE]
		cleaned := needsClean(path)
		if cleaned {
			path = cleanPath(nil, path)
		}
		ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), false, nil)
		fc := &clientConn{h: h, ca: ca}
		fc.view = fc.h.view(b)
		fc.appendRequestHead(b, path, cleaned, h.upgradeTo(b))
		out := fc.wb
		var r reqHead
		r.reset()
		done, st = r.parse(out, 1<<20, 1000)
		if len(host) == 0 && h.minor == 0 {
			return // forwarded as HTTP/1.1 without a Host
		}
		if !done || st != 0 || r.n != len(out) {
			t.Fatalf("forwarded head does not parse (%v, %d):\n%q\nfrom\n%q", done, st, out, b)
		}
		if r.contentLength != h.contentLength || r.chunked != h.chunked {
			t.Fatalf("framing changed: %d/%v -> %d/%v", h.contentLength, h.chunked, r.contentLength, r.chunked)
		}
		for i := range r.fields {
			switch r.fields[i].kind {
			case hKeepAlive, hProxyConnection, hProxyAuthorization, hHTTP2Settings:
				t.Fatalf("hop-by-hop field forwarded: %q", out)
			case hConnection:
				if h.upgradeTo(b) == nil {
					t.Fatalf("Connection forwarded without upgrade: %q", out)
				}
			}
		}
	})
}

// FuzzResponseHead checks the response parser and that a relayed head
// keeps its framing.
func FuzzResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\n\r\n",
		"HTTP/1.0 204 No Content\r\nKeep-Alive: timeout=5\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		var h respHead
		h.reset()
		done, ok := h.parse(in, 4096)
		if !done || !ok {
			return
		}
		if h.sl > h.n || h.status < 100 || h.status > 999 {
			t.Fatalf("status line end %d, head %d, status %d", h.sl, h.n, h.status)
		}
		framing := h.framing(head)
		var c clientConn
		c.info = &ConnInfo{}
		c.appendResponseHead(in[:h.n], &h, "", false)
		out := slices.Clone(c.wb)
		var r respHead
		r.reset()
		done, ok = r.parse(out, 1<<20)
		if !done || !ok || r.n != len(out) {
			t.Fatalf("relayed head does not parse: %q", out)
		}
		if got := r.framing(head); got != framing && !(framing == bodyClose && h.minor == 0) {
			t.Fatalf("framing %d -> %d: %q -> %q", framing, got, in[:h.n], out)
		}
		// A relayed head is relayed as it is.
		c.appendResponseHead(out[:r.n], &r, "", false)
		if !bytes.Equal(c.wb, out) {
			t.Fatalf("relayed head %q changes when relayed again: %q", out, c.wb)
		}
	})
}

// FuzzChunked checks that the decoder gives the same verdict whether the
// body arrives at once or byte by byte, and that what it accepts decodes
// to the same data as net/http's reader.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"3\r\nabc\r\n0\r\n\r\n",
		"1;ext=v\r\na\r\n0\r\nX-T: 1\r\n\r\n",
		"10\r\n0123456789abcdef\r\n0\r\n\r\nGET",
		"0\r\n\r\n",
		"ffffffffffffffffff\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var whole chunked
		n, err := whole.scan(in)
		var data []byte
		var step chunked
		m := 0
		var serr error
		for m < len(in) && !step.done() {
			k, isData, e := step.step(in[m : m+1])
			if isData {
				data = append(data, in[m:m+k]...)
			}
			m += k
			if e != nil {
				serr = e
				break
			}
			if k == 0 {
				t.Fatalf("no progress at %d", m)
			}
		}
		if (err == nil) != (serr == nil) || whole.done() != step.done() {
			t.Fatalf("whole: n=%d err=%v done=%v; bytewise: m=%d err=%v done=%v", n, err, whole.done(), m, serr, step.done())
		}
		if err != nil || !whole.done() {
			return
		}
		if n != m || int64(len(data)) != whole.total {
			t.Fatalf("consumed %d vs %d, data %d vs %d", n, m, len(data), whole.total)
		}
		ref, rerr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in[:n])))
		if rerr != nil || !bytes.Equal(ref, data) {
			t.Fatalf("net/http disagrees: %v, %q vs %q", rerr, ref, data)
		}
	})
}

// FuzzNormalizeHost checks that normalised hosts are stable and plain.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"Shop.Example.:8080", "[2001:DB8::1]:443", "a_b-c.d", "1.2.3.4", "", "x..y", "[fe80::1%eth0]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, ok := normalizeHost(nil, []byte(in))
		if !ok {
			return
		}
		again, ok := normalizeHost(nil, out)
		if !ok || !bytes.Equal(again, out) {
			t.Fatalf("%q -> %q -> %q", in, out, again)
		}
		if bytes.ContainsAny(out, "ABCDEFGHIJKLMNOPQRSTUVWXYZ \t\r\n/") || (len(out) > 0 && out[0] != '[' && bytes.IndexByte(out, ':') >= 0) {
			t.Fatalf("%q -> %q", in, out)
		}
	})
}

// FuzzCleanPath checks that normalised paths have no dot segment, no
// escape of an unreserved character and no lower-case escape left, that
// they normalise to themselves, and that a path in normal form is kept.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/a/./b/../c", "/%2e%2E/x", "/a//../b/", "/..", "/a/b/.", "/.x/..y",
		"/%69nternal", "/%2f%2F/%c3%a9", "/%zz%4", "/%2e%2e%2f..", "/a%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !strings.HasPrefix(in, "/") {
			in = "/" + in
		}
		out := cleanPath(nil, []byte(in))
		if len(out) == 0 || out[0] != '/' || needsClean(out) || !bytes.Equal(cleanPath(nil, out), out) {
			t.Fatalf("%q -> %q", in, out)
		}
		if !needsClean([]byte(in)) && string(out) != in {
			t.Fatalf("%q needs no cleaning but became %q", in, out)
		}
		for i := 0; i+2 < len(out); i++ {
			if v, ok := escapeAt(out, i); ok && (unreserved[v] || isLowerHex(out[i+1]) || isLowerHex(out[i+2])) {
				t.Fatalf("%q -> %q keeps the escape %q", in, out, out[i:i+3])
			}
		}
		// Decoding gives the same characters, but for dot segments.
		if !strings.Contains(in, ".") && !strings.Contains(strings.ToLower(in), "%2e") {
			if a, b := unescapeLoose(in), unescapeLoose(string(out)); a != b {
				t.Fatalf("%q decodes to %q, its normal form %q to %q", in, a, out, b)
			}
		}
	})
}

// unescapeLoose decodes every valid escape, keeping invalid ones.
func unescapeLoose(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if v, ok := escapeAt([]byte(s), i); ok {
			b = append(b, v)
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}
