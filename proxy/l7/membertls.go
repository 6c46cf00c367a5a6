package l7

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// ErrMemberCertificate: a TLS member's certificate failed verification
// (MemberTLS): not signed by the backend's CAs, expired, or holding
// neither the server name nor one of the subject alternative names. The
// client gets 502 and the request's outcome is OutcomeMemberTLS.
var ErrMemberCertificate = errors.New("member certificate not trusted")

// MemberTLS is how a backend verifies its TLS members (Gateway API
// BackendTLSPolicy): Config turns it into the BackendOptions.TLS that
// every HTTP1TLS and H2TLS dial of the backend uses.
type MemberTLS struct {
	// Roots are the CAs the member's chain must end in; nil takes the
	// host's system roots.
	Roots *x509.CertPool
	// ServerName is sent as SNI, and the certificate must hold it when
	// DNSNames and URIs are empty.
	ServerName string
	// DNSNames and URIs, when any is set, replace ServerName in the
	// name check: the certificate must hold one of them. A DNS name
	// "*.example" matches the certificate's wildcard name "*.example"
	// only; URIs are compared exactly.
	DNSNames, URIs []string
}

// Config returns the TLS configuration of the backend's member dials.
// Chain and names are checked by VerifyConnection (so that the
// subject alternative names, not the server name, decide when they are
// set); a failure wraps ErrMemberCertificate.
func (m *MemberTLS) Config() *tls.Config {
	return &tls.Config{
		ServerName:         m.ServerName,
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies the chain and the names
		VerifyConnection:   m.verify,
	}
}

func (m *MemberTLS) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the member sent no certificate", ErrMemberCertificate)
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: m.Roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if len(cs.PeerCertificates) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("%w: %w", ErrMemberCertificate, err)
	}
	if len(m.DNSNames) == 0 && len(m.URIs) == 0 {
		if err := leaf.VerifyHostname(m.ServerName); err != nil {
			return fmt.Errorf("%w: %w", ErrMemberCertificate, err)
		}
		return nil
	}
	for _, n := range m.DNSNames {
		if strings.HasPrefix(n, "*.") {
			for _, d := range leaf.DNSNames {
				if strings.EqualFold(d, n) {
					return nil
				}
			}
			continue
		}
		if leaf.VerifyHostname(n) == nil {
			return nil
		}
	}
	for _, u := range m.URIs {
		for _, cu := range leaf.URIs {
			if cu.String() == u {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: the certificate holds none of the %d subject alternative names the backend accepts", ErrMemberCertificate, len(m.DNSNames)+len(m.URIs))
}

// HandshakeCharger is implemented by the Descriptors of a MemberBudget
// whose owner pays for the TLS handshakes to its members: each TLS dial
// calls ChargeHandshake before its handshake and fails with
// ErrMemberLimit (503) when it returns an error.
type HandshakeCharger interface {
	ChargeHandshake() error
}

// budgetDescriptors is the Descriptors of the key's budget, or nil.
func (k poolKey) budgetDescriptors() Descriptors {
	if k.budget == nil {
		return nil
	}
	return k.budget.d
}
