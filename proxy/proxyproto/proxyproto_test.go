package proxyproto

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

var (
	src4 = netip.MustParseAddrPort("192.0.2.7:56324")
	dst4 = netip.MustParseAddrPort("198.51.100.1:443")
	src6 = netip.MustParseAddrPort("[2001:db8::7]:56324")
	dst6 = netip.MustParseAddrPort("[2001:db8:10::1]:443")
)

func TestEncode(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		want []byte
	}{
		{"v1 tcp4", Header{Version: 1, Src: src4, Dst: dst4}, []byte("PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n")},
		{"v1 tcp6", Header{Version: 1, Src: src6, Dst: dst6}, []byte("PROXY TCP6 2001:db8::7 2001:db8:10::1 56324 443\r\n")},
		{"v1 mixed families", Header{Version: 1, Src: src4, Dst: dst6}, []byte("PROXY UNKNOWN\r\n")},
		{"v2 tcp4", Header{Version: 2, Src: src4, Dst: dst4}, append([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c"),
			192, 0, 2, 7, 198, 51, 100, 1, 0xdc, 0x04, 0x01, 0xbb)},
		{"v2 tcp6", Header{Version: 2, Src: src6, Dst: dst6}, append([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24"),
			0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7,
			0x20, 0x01, 0x0d, 0xb8, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
			0xdc, 0x04, 0x01, 0xbb)},
		{"v2 unknown", Header{Version: 2}, []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x00\x00\x00")},
		{"v2 local", Header{Version: 2, Local: true}, []byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.h.Append([]byte("x"))
			if !bytes.Equal(got[1:], tt.want) {
				t.Fatalf("Append = %q, want %q", got[1:], tt.want)
			}
			h, n, err := Decode(append(got[1:], "payload"...))
			want := tt.h
			if want.Src.Addr().Is4() != want.Dst.Addr().Is4() {
				want.Src, want.Dst = netip.AddrPort{}, netip.AddrPort{}
			}
			if err != nil || n != len(tt.want) || h != want {
				t.Errorf("Decode = %+v, %d, %v; want %+v, %d", h, n, err, want, len(tt.want))
			}
		})
	}
	if got := AppendV1(nil, src4, dst4); !bytes.Equal(got, tests[0].want) {
		t.Errorf("AppendV1 = %q", got)
	}
	if got := AppendV2(nil, src4, dst4); !bytes.Equal(got, tests[3].want) {
		t.Errorf("AppendV2 = %q", got)
	}
}

func TestDecode(t *testing.T) {
	v2 := AppendV2(nil, src4, dst4)
	withTLV := append(append([]byte{}, v2[:15]...), 12+5)
	withTLV = append(append(withTLV, v2[16:]...), 0x04, 0, 2, 'h', 'i')
	tests := []struct {
		name string
		in   string
		n    int
		err  error
	}{
		{"v1 unknown with junk", "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nGET", 35, nil},
		{"v1 prefix", "PROXY TCP4 192.0.2.7", 0, ErrIncomplete},
		{"v1 short prefix", "PRO", 0, ErrIncomplete},
		{"v1 too long", "PROXY TCP4 " + string(bytes.Repeat([]byte("1"), 120)), 0, ErrInvalid},
		{"v1 bare LF", "PROXY TCP4 192.0.2.7 198.51.100.1 1 2\n", 0, ErrInvalid},
		{"v1 family mismatch", "PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n", 0, ErrInvalid},
		{"v1 leading zero port", "PROXY TCP4 192.0.2.7 198.51.100.1 01 2\r\n", 0, ErrInvalid},
		{"v1 port too big", "PROXY TCP4 192.0.2.7 198.51.100.1 65536 2\r\n", 0, ErrInvalid},
		{"v1 zone", "PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n", 0, ErrInvalid},
		{"v1 double space", "PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n", 0, ErrInvalid},
		{"v1 wrong protocol", "PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n", 0, ErrInvalid},
		{"not a header", "GET / HTTP/1.1\r\n", 0, ErrInvalid},
		{"empty", "", 0, ErrIncomplete},
		{"v2 signature prefix", "\r\n\r\n\x00", 0, ErrIncomplete},
		{"v2 body missing", string(v2[:20]), 0, ErrIncomplete},
		{"v2 with TLVs", string(withTLV), 16 + 17, nil},
		{"v2 bad version", "\r\n\r\n\x00\r\nQUIT\n\x11\x11\x00\x00", 0, ErrInvalid},
		{"v2 bad command", "\r\n\r\n\x00\r\nQUIT\n\x22\x11\x00\x00", 0, ErrInvalid},
		{"v2 address too short", "\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x04abcd", 0, ErrInvalid},
		{"v2 bad signature", "\r\n\r\n\x00\r\nQUIZ\n\x21\x11\x00\x00", 0, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, n, err := Decode([]byte(tt.in))
			if !errors.Is(err, tt.err) || n != tt.n {
				t.Errorf("Decode(%q) = %d, %v; want %d, %v", tt.in, n, err, tt.n, tt.err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range [][]byte{
		AppendV1(nil, src4, dst4), AppendV1(nil, src6, dst6), AppendV2(nil, src4, dst4), AppendV2(nil, src6, dst6),
		[]byte("PROXY UNKNOWN\r\n"), Header{Version: 2, Local: true}.Append(nil), []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x31\x00\x00"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Decode(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with length %d", err, n)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("length %d of %d bytes", n, len(b))
		}
		// What decodes re-encodes to something that decodes the same.
		again, m, err := Decode(h.Append(nil))
		if err != nil || again != h || m != len(h.Append(nil)) {
			t.Fatalf("%+v re-encoded decodes to %+v, %d, %v", h, again, m, err)
		}
	})
}
