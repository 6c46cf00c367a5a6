package api

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"fmt"
)

// MaxRSAKeyBits bounds every RSA key the hosts sign with: an uploaded
// certificate's (each full handshake signs with it) and an HTTPS health
// check's client key (each check's handshake may). A private-key
// operation costs about the cube of the key's size: 2048 bits about 1 ms
// of CPU, 4096 bits about 10 ms, 16384 bits about 2 s.
const MaxRSAKeyBits = 4096

// Bounds of an uploaded certificate (the admin API's `cert upload` and the
// agent's kubernetes.io/tls Secrets alike).
const (
	// MaxCertificatePEMLen bounds the PEM certificate chain.
	MaxCertificatePEMLen = 64 << 10
	// MaxCertificateKeyPEMLen bounds the PEM private key.
	MaxCertificateKeyPEMLen = 16 << 10
	// MaxCertificateChain bounds the certificates of the chain: the leaf
	// and its intermediates, sent in every full handshake.
	MaxCertificateChain = 8
)

// AcceptedKeys says which keys KeyProblem accepts, for refusals.
const AcceptedKeys = "use an ECDSA P-256 or P-384, Ed25519, or RSA key of at most 4096 bits"

// KeyProblem says why a public key is refused for signing on the hosts,
// or "": only keys whose signature costs the hosts little are accepted
// (ECDSA P-256 and P-384, Ed25519, RSA of at most MaxRSAKeyBits). It is the
// one rule of uploaded certificates and health checks' client keys; check
// it on the certificate before the private key is parsed or used.
func KeyProblem(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return ""
		}
		return fmt.Sprintf("has an ECDSA key on curve %s; %s", k.Curve.Params().Name, AcceptedKeys)
	case ed25519.PublicKey:
		return ""
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n > MaxRSAKeyBits {
			return fmt.Sprintf("has an RSA key of %d bits; %s", n, AcceptedKeys)
		}
		return ""
	default:
		return fmt.Sprintf("has a key of type %T; %s", pub, AcceptedKeys)
	}
}
