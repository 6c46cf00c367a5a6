package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// CheckUpload validates an uploaded certificate for tenant t at time now:
// the name is a DNS label, the PEM holds a certificate chain (leaf first)
// of at most api.MaxCertificateChain certificates, whose leaf has a key
// that api.KeyProblem accepts (every full handshake signs with it, so its
// cost is bounded before the private key is even parsed) and matches the
// private key, the leaf is valid at now, and every name it covers
// (wildcards too) lies inside the tenant's domains. It
// returns the Certificate object to store and the secret to keep in the
// certificate store: the chain and the key, re-encoded as PEM.
func CheckUpload(t *pb.Tenant, name string, certPEM, keyPEM []byte, now time.Time) (*pb.Certificate, []byte, error) {
	ref := "Certificate " + t.GetName() + "/" + name
	fail := func(field, format string, args ...any) error {
		return &api.ValidationError{Ref: ref, Errors: []api.FieldError{{Field: field, Reason: fmt.Sprintf(format, args...)}}}
	}
	if !api.IsLabel(name) {
		return nil, nil, fail("name", "%q must be 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit", name)
	}
	if len(certPEM) > api.MaxCertificatePEMLen {
		return nil, nil, fail("cert", "is %d bytes; at most %d (the certificate and its intermediates, no root or bundle)", len(certPEM), api.MaxCertificatePEMLen)
	}
	if len(keyPEM) > api.MaxCertificateKeyPEMLen {
		return nil, nil, fail("key", "is %d bytes; at most %d (one private key; %s)", len(keyPEM), api.MaxCertificateKeyPEMLen, api.AcceptedKeys)
	}
	var chain []*x509.Certificate
	var chainPEM []byte
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if len(chain) == api.MaxCertificateChain {
			return nil, nil, fail("cert", "holds more than %d certificates; give the server's certificate and its intermediates only", api.MaxCertificateChain)
		}
		if b.Type != "CERTIFICATE" {
			return nil, nil, fail("cert", "holds a %q PEM block; give the certificate chain here and the key in --key", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, fail("cert", "certificate %d of the chain cannot be parsed: %v", len(chain)+1, err)
		}
		chain = append(chain, c)
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})...)
	}
	if len(chain) == 0 {
		return nil, nil, fail("cert", "holds no PEM certificate; give the chain in PEM, the server's certificate first")
	}
	if why := api.KeyProblem(chain[0].PublicKey); why != "" {
		return nil, nil, fail("cert", "%s (every full handshake signs with it)", why)
	}
	pair, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, nil, fail("key", "the private key does not match the certificate's public key")
		}
		return nil, nil, fail("key", "is not a usable PEM private key: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		return nil, nil, fail("key", "cannot be stored: %v", err)
	}
	leaf := chain[0]
	switch {
	case now.After(leaf.NotAfter):
		return nil, nil, fail("cert", "expired on %s; upload a current certificate", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, nil, fail("cert", "is not valid before %s; upload it once it is", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	hosts, problem := leafHosts(leaf, t.GetDomains())
	if problem != "" {
		return nil, nil, fail("cert", "%s", problem)
	}
	c := &pb.Certificate{
		Name:     name,
		Tenant:   t.GetName(),
		Hosts:    hosts,
		Source:   SourceUploaded,
		Issuer:   issuerName(leaf.Issuer.CommonName, leaf.Issuer.String()),
		NotAfter: timestamppb.New(leaf.NotAfter),
		State:    StateValid,
	}
	secret := append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	return c, secret, nil
}

// leafHosts returns the names a certificate covers, or why they may not be
// served for a tenant with domains. URI names (a SPIFFE ID, "*") identify
// no host a TLS client checks, so they are ignored; IP addresses and
// e-mail addresses are refused. Without DNS subject alternative names the
// common name counts when it is a DNS name ("shop.acme.example", not
// "default" or "Acme Root"). A certificate that names no host is valid and
// covers nothing: a listener that lists it serves it only as its default,
// to clients whose server name none of its other certificates covers.
func leafHosts(leaf *x509.Certificate, domains []string) ([]string, string) {
	if len(leaf.IPAddresses) > 0 || len(leaf.EmailAddresses) > 0 {
		return nil, "names IP addresses or e-mail addresses; only DNS names inside the tenant's domains are served"
	}
	names := leaf.DNSNames
	if cn := leaf.Subject.CommonName; len(names) == 0 && cn != "" && isCommonNameHost(cn) {
		names = []string{cn}
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		h := strings.ToLower(strings.TrimSuffix(n, "."))
		base, wildcard := strings.CutPrefix(h, "*.")
		// A wildcard may cover a one-label domain the operator gave the
		// tenant ("*.org" when its domains hold org).
		if net.ParseIP(base) != nil || !isHostName(base) && !(wildcard && api.IsLabel(base)) {
			return nil, fmt.Sprintf("names %q, which is not a DNS name or a wildcard like *.acme.example", n)
		}
		if !api.HostInDomains(base, domains) {
			return nil, fmt.Sprintf("names %s, which is not inside the tenant's domains (%s)", n, listOr(domains, "the tenant has none; the operator sets them"))
		}
		out = append(out, h)
	}
	return out, ""
}

// isCommonNameHost reports whether a common name reads as a host name:
// a DNS name of two labels or more, or a wildcard of a domain.
func isCommonNameHost(cn string) bool {
	h := strings.ToLower(strings.TrimSuffix(cn, "."))
	base, wildcard := strings.CutPrefix(h, "*.")
	return net.ParseIP(base) == nil && (isHostName(base) || wildcard && api.IsLabel(base))
}

func listOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ", ")
}
