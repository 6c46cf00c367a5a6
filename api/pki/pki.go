// Package pki is the cluster's certificate authority: the CA created at
// bootstrap, certificates for LB hosts, admins and tenants, TLS settings for
// both ends of every connection, and join tokens.
//
// Identities live in the certificate's common name as "ROLE:NAME", with
// ROLE one of node, admin or tenant.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base32"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// ServerName is the DNS name every LB host's certificate carries; clients
// verify servers against it (and the cluster CA), whatever address they dial.
const ServerName = "teapot-lb"

// Roles found in certificate identities.
const (
	RoleNode   = "node"
	RoleAdmin  = "admin"
	RoleTenant = "tenant"
)

// Errors.
var (
	ErrBadToken = errors.New("malformed join token")
	ErrNoRole   = errors.New("certificate carries no teapot-lb identity")
)

// CA is the cluster certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed ECDSA P-256 CA valid for ten years.
func NewCA(clusterID string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "teapot-lb cluster CA " + clusterID, Organization: []string{"teapot-lb"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return LoadCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// LoadCA parses a CA certificate and key in PEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Fingerprint is the hex SHA-256 of the CA's public key; join tokens carry
// it so a joining host can tell the real cluster from an impostor.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is the hex SHA-256 of cert's SubjectPublicKeyInfo.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// Identity is what a certificate says about its holder.
type Identity struct {
	Role string
	Name string
	// UID is the tenant's uid (tenant credentials): a tenant deleted and
	// created again under the same name has another, and credentials of
	// the earlier one are refused. Carried as the Subject's OU "uid:UID".
	UID string
}

// uidPrefix marks the Subject OU that carries Identity.UID.
const uidPrefix = "uid:"

func (id Identity) String() string { return id.Role + ":" + id.Name }

// IssueRequest describes a certificate to issue.
type IssueRequest struct {
	Identity Identity
	// Server adds ServerName and the given addresses as SANs and the
	// server-auth usage; every certificate is good for client auth.
	Server bool
	IPs    []net.IP
	DNS    []string
	TTL    time.Duration // default one year
}

// Issue creates a key and a certificate for req. Both are PEM.
func (ca *CA) Issue(req IssueRequest) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	certPEM, err = ca.sign(&key.PublicKey, req)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	return certPEM, keyPEM, err
}

// SignCSR issues a certificate for the key in a PEM certificate request.
// The identity and names come from req, never from the request itself.
func (ca *CA) SignCSR(csrPEM []byte, req IssueRequest) ([]byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("certificate request is not PEM")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	return ca.sign(csr.PublicKey, req)
}

func (ca *CA) sign(pub any, req IssueRequest) ([]byte, error) {
	if req.Identity.Role == "" || req.Identity.Name == "" {
		return nil, errors.New("certificate needs a role and a name")
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = 365 * 24 * time.Hour
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.Identity.String(), Organization: []string{"teapot-lb"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if req.Identity.UID != "" {
		tmpl.Subject.OrganizationalUnit = []string{uidPrefix + req.Identity.UID}
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = append([]string{ServerName}, req.DNS...)
		tmpl.IPAddresses = req.IPs
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// NewCSR creates a key and a certificate request for it.
func NewCSR(id Identity) (csrPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: id.String()},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate request: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), keyPEM, nil
}

// IdentityOf reads the identity of a verified peer certificate.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	role, name, ok := strings.Cut(cert.Subject.CommonName, ":")
	if !ok || name == "" {
		return Identity{}, ErrNoRole
	}
	switch role {
	case RoleNode, RoleAdmin, RoleTenant:
		id := Identity{Role: role, Name: name}
		for _, ou := range cert.Subject.OrganizationalUnit {
			if uid, ok := strings.CutPrefix(ou, uidPrefix); ok {
				id.UID = uid
			}
		}
		return id, nil
	}
	return Identity{}, ErrNoRole
}

// ServerTLS is the TLS config of an LB host's listeners (API and Raft).
// Client certificates are verified against the CA when given; callers that
// require one check the identity per request (see IdentityOf). Set
// requireClient for listeners where every peer must present one.
func ServerTLS(caPEM, certPEM, keyPEM []byte, requireClient bool) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load key pair: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in PEM")
	}
	// Send the CA along so that a joining host can pin it (PinnedTLS).
	if block, _ := pem.Decode(caPEM); block != nil {
		pair.Certificate = append(pair.Certificate, block.Bytes)
	}
	auth := tls.VerifyClientCertIfGiven
	if requireClient {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   auth,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// ClientTLS is the TLS config of a client of an LB host: it presents its
// certificate (if any) and trusts only servers signed by the cluster CA.
func ClientTLS(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in PEM")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: ServerName, MinVersion: tls.VersionTLS13}
	if len(certPEM) > 0 {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load key pair: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// PinnedTLS trusts a server whose certificate chains to a CA with the given
// fingerprint, which is all a joining host knows of the cluster.
func PinnedTLS(fingerprint string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyPeerCertificate below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs = append(certs, c)
			}
			if len(certs) == 0 {
				return errors.New("server sent no certificate")
			}
			for _, c := range certs[1:] {
				if Fingerprint(c) == fingerprint {
					return verifyChain(certs[0], c)
				}
			}
			return fmt.Errorf("server's CA does not match the join token's fingerprint %.12s…", fingerprint)
		},
	}
}

func verifyChain(leaf, ca *x509.Certificate) error {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: ServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// ParseCert parses the first certificate in PEM data.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParseKey parses a PEM private key (PKCS#8, EC or PKCS#1).
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, errors.New("key cannot sign")
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("unsupported private key")
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

// JoinToken is a parsed join token: "teapot1.<ca-fingerprint>.<id>.<secret>".
type JoinToken struct {
	CAFingerprint string
	ID            string
	Secret        string
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewJoinToken creates a random token for a cluster with the given CA.
func NewJoinToken(caFingerprint string) JoinToken {
	id := make([]byte, 5)
	sec := make([]byte, 20)
	_, _ = rand.Read(id)
	_, _ = rand.Read(sec)
	return JoinToken{
		CAFingerprint: caFingerprint,
		ID:            strings.ToLower(b32.EncodeToString(id)),
		Secret:        strings.ToLower(b32.EncodeToString(sec)),
	}
}

func (t JoinToken) String() string {
	return "teapot1." + t.CAFingerprint + "." + t.ID + "." + t.Secret
}

// SecretHash is what the cluster stores for the token.
func (t JoinToken) SecretHash() []byte {
	sum := sha256.Sum256([]byte(t.Secret))
	return sum[:]
}

// MatchesHash reports whether the token's secret has the stored hash.
func (t JoinToken) MatchesHash(h []byte) bool {
	return subtle.ConstantTimeCompare(t.SecretHash(), h) == 1
}

// ParseJoinToken parses a token printed by `cluster join-token`.
func ParseJoinToken(s string) (JoinToken, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) != 4 || parts[0] != "teapot1" || len(parts[1]) != 64 || parts[2] == "" || len(parts[3]) < 16 {
		return JoinToken{}, ErrBadToken
	}
	if _, err := hex.DecodeString(parts[1]); err != nil {
		return JoinToken{}, ErrBadToken
	}
	return JoinToken{CAFingerprint: parts[1], ID: parts[2], Secret: parts[3]}, nil
}
