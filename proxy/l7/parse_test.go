package l7

import (
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"Shop.Example", "shop.example", true},
		{"shop.example.:8080", "shop.example", true},
		{"shop.example:", "shop.example", true},
		{"192.0.2.1:80", "192.0.2.1", true},
		{"[2001:DB8::1]:443", "[2001:db8::1]", true},
		{"", "", true},
		{"a b", "", false},
		{"a..b", "", false},
		{".a", "", false},
		{"a:b", "", false},
		{"a:123456", "", false},
		{"[::1", "", false},
		{"[fe80::1%25eth0]", "", false},
		{"[1.2.3.4]", "", false},
		{"ex/ample", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := normalizeHost(nil, []byte(tc.in))
			if ok != tc.ok || (ok && string(got) != tc.want) {
				t.Fatalf("normalizeHost(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/a/./b", "/a/b"},
		{"/a/../b", "/b"},
		{"/../a", "/a"},
		{"/a/b/..", "/a/"},
		{"/a/.", "/a/"},
		{"/%2e%2E/a", "/a"},
		{"/a/.%2e/b", "/b"},
		{"/a//../b", "/a/b"},
		{"/.a/..b/c", "/.a/..b/c"},
		{"/%69nternal", "/internal"},
		{"/%7e%41%5a%30-%5F", "/~AZ0-_"},
		{"/a%2fb/%2F", "/a%2Fb/%2F"}, // a slash stays escaped: no new segment
		{"/%c3%a9", "/%C3%A9"},
		{"/%C3%A9", "/%C3%A9"},
		{"/a/%2E./b", "/b"},
		{"/a/%zz/%4", "/a/%zz/%4"}, // invalid escapes stay as written
		{"/x%252e/..", "/"},
		{"/%2e%2e%2f..", "/..%2F.."}, // one segment, not a dot segment
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := string(cleanPath(nil, []byte(tc.in))); got != tc.want {
				t.Fatalf("cleanPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if needsClean([]byte(tc.in)) != (tc.in != tc.want) {
				t.Fatalf("needsClean(%q) = %v", tc.in, needsClean([]byte(tc.in)))
			}
		})
	}
}

func TestChunked(t *testing.T) {
	tests := []struct {
		name, in string
		n        int // bytes of the body, -1 for an error
		total    int64
	}{
		{"simple", "3\r\nabc\r\n0\r\n\r\n", 13, 3},
		{"extension", "3;a=b\r\nabc\r\n0\r\n\r\n", 17, 3},
		{"trailers", "1\r\na\r\n0\r\nX-A: b\r\n\r\n", 19, 1},
		{"stops at the body's end", "0\r\n\r\nGET / HTTP/1.1", 5, 0},
		{"upper-case hex", "A\r\n0123456789\r\n0\r\n\r\n", 20, 10},
		{"no digits", ";x\r\n", -1, 0},
		{"bare LF after size", "3\nabc\r\n0\r\n\r\n", -1, 0},
		{"data too long", "3\r\nabcd\r\n0\r\n\r\n", -1, 0},
		{"control in extension", "3;\x01\r\nabc\r\n", -1, 0},
		{"obs-fold in trailer", "0\r\nX-A: b\r\n c\r\n\r\n", -1, 0},
		{"trailer without colon", "0\r\nX-A\r\n\r\n", -1, 0},
		{"huge size", "100000000000000\r\n", -1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c chunked
			n, err := c.scan([]byte(tc.in))
			if tc.n < 0 {
				if err == nil {
					t.Fatalf("accepted %q", tc.in)
				}
				return
			}
			if err != nil || n != tc.n || !c.done() || c.total != tc.total {
				t.Fatalf("scan = %d, %v, done %v, total %d; want %d, %d", n, err, c.done(), c.total, tc.n, tc.total)
			}
		})
	}
}

func TestResponseFramingRules(t *testing.T) {
	tests := []struct {
		name, in string
		head     bool
		framing  uint8
		reusable bool
		bad      bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, bodyLength, true, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, bodyChunked, true, false},
		{"chunked wins over length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", false, bodyChunked, true, false},
		{"until close", "HTTP/1.1 200 OK\r\n\r\n", false, bodyClose, true, false},
		{"gzip only", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false, bodyClose, true, false},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, bodyNone, true, false},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", false, bodyNone, true, false},
		{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false, bodyNone, true, false},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false, bodyLength, false, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false, bodyLength, false, false},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", false, bodyLength, true, false},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", false, 0, false, true},
		{"bad status", "HTTP/1.1 2000 OK\r\n\r\n", false, 0, false, true},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", false, 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h respHead
			h.reset()
			done, ok := h.parse([]byte(tc.in), 4096)
			if tc.bad {
				if ok && done {
					t.Fatalf("accepted %q", tc.in)
				}
				return
			}
			if !done || !ok {
				t.Fatalf("parse = %v, %v", done, ok)
			}
			if f := h.framing(tc.head); f != tc.framing || h.reusable() != tc.reusable {
				t.Fatalf("framing %d reusable %v; want %d %v", f, h.reusable(), tc.framing, tc.reusable)
			}
		})
	}
}

// TestConnectionElementsBounded: a request's Connection fields may hold
// maxConnTokens elements (empty ones and options included), over one
// field or several; one more is a 400, so that looking each field up
// among the names they list stays cheap (a 26 KB head of 12000 listed
// names and 98 fields took 3 ms to parse without the bound).
func TestConnectionElementsBounded(t *testing.T) {
	list := func(n int) string {
		e := make([]string, n)
		for i := range e {
			e[i] = "x-n" + strings.Repeat("a", i%3)
		}
		e[0], e[n/2] = "close", ""
		return strings.Join(e, ",")
	}
	for _, tc := range []struct {
		name   string
		fields []string
		ok     bool
	}{
		{"at the bound", []string{list(maxConnTokens)}, true},
		{"over it", []string{list(maxConnTokens + 1)}, false},
		{"over it in two fields", []string{list(maxConnTokens / 2), list(maxConnTokens/2 + 1)}, false},
		{"commas only", []string{strings.Repeat(",", maxConnTokens+1)}, false},
	} {
		head := "GET / HTTP/1.1\r\nHost: a.example\r\n"
		for _, f := range tc.fields {
			head += "Connection: " + f + "\r\n"
		}
		head += "X-Na: 1\r\n\r\n"
		var h reqHead
		h.reset()
		done, st := h.parse([]byte(head), 1<<20, 100)
		if !done {
			t.Fatalf("%s: head not complete (status %d)", tc.name, st)
		}
		if (st == 0) != tc.ok {
			t.Errorf("%s: status %d", tc.name, st)
		}
	}
}
