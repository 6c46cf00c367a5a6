package l7

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strings"
)

// appendRequestID appends 32 random hex digits. The runtime's per-thread
// generator makes this a few nanoseconds, without a system call.
func appendRequestID(b []byte) []byte {
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	return hex.AppendEncode(b, raw[:])
}

// clientAddrs is what the forwarding headers say about a client
// connection, rendered once per connection.
type clientAddrs struct {
	addr    netip.Addr
	ip      []byte // "192.0.2.1", "2001:db8::1"
	fwdFor  []byte // Forwarded for= value: 192.0.2.1 or "[2001:db8::1]"
	https   bool
	trusted bool // its X-Forwarded-* and Forwarded fields are kept
	// certHeader and subject are ConnInfo's ClientCertHeader and
	// ClientSubject.
	certHeader, subject string
}

// clientCert takes the client certificate fields of info.
func (ca *clientAddrs) clientCert(info *ConnInfo) {
	ca.certHeader, ca.subject = info.ClientCertHeader, info.ClientSubject
}

// setClientCert drops the client's own certHeader field from h, in any
// case and with '_' for '-', and sets it to the verified subject.
func (ca *clientAddrs) setClientCert(h http.Header) {
	for k := range h {
		if len(k) == len(ca.certHeader) && strings.EqualFold(strings.ReplaceAll(k, "_", "-"), ca.certHeader) {
			delete(h, k)
		}
	}
	if ca.subject != "" {
		h[ca.certHeader] = []string{ca.subject}
	}
}

func newClientAddrs(client netip.AddrPort, https bool, trusted []netip.Prefix) clientAddrs {
	a := client.Addr().Unmap().WithZone("")
	ca := clientAddrs{addr: a, https: https}
	if !a.IsValid() {
		ca.ip = []byte("unknown")
		ca.fwdFor = []byte("unknown")
		return ca
	}
	ca.ip = a.AppendTo(nil)
	if a.Is6() {
		ca.fwdFor = append(append(append([]byte(`"[`), ca.ip...), ']'), '"')
	} else {
		ca.fwdFor = ca.ip
	}
	for _, p := range trusted {
		if p.Contains(a) {
			ca.trusted = true
			break
		}
	}
	return ca
}

// trusted returns the networks whose forwarding fields a connection keeps.
func (s *Server) trusted(info *ConnInfo) []netip.Prefix {
	if info.TrustedProxies != nil {
		return info.TrustedProxies
	}
	return s.cfg.TrustedProxies
}

func (ca *clientAddrs) proto() string {
	if ca.https {
		return "https"
	}
	return "http"
}

// forwardKind reports whether a field carries forwarding information that
// an untrusted client may not set: the LB drops it and, for the fields it
// owns (X-Forwarded-For, -Proto, -Host, Forwarded, X-Request-Id), sends
// its own. The others are every field clientAddrName matches (X-Real-IP,
// CF-Connecting-IP, X-Forwarded-*, X_Forwarded_For, ...).
func forwardKind(k hdrKind) bool {
	switch k {
	case hXFF, hXFProto, hXFHost, hForwarded, hRequestID, hXRealIP, hTrueClientIP, hXClientIP, hXFPort, hClientAddr:
		return true
	}
	return false
}

// dropUntrustedFields deletes from h the fields forwardKind matches, for
// the paths that forward net/http headers.
func dropUntrustedFields(h http.Header) {
	for k := range h {
		if forwardKind(classify(unsafeBytes(k))) {
			delete(h, k)
		}
	}
}

// appendRequestHead appends the head forwarded to a member: the request
// line in origin form with HTTP/1.1, the client's fields without the
// hop-by-hop ones (copied as runs of whole lines), and the forwarding
// fields. path is the cleaned path when cleaned is set.
func appendRequestHead(dst, b []byte, h *reqHead, ca *clientAddrs, path []byte, cleaned bool, upgrade []byte) []byte {
	dst = append(dst, b[h.mS:h.mE]...)
	dst = append(dst, ' ')
	switch {
	case h.form == formAsterisk:
		dst = append(dst, '*')
	case cleaned:
		dst = append(dst, path...)
		dst = append(dst, b[h.qS:h.tE]...)
	case h.form == formAbsolute:
		if h.pS == h.tE || b[h.pS] != '/' {
			dst = append(dst, '/')
		}
		dst = append(dst, b[h.pS:h.tE]...)
	default:
		dst = append(dst, b[h.tS:h.tE]...)
	}
	dst = append(dst, " HTTP/1.1\r\n"...)

	run := -1
	for i := range h.fields {
		f := &h.fields[i]
		if f.drop || (!ca.trusted && forwardKind(f.kind)) {
			if run >= 0 {
				dst = append(dst, b[run:f.ns]...)
				run = -1
			}
			continue
		}
		if run < 0 {
			run = int(f.ns)
		}
	}
	if run >= 0 {
		dst = append(dst, b[run:h.fields[len(h.fields)-1].le]...)
	}

	host := h.hostValue(b)
	if h.form == formAbsolute {
		dst = append(dst, "Host: "...)
		dst = append(dst, host...)
		dst = append(dst, "\r\n"...)
	}
	if upgrade != nil {
		dst = append(dst, "Connection: upgrade\r\nUpgrade: "...)
		dst = append(dst, upgrade...)
		dst = append(dst, "\r\n"...)
	}
	if h.teTrailers {
		dst = append(dst, "TE: trailers\r\n"...)
	}
	return appendForwardFields(dst, ca, host, h.hasXFProto, h.hasXFHost, h.requestID >= 0)
}

// fieldsSeen records, over the fields of an HTTP/2 client's request,
// what the forwarding fields added after them depend on: TE: trailers was
// asked for, and which of X-Forwarded-Proto, X-Forwarded-Host and
// X-Request-Id a trusted client sent (they are kept, not added again).
type fieldsSeen struct{ te, proto, host, id bool }

// pass reports whether a client's field goes on to a member, and its
// kind: pseudo-fields, Host and TE do not (TE is sent again as
// "trailers" when it was asked for), nor the forwarding fields of a
// client that is not trusted. HTTP/2 clients' fields take it to HTTP/1.1
// members and to HTTP/2 members alike.
func (fs *fieldsSeen) pass(name string, pseudo, trusted bool) (hdrKind, bool) {
	if pseudo {
		return 0, false
	}
	k := classify(unsafeBytes(name))
	switch k {
	case hHost:
		return k, false
	case hTE:
		fs.te = true
		return k, false
	}
	if forwardKind(k) {
		if !trusted {
			return k, false
		}
		fs.proto = fs.proto || k == hXFProto
		fs.host = fs.host || k == hXFHost
		fs.id = fs.id || k == hRequestID
	}
	return k, true
}

// appendForwardFields ends an HTTP/1.1 request head sent to a member with
// the forwarding fields (X-Forwarded-For/-Proto/-Host, Forwarded,
// X-Request-Id) for a client of ca asking for host, as every codec sends
// them: a trusted client's own X-Forwarded-Proto, X-Forwarded-Host and
// X-Request-Id (hasProto, hasHost, hasID: they were kept) are not added
// again.
func appendForwardFields(dst []byte, ca *clientAddrs, host []byte, hasProto, hasHost, hasID bool) []byte {
	dst = append(dst, "X-Forwarded-For: "...)
	dst = append(dst, ca.ip...)
	if !ca.trusted || !hasProto {
		dst = append(dst, "\r\nX-Forwarded-Proto: "...)
		dst = append(dst, ca.proto()...)
	}
	if len(host) > 0 && (!ca.trusted || !hasHost) {
		dst = append(dst, "\r\nX-Forwarded-Host: "...)
		dst = append(dst, host...)
	}
	dst = append(dst, "\r\nForwarded: for="...)
	dst = append(dst, ca.fwdFor...)
	if len(host) > 0 {
		dst = append(dst, ";host="...)
		dst = appendForwardedValue(dst, host)
	}
	dst = append(dst, ";proto="...)
	dst = append(dst, ca.proto()...)
	if !hasID || !ca.trusted {
		dst = append(dst, "\r\nX-Request-Id: "...)
		dst = appendRequestID(dst)
	}
	return append(dst, "\r\n\r\n"...)
}

// appendForwardedValue appends v as a token, or quoted when it is not one
// (a host with a port or an IPv6 literal). v holds no quote or backslash:
// hosts are validated before.
func appendForwardedValue(dst, v []byte) []byte {
	for _, c := range v {
		if !tchar[c] {
			dst = append(dst, '"')
			dst = append(dst, v...)
			return append(dst, '"')
		}
	}
	return append(dst, v...)
}

// appendResponseHead appends the head relayed to the client: the status
// line with HTTP/1.1, the member's fields without the hop-by-hop ones, and
// the connection fields the client needs, and Alt-Svc when altSvc is not
// empty.
func appendResponseHead(dst, b []byte, h *respHead, conn, altSvc string, dechunk bool) []byte {
	dst = append(dst, "HTTP/1.1"...)
	dst = append(dst, b[8:h.sl]...)
	run := -1
	for i := range h.fields {
		f := &h.fields[i]
		if f.drop || (dechunk && f.kind == hTransferEncoding) {
			if run >= 0 {
				dst = append(dst, b[run:f.ns]...)
				run = -1
			}
			continue
		}
		if run < 0 {
			run = int(f.ns)
		}
	}
	if run >= 0 {
		dst = append(dst, b[run:h.fields[len(h.fields)-1].le]...)
	}
	dst = append(dst, conn...)
	if altSvc != "" {
		dst = append(dst, "Alt-Svc: "...)
		dst = append(dst, altSvc...)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// requestIDIn returns the X-Request-Id value of a request head built by
// appendRequestHead, for the access log.
func requestIDIn(head []byte) string {
	const field = "\r\nX-Request-Id: "
	i := bytes.Index(head, []byte(field))
	if i < 0 {
		return ""
	}
	v := head[i+len(field):]
	if j := bytes.IndexByte(v, '\r'); j >= 0 {
		v = v[:j]
	}
	return string(v)
}
