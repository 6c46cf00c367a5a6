package proxy

import (
	"crypto/tls"
	"fmt"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// memberTLSConfig is the TLS configuration of the dials to a pool's
// members that verifies them as the pool's tls says. A tls that did not
// compile fails every handshake with its reason.
func memberTLSConfig(t *snapshot.BackendTLS) *tls.Config {
	if t.Refused != "" {
		why := t.Refused
		return &tls.Config{
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: true, //nolint:gosec // VerifyConnection refuses every member
			VerifyConnection: func(tls.ConnectionState) error {
				return fmt.Errorf("%w: %s", l7.ErrMemberCertificate, why)
			},
		}
	}
	m := &l7.MemberTLS{Roots: t.Roots, ServerName: t.ServerName, DNSNames: t.DNSNames, URIs: t.URIs}
	return m.Config()
}

// ChargeHandshake charges a TLS handshake to one of the tenant's members
// to the tenant's handshake CPU budget, as a ClientHello to one of its
// listeners is (cpubudget.Tenant.Hello: the key exchange and the
// verification of the member's chain cost about what a listener's
// key exchange does). Over budget the dial fails (503).
func (t *tenantBudget) ChargeHandshake() error {
	if t.p.cfg.CPU == nil {
		return nil
	}
	return t.p.cfg.CPU.Tenant(t.name).Hello()
}

var _ l7.HandshakeCharger = (*tenantBudget)(nil)
