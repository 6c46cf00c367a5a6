package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// Client certificate validation of https listeners (tls.clientValidation).
// The chain is verified in the handshake when a certificate is required
// (a client without a good one fails it), and after the handshake when it
// is optional and the listener passes the subject on; either way the
// check's CPU is charged to the tenant's handshake budget
// (cpubudget.Tenant.Verify), and past it the check is refused.

// Errors of client certificate checks.
var (
	// ErrNoClientCert: the listener requires a client certificate and
	// the client sent none.
	ErrNoClientCert = errors.New("certs: the listener requires a client certificate")
	// ErrClientCert: the client's certificate does not chain to the
	// listener's CAs (or is no client certificate).
	ErrClientCert = errors.New("certs: the client certificate is not signed by the listener's CAs")
)

// maxClientChain bounds the certificates a client chain may carry.
const maxClientChain = 8

// MaxSubjectLen bounds the subject passed to the members; a longer one
// is cut.
const MaxSubjectLen = 1024

// clientAuth makes cfg ask for client certificates as c says.
func (p *policy) clientAuth(cfg *tls.Config, c *snapshot.ClientTLS) {
	if !c.Required {
		cfg.ClientAuth = tls.RequestClientCert
		return
	}
	cfg.ClientAuth = tls.RequireAnyClientCert
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		return p.verifyClient(c, raw)
	}
}

// verifyClient checks a client's chain (leaf first) against c's CAs,
// charged to the listener's tenant.
func (p *policy) verifyClient(c *snapshot.ClientTLS, raw [][]byte) error {
	if len(raw) == 0 {
		return ErrNoClientCert
	}
	if len(raw) > maxClientChain {
		return fmt.Errorf("%w: a chain of %d certificates (at most %d)", ErrClientCert, len(raw), maxClientChain)
	}
	return p.cpu.Verify(func() error {
		certs := make([]*x509.Certificate, len(raw))
		for i, der := range raw {
			crt, err := x509.ParseCertificate(der)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrClientCert, err)
			}
			certs[i] = crt
		}
		opts := x509.VerifyOptions{Roots: c.CAs, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		for _, crt := range certs[1:] {
			opts.Intermediates.AddCert(crt)
		}
		if _, err := certs[0].Verify(opts); err != nil {
			return fmt.Errorf("%w: %w", ErrClientCert, err)
		}
		return nil
	})
}

// ClientSubject returns the subject of the verified client certificate of
// a handshake on l, to pass to the members in its subject header; "" when
// the listener passes none on, or the client sent no certificate that
// verifies. A required certificate was verified in the handshake (or in
// the one that made a resumed session); an optional one is verified here.
func (m *Manager) ClientSubject(l *snapshot.Listener, cs tls.ConnectionState) string {
	if l.TLS == nil || l.TLS.Client == nil || l.TLS.Client.SubjectHeader == "" || len(cs.PeerCertificates) == 0 {
		return ""
	}
	c := l.TLS.Client
	if !c.Required {
		raw := make([][]byte, len(cs.PeerCertificates))
		for i, crt := range cs.PeerCertificates {
			raw[i] = crt.Raw
		}
		if m.policy(l).verifyClient(c, raw) != nil {
			return ""
		}
	}
	return headerSafe(cs.PeerCertificates[0].Subject.String())
}

// headerSafe makes s a field value: control characters become '?', and
// it is cut to MaxSubjectLen bytes on a character boundary.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
	if len(s) > MaxSubjectLen {
		s = s[:MaxSubjectLen]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
