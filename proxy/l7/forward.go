package l7

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
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
	// certField is certHeader in lower case with '-' for '_', as
	// eqFoldDash compares.
	certField string
}

// clientCert takes the client certificate fields of info.
func (ca *clientAddrs) clientCert(info *ConnInfo) {
	ca.certHeader, ca.subject = info.ClientCertHeader, info.ClientSubject
	ca.certField = strings.ToLower(strings.ReplaceAll(ca.certHeader, "_", "-"))
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

// forwarded reports whether the field name (any case) is one that
// forwardFields decides for the member: a field naming the client or the
// request (forwardKind) or the listener's certificate field. Route
// conditions, rate-limit keys and a backend's hashing key read such a
// field as the member receives it, never as the client sent it.
func (ca *clientAddrs) forwarded(name []byte) bool {
	return forwardKind(classify(name)) || ca.certField != "" && eqFoldDash(name, ca.certField)
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

// appendRequestHead makes the head c forwards to a member (in c.wb): the
// request line in origin form with HTTP/1.1, Host (empty when the client
// named no authority), the upgrade asked for, and the fields
// forwardFields decides from c.view (the client's lines copied as runs).
// path is the cleaned path when cleaned is set. It returns the request id
// sent.
func (c *clientConn) appendRequestHead(b []byte, path []byte, cleaned bool, upgrade []byte) []byte {
	h := &c.h
	dst := append(c.wb[:0], b[h.mS:h.mE]...)
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
	// An HTTP/1.1 request carries Host, empty when the target has no
	// authority (an empty Host field, HTTP/1.0 without one).
	dst = append(dst, "Host: "...)
	dst = append(dst, h.hostValue(b)...)
	dst = append(dst, "\r\n"...)
	if upgrade != nil {
		dst = append(dst, "Connection: upgrade\r\nUpgrade: "...)
		dst = append(dst, upgrade...)
		dst = append(dst, "\r\n"...)
	}
	c.sink.dst, c.sink.b = dst, b
	id := forwardFields(&c.view, &c.ca, &c.sink, &c.fw)
	c.sink.done()
	c.wb = append(c.sink.dst, "\r\n"...)
	c.sink.dst, c.sink.b = nil, nil
	return id
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

// appendResponseHead makes the head relayed to the client (in c.wb): the
// status line with HTTP/1.1, the fields responseFields decides from the
// member's head b (its lines copied as runs), the member's chunked
// framing unless dechunk, and conn, the connection field the client
// needs.
func (c *clientConn) appendResponseHead(b []byte, h *respHead, conn string, dechunk bool) {
	dst := append(c.wb[:0], "HTTP/1.1"...)
	dst = append(dst, b[8:h.sl]...)
	c.sink.dst, c.sink.b = dst, b
	c.rs.v.h1b, c.rs.v.h1 = b, &h.headLines
	responseFields(&c.rs.v, c.info.AltSvc, !dechunk, &c.sink, &c.rs)
	c.sink.done()
	dst = append(c.sink.dst, conn...)
	c.wb = append(dst, "\r\n"...)
	c.sink.dst, c.sink.b = nil, nil
	c.rs.v.h1b, c.rs.v.h1 = nil, nil
}
