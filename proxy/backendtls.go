package proxy

import (
	"crypto"
	"crypto/tls"
	"fmt"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// memberTLSConfig is the TLS configuration of the dials to a pool's
// members that verifies them as the pool's tls says. A tls that did not
// compile fails every handshake with its reason.
//
// A pool that presents a client certificate takes it from the tenant's
// uploaded certificates at each handshake (a renewed one is used at
// once), its signatures charged to the tenant's handshake CPU budget;
// one this host has not loaded fails the handshake (502, member-tls).
func memberTLSConfig(t *snapshot.BackendTLS, tb *tenantBudget) *tls.Config {
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
	cfg := m.Config()
	if name := t.ClientCertificate; name != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return tb.clientCertificate(name)
		}
	}
	return cfg
}

// clientCertificate is the tenant's uploaded certificate name, its key
// charged to the tenant's handshake CPU budget.
func (t *tenantBudget) clientCertificate(name string) (*tls.Certificate, error) {
	var c *tls.Certificate
	if t != nil && t.p.cfg.ClientCertificate != nil {
		c = t.p.cfg.ClientCertificate(t.name, name)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: the client certificate %s is not loaded on this host", l7.ErrMemberCertificate, name)
	}
	out := *c
	if s, ok := c.PrivateKey.(crypto.Signer); ok && t.p.cfg.CPU != nil {
		out.PrivateKey = t.p.cfg.CPU.Tenant(t.name).Signer(s)
	}
	return &out, nil
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
