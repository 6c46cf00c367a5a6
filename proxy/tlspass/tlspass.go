// Package tlspass reads the ClientHello at the start of a TLS connection
// without terminating it, so that a tls-passthrough listener can route the
// connection by server name and then forward every byte untouched,
// including the ones read here.
//
// Parse is a strict, allocation-light parser of TLS records carrying a
// ClientHello (RFC 8446 4.1.2, RFC 5246 7.4.1.2): the handshake message may
// span several records, and everything it declares must fit in what it
// holds. It extracts the server name (RFC 6066 3) and the ALPN protocols
// (RFC 7301). It is fuzzed (FuzzParse).
package tlspass

import (
	"errors"
	"io"
	"net"
	"time"
)

// Limits.
const (
	// MaxHelloBytes bounds the bytes read while looking for a complete
	// ClientHello (records included). Real ones are under 2 KiB, or about
	// 2 KiB with post-quantum key shares.
	MaxHelloBytes = 16 << 10
	// maxRecord is the largest TLS plaintext record (RFC 8446 5.1).
	maxRecord = 1 << 14
)

// Errors of Parse and Read.
var (
	// ErrNotTLS: the bytes are not a TLS handshake record.
	ErrNotTLS = errors.New("tlspass: not a TLS handshake")
	// ErrIncomplete: the data ends before the ClientHello does.
	ErrIncomplete = errors.New("tlspass: incomplete ClientHello")
	// ErrMalformed: the ClientHello breaks the TLS encoding rules.
	ErrMalformed = errors.New("tlspass: malformed ClientHello")
	// ErrTooLarge: no complete ClientHello within MaxHelloBytes.
	ErrTooLarge = errors.New("tlspass: ClientHello larger than the limit")
)

// Hello is what routing needs of a ClientHello.
type Hello struct {
	// ServerName is the SNI host name, lowercase without a trailing dot;
	// "" when the client sent none.
	ServerName string
	// ALPN lists the offered application protocols.
	ALPN []string
	// Len is the number of bytes of data the ClientHello's records took.
	Len int
}

// Read reads from c until it holds a complete ClientHello and parses it.
// It returns every byte read (the ClientHello and anything after it),
// which the caller forwards first. buf is used as the read buffer when
// large enough. The read deadline of c is set to deadline and cleared
// afterwards.
func Read(c net.Conn, buf []byte, deadline time.Time) (Hello, []byte, error) {
	if cap(buf) < 2048 {
		buf = make([]byte, 0, 2048)
	}
	buf = buf[:0]
	if err := c.SetReadDeadline(deadline); err != nil {
		return Hello{}, nil, err
	}
	defer c.SetReadDeadline(time.Time{})
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= MaxHelloBytes {
				return Hello{}, buf, ErrTooLarge
			}
			nb := make([]byte, len(buf), min(2*cap(buf), MaxHelloBytes))
			copy(nb, buf)
			buf = nb
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		h, perr := Parse(buf)
		if perr == nil {
			return h, buf, nil
		}
		if !errors.Is(perr, ErrIncomplete) {
			return Hello{}, buf, perr
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Hello{}, buf, err
		}
	}
}

// Parse parses the ClientHello at the start of data, which holds TLS
// records as they came from the client. It returns ErrIncomplete when
// data ends before the ClientHello does.
func Parse(data []byte) (Hello, error) {
	msg, used, err := handshakeMessage(data)
	if err != nil {
		return Hello{}, err
	}
	h, err := parseClientHello(msg)
	h.Len = used
	return h, err
}

// handshakeMessage reassembles the first handshake message from the
// handshake records at the start of data. It returns the message body and
// the bytes of data it took.
func handshakeMessage(data []byte) (body []byte, used int, err error) {
	var msg []byte
	need := -1 // message length with its 4-byte header, once known
	for off := 0; ; {
		if len(data)-off < 5 {
			if off == 0 && len(data) > 0 && data[0] != 22 {
				return nil, 0, ErrNotTLS
			}
			return nil, 0, ErrIncomplete
		}
		typ, major, n := data[off], data[off+1], int(data[off+3])<<8|int(data[off+4])
		if typ != 22 || major != 3 {
			if off == 0 {
				return nil, 0, ErrNotTLS
			}
			return nil, 0, ErrMalformed // another record type inside the hello
		}
		if n == 0 || n > maxRecord {
			return nil, 0, ErrMalformed
		}
		if len(data)-off-5 < n {
			return nil, 0, ErrIncomplete
		}
		frag := data[off+5 : off+5+n]
		off += 5 + n
		if msg == nil && need < 0 && len(frag) >= 4 {
			// The common case: the whole message in the first record.
			if frag[0] != 1 {
				return nil, 0, ErrMalformed
			}
			need = 4 + (int(frag[1])<<16 | int(frag[2])<<8 | int(frag[3]))
			if need <= len(frag) {
				if need != len(frag) {
					return nil, 0, ErrMalformed // trailing data in the record
				}
				return frag[4:need], off, nil
			}
		}
		msg = append(msg, frag...)
		if need < 0 && len(msg) >= 4 {
			if msg[0] != 1 {
				return nil, 0, ErrMalformed
			}
			need = 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		}
		if need > MaxHelloBytes {
			return nil, 0, ErrTooLarge
		}
		if need >= 0 && len(msg) >= need {
			if len(msg) != need {
				return nil, 0, ErrMalformed
			}
			return msg[4:need], off, nil
		}
	}
}

// reader walks a byte string of TLS vectors.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(b[0])<<8 | int(b[1])
}

// vec8 and vec16 read a vector with a one- or two-byte length.
func (r *reader) vec8() reader  { return reader{b: r.bytes(r.u8()), bad: r.bad} }
func (r *reader) vec16() reader { return reader{b: r.bytes(r.u16()), bad: r.bad} }

// Extension types.
const (
	extServerName = 0
	extALPN       = 16
)

func parseClientHello(msg []byte) (Hello, error) {
	var h Hello
	r := reader{b: msg}
	if v := r.u16(); v>>8 != 3 {
		return h, ErrMalformed
	}
	r.bytes(32) // random
	if sid := r.vec8(); len(sid.b) > 32 {
		return h, ErrMalformed
	}
	suites := r.vec16()
	if len(suites.b) == 0 || len(suites.b)%2 != 0 {
		return h, ErrMalformed
	}
	if comp := r.vec8(); len(comp.b) == 0 {
		return h, ErrMalformed
	}
	if r.bad {
		return h, ErrMalformed
	}
	if len(r.b) == 0 {
		return h, nil // no extensions
	}
	exts := r.vec16()
	if r.bad || len(r.b) != 0 {
		return h, ErrMalformed
	}
	var seen [2]bool
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec16()
		if exts.bad {
			return h, ErrMalformed
		}
		switch typ {
		case extServerName:
			if seen[0] {
				return h, ErrMalformed
			}
			seen[0] = true
			name, err := parseServerName(data)
			if err != nil {
				return h, err
			}
			h.ServerName = name
		case extALPN:
			if seen[1] {
				return h, ErrMalformed
			}
			seen[1] = true
			protos, err := parseALPN(data)
			if err != nil {
				return h, err
			}
			h.ALPN = protos
		}
	}
	return h, nil
}

// parseServerName returns the host_name entry of a server_name extension.
func parseServerName(data reader) (string, error) {
	list := data.vec16()
	if list.bad || len(data.b) != 0 || len(list.b) == 0 {
		return "", ErrMalformed
	}
	var name string
	for len(list.b) > 0 {
		typ := list.u8()
		v := list.vec16()
		if list.bad {
			return "", ErrMalformed
		}
		if typ != 0 {
			continue // unknown name types are skipped (RFC 6066 3)
		}
		if name != "" {
			return "", ErrMalformed // one host_name at most
		}
		n, ok := hostName(v.b)
		if !ok {
			return "", ErrMalformed
		}
		name = n
	}
	return name, nil
}

// hostName lowercases and checks a DNS host name: labels of letters,
// digits, '-' and '_', 1 to 63 bytes, 253 in all, one trailing dot
// allowed and removed.
func hostName(b []byte) (string, bool) {
	if len(b) > 0 && b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || len(b) > 253 {
		return "", false
	}
	out := make([]byte, len(b))
	label := 0
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if label == 0 {
				return "", false
			}
			label = 0
			out[i] = c
			continue
		default:
			return "", false
		}
		if label++; label > 63 {
			return "", false
		}
		out[i] = c
	}
	if label == 0 {
		return "", false
	}
	return string(out), true
}

// parseALPN returns the protocols of an ALPN extension.
func parseALPN(data reader) ([]string, error) {
	list := data.vec16()
	if list.bad || len(data.b) != 0 || len(list.b) == 0 {
		return nil, ErrMalformed
	}
	var out []string
	for len(list.b) > 0 {
		p := list.vec8()
		if list.bad || len(p.b) == 0 {
			return nil, ErrMalformed
		}
		out = append(out, string(p.b))
	}
	return out, nil
}
