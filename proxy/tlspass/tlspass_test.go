package tlspass

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// realHello returns the records of a ClientHello written by crypto/tls.
func realHello(t testing.TB, serverName string, alpn []string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, NextProtos: alpn, InsecureSkipVerify: true})
		_ = c.Handshake()
		a.Close()
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := b.Read(buf)
		out = append(out, buf[:n]...)
		if _, perr := Parse(out); perr == nil || err != nil {
			return out
		}
	}
}

// records splits a handshake message into records of at most size bytes.
func records(msg []byte, size int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 22, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// helloMsg builds a ClientHello handshake message with the given
// extensions block (nil: none).
func helloMsg(exts []byte) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // one suite
	body = append(body, 1, 0)                // null compression
	if exts != nil {
		body = append(body, byte(len(exts)>>8), byte(len(exts)))
		body = append(body, exts...)
	}
	return append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

func ext(typ int, data []byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ), byte(len(data) >> 8), byte(len(data))}, data...)
}

func sni(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return ext(extServerName, append([]byte{byte(len(list) >> 8), byte(len(list))}, list...))
}

func TestParseRealClientHello(t *testing.T) {
	tests := []struct {
		name, serverName, want string
		alpn                   []string
	}{
		{"sni and alpn", "Shop.Acme.Example", "shop.acme.example", []string{"h2", "http/1.1"}},
		{"no alpn", "api.acme.example", "api.acme.example", nil},
		{"no sni (IP)", "192.0.2.1", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := realHello(t, tc.serverName, tc.alpn)
			h, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if h.ServerName != tc.want || !slices.Equal(h.ALPN, tc.alpn) || h.Len != len(data) {
				t.Fatalf("got %+v (data %d bytes), want %q %v", h, len(data), tc.want, tc.alpn)
			}
			// Every prefix is incomplete, never an error or a success.
			for i := range len(data) {
				if _, err := Parse(data[:i]); !errors.Is(err, ErrIncomplete) {
					t.Fatalf("prefix %d: %v, want ErrIncomplete", i, err)
				}
			}
		})
	}
}

func TestParseFragmented(t *testing.T) {
	msg := helloMsg(append(sni("a.example"), ext(extALPN, []byte{0, 3, 2, 'h', '2'})...))
	for _, size := range []int{1, 2, 3, 5, 17, len(msg)} {
		data := records(msg, size)
		h, err := Parse(append(data, 23, 3, 3, 0, 1, 0)) // application data follows
		if err != nil || h.ServerName != "a.example" || !slices.Equal(h.ALPN, []string{"h2"}) || h.Len != len(data) {
			t.Fatalf("records of %d: %+v %v", size, h, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	longLabel := string(bytes.Repeat([]byte{'a'}, 64)) + ".example"
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrNotTLS},
		{"ssh", []byte("SSH-2.0-OpenSSH_9.2\r\n"), ErrNotTLS},
		{"alert record", []byte{21, 3, 3, 0, 2, 2, 40}, ErrNotTLS},
		{"empty record", []byte{22, 3, 1, 0, 0}, ErrMalformed},
		{"oversized record", []byte{22, 3, 1, 0x40, 0x01}, ErrMalformed},
		{"server hello", records([]byte{2, 0, 0, 1, 0}, 100), ErrMalformed},
		{"trailing data in the record", records(append(helloMsg(nil), 0), 1000), ErrMalformed},
		{"no extensions", records(helloMsg(nil), 1000), nil},
		{"two names", records(helloMsg(sni("a.example", "b.example")), 1000), ErrMalformed},
		{"two sni extensions", records(helloMsg(append(sni("a.example"), sni("b.example")...)), 1000), ErrMalformed},
		{"bad character", records(helloMsg(sni("a b.example")), 1000), ErrMalformed},
		{"empty label", records(helloMsg(sni("a..example")), 1000), ErrMalformed},
		{"long label", records(helloMsg(sni(longLabel)), 1000), ErrMalformed},
		{"extension overruns", records(helloMsg([]byte{0, 0, 0, 9, 1}), 1000), ErrMalformed},
		{"empty alpn name", records(helloMsg(ext(extALPN, []byte{0, 1, 0})), 1000), ErrMalformed},
		{"record type changes", append(records(helloMsg(sni("a.example"))[:20], 20), []byte{23, 3, 3, 0, 1, 0}...), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadKeepsEveryByte(t *testing.T) {
	data := realHello(t, "shop.acme.example", []string{"h2"})
	extra := []byte("early data after the hello")
	a, b := net.Pipe()
	go func() {
		// Written in small pieces: Read must reassemble them.
		all := append(slices.Clone(data), extra...)
		for len(all) > 0 {
			n := min(7, len(all))
			a.Write(all[:n])
			all = all[n:]
		}
		a.Close()
	}()
	h, got, err := Read(b, nil, time.Now().Add(5*time.Second))
	if err != nil || h.ServerName != "shop.acme.example" {
		t.Fatalf("%+v %v", h, err)
	}
	rest, _ := io.ReadAll(b)
	if !bytes.Equal(append(got, rest...), append(data, extra...)) {
		t.Fatal("bytes read and bytes left do not add up to what was sent")
	}
}

func TestReadLimits(t *testing.T) {
	t.Run("silent client times out", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		_, _, err := Read(b, nil, time.Now().Add(50*time.Millisecond))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("got %v, want a timeout", err)
		}
	})
	t.Run("endless records", func(t *testing.T) {
		a, b := net.Pipe()
		go func() {
			// A message that claims 1 MiB, sent in full records.
			a.Write([]byte{22, 3, 1, 0x40, 0x00, 1, 0x10, 0, 0})
			rec := append([]byte{22, 3, 1, 0x40, 0x00}, make([]byte, 1<<14)...)
			for range 8 {
				if _, err := a.Write(rec[:len(rec)]); err != nil {
					return
				}
			}
		}()
		defer a.Close()
		_, _, err := Read(b, nil, time.Now().Add(5*time.Second))
		if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
	})
	t.Run("eof", func(t *testing.T) {
		a, b := net.Pipe()
		go func() { a.Write([]byte{22, 3, 1}); a.Close() }()
		_, _, err := Read(b, nil, time.Now().Add(5*time.Second))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v", err)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add(realHello(f, "shop.acme.example", []string{"h2", "http/1.1"}))
	f.Add(records(helloMsg(append(sni("a.example"), ext(extALPN, []byte{0, 3, 2, 'h', '2'})...)), 3))
	f.Add(records(helloMsg(nil), 1000))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrNotTLS) && !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if h.Len <= 0 || h.Len > len(data) {
			t.Fatalf("Len %d outside data of %d bytes", h.Len, len(data))
		}
		if h.ServerName != "" {
			if n, ok := hostName([]byte(h.ServerName)); !ok || n != h.ServerName {
				t.Fatalf("server name %q is not a normalized host name", h.ServerName)
			}
		}
		// The same hello followed by anything parses the same.
		h2, err := Parse(append(data[:h.Len:h.Len], 0xff, 0, 1))
		if err != nil || h2.ServerName != h.ServerName || !slices.Equal(h2.ALPN, h.ALPN) {
			t.Fatalf("reparse with trailing bytes: %+v %v, want %+v", h2, err, h)
		}
	})
}
