package l7

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// selectNames are the field names every view is asked for, beside the
// request's own.
var selectNames = []string{"Host", "Connection", "Te", "Upgrade", "Keep-Alive", "X-Request-Id", "Cookie", "X-A", "Content-Length"}

// FuzzRequestViews checks that the views Select reads (h1Request over a
// parsed HTTP/1.x head, h2Request over HTTP/2 fields) give the method,
// fields and query that the net/http request of the same request holds,
// which is what Select read before the views existed.
func FuzzRequestViews(f *testing.F) {
	f.Add([]byte("GET /a?b=1&c=2 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\nConnection: keep-alive, x-b\r\nX-B: gone\r\nTE: trailers\r\n\r\n"))
	f.Add([]byte("POST http://h/p/../q?x#y?z HTTP/1.1\r\nHost: other\r\nUpgrade: websocket\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n"))
	f.Add([]byte("OPTIONS * HTTP/1.1\r\nHost: h\r\nX-Request-Id: 1\r\nX-Request-Id: 2\r\n\r\n"))
	f.Add([]byte("GET /?q HTTP/1.0\r\nKeep-Alive: 1\r\nProxy-Connection: x\r\nx-a:\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var h reqHead
		h.reset()
		done, st := h.parse(in, 4096, 50)
		if !done || st != 0 {
			return
		}
		c := &clientConn{readBuf: readBuf{rb: in, r: h.n}, h: h}
		v := (*h1Request)(c)
		b := in[:h.n]
		want := reqview.HTTP{R: &http.Request{Method: string(b[h.mS:h.mE]), Header: h.netHeader(b)}}
		if u, err := url.ParseRequestURI(string(b[h.tS:h.tE])); err == nil && h.form != formAsterisk {
			want.R.URL = u
		}
		names := append([]string(nil), selectNames...)
		for i := range h.fields {
			names = append(names, http.CanonicalHeaderKey(string(h.fields[i].name(b))))
		}
		compareViews(t, "HTTP/1.x", v, want, names, want.R.URL != nil)

		// The same fields as HTTP/2 fields, in lower case.
		fields := []hpack.HeaderField{{Name: ":method", Value: want.R.Method}, {Name: ":path", Value: string(b[h.tS:h.tE])}}
		for i := range h.fields {
			fl := &h.fields[i]
			fields = append(fields, hpack.HeaderField{Name: strings.ToLower(string(fl.name(b))), Value: string(fl.value(b))})
		}
		st2 := &h2Stream{fields: fields, method: want.R.Method, path: string(b[h.tS:h.tE])}
		want2 := reqview.HTTP{R: &http.Request{Method: st2.method, Header: h2NetHeader(fields)}}
		if u, err := url.ParseRequestURI(st2.path); err == nil && st2.path != "*" {
			want2.R.URL = u
		}
		compareViews(t, "HTTP/2", (*h2Request)(st2), want2, names, want2.R.URL != nil)
	})
}

func compareViews(t *testing.T, proto string, got, want Request, names []string, query bool) {
	t.Helper()
	if got.Method() != want.Method() {
		t.Fatalf("%s: method %q, want %q", proto, got.Method(), want.Method())
	}
	for _, n := range names {
		gv, gok := got.Header(n)
		wv, wok := want.Header(n)
		if gv != wv || gok != wok {
			t.Fatalf("%s: field %s: %q %v, want %q %v", proto, n, gv, gok, wv, wok)
		}
	}
	if query && got.RawQuery() != want.RawQuery() {
		t.Fatalf("%s: query %q, want %q", proto, got.RawQuery(), want.RawQuery())
	}
}

// A field repeated up to the head's bounds combines in one copy of at
// most maxCombinedValue bytes: a value longer than any route condition
// matches, built without a copy per repetition (100 fields of 600 bytes
// made 100 growing copies, 3 MB, per condition before).
func TestRepeatedFieldsCombineInOneCopy(t *testing.T) {
	var head strings.Builder
	head.WriteString("GET / HTTP/1.1\r\nHost: h\r\n")
	var fields []hpack.HeaderField
	val := strings.Repeat("v", 600)
	for range 99 {
		head.WriteString("X-A: " + val + "\r\n")
		fields = append(fields, hpack.HeaderField{Name: "x-a", Value: val})
	}
	head.WriteString("\r\n")
	in := []byte(head.String())
	var h reqHead
	h.reset()
	if done, st := h.parse(in, 64<<10, 100); !done || st != 0 {
		t.Fatalf("parse: %v %v", done, st)
	}
	views := map[string]reqview.Request{
		"HTTP/1.x": (*h1Request)(&clientConn{readBuf: readBuf{rb: in, r: h.n}, h: h}),
		"HTTP/2":   (*h2Request)(&h2Stream{fields: fields, method: "GET", path: "/"}),
	}
	for name, v := range views {
		got, ok := v.Header("X-A")
		if !ok || len(got) < maxCombinedValue || len(got) > maxCombinedValue+2 || !strings.HasPrefix(got, val+", "+val) {
			t.Errorf("%s: combined value of %d bytes (%v), want %d to %d starting with the fields joined", name, len(got), ok, maxCombinedValue, maxCombinedValue+2)
		}
		if a := testing.AllocsPerRun(100, func() { v.Header("X-A") }); a > 1 {
			t.Errorf("%s: %.0f allocations to combine 99 fields, want 1", name, a)
		}
	}
}
