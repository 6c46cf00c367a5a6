package api

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// keyPair returns a self-signed certificate of the key's public half and
// the key, as PEM.
func keyPair(t *testing.T, key crypto.Signer) (certPEM, keyPEM string) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "teapot-lb-health"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// fixturePair reads a certificate and key made by openssl (RSA keys take
// seconds to generate).
func fixturePair(t *testing.T, name string) (certPEM, keyPEM string) {
	t.Helper()
	c, err := os.ReadFile("testdata/" + name + ".crt")
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile("testdata/" + name + ".key")
	if err != nil {
		t.Fatal(err)
	}
	return string(c), string(k)
}

// A tenant writes the client key of its load balancer's checks, and every
// check signs with it: keys that cost the hosts much per handshake, and CA
// bundles of many certificates, are refused with the field named.
func TestValidateHTTPSCheckRefusesCostlyClientKeys(t *testing.T) {
	ca, _ := selfSigned(t, "cluster CA")
	f := "pools.web.healthCheck.https"
	gen := func(c elliptic.Curve) crypto.Signer {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256Cert, p256Key := keyPair(t, gen(elliptic.P256()))
	p384Cert, p384Key := keyPair(t, gen(elliptic.P384()))
	p521Cert, p521Key := keyPair(t, gen(elliptic.P521()))
	edCert, edKeyPEM := keyPair(t, edKey)
	rsa4096Cert, rsa4096Key := fixturePair(t, "client-rsa4096")
	rsa6144Cert, rsa6144Key := fixturePair(t, "client-rsa6144")

	tests := []struct {
		name      string
		cert, key string
		want      expect
	}{
		{"ECDSA P-256", p256Cert, p256Key, pass()},
		{"ECDSA P-384", p384Cert, p384Key, pass()},
		{"Ed25519", edCert, edKeyPEM, pass()},
		{"RSA 4096", rsa4096Cert, rsa4096Key, pass()},
		{"RSA 6144", rsa6144Cert, rsa6144Key, bad(f+".clientCertPem", "RSA key of 6144 bits; use an ECDSA P-256 or P-384, Ed25519, or RSA key of at most 4096 bits")},
		{"ECDSA P-521", p521Cert, p521Key, bad(f+".clientCertPem", "ECDSA key on curve P-521")},
		// The certificate is checked before the key is parsed: a small
		// certificate does not carry a costly key past the check.
		{"RSA 6144 key under a P-256 certificate", p256Cert, rsa6144Key, bad(f+".clientCertPem", "are not a PEM certificate with its private key")},
		{"P-256 key under an RSA 6144 certificate", rsa6144Cert, p256Key, bad(f+".clientCertPem", "RSA key of 6144 bits")},
		{"chain whose first block is not a certificate", "junk", p256Key, bad(f+".clientCertPem", "holds no PEM certificate")},
	}
	c := baseCatalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			lb.Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{CaPem: ca, ClientCertPem: tt.cert, ClientKeyPem: tt.key}}
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}

	t.Run("CA bundle of too many certificates", func(t *testing.T) {
		lb := shopLB()
		many := strings.Repeat(ca, MaxCheckCACerts+1)
		if len(many) > MaxCheckCAPEMLen {
			t.Fatalf("%d certificates of %d bytes pass the length bound; the count bound is not what refuses them", MaxCheckCACerts+1, len(ca))
		}
		lb.Pools["web"].HealthCheck = &pb.HealthCheck{Https: &pb.HTTPSCheck{CaPem: many}}
		check(t, ValidateLoadBalancer(lb, c), bad(f+".caPem", "holds more than 32 certificates"))
		lb.Pools["web"].HealthCheck.Https.CaPem = strings.Repeat(ca, MaxCheckCACerts)
		check(t, ValidateLoadBalancer(lb, c), pass())
	})

	// What the bound buys, measured on this machine: one signature with
	// each key, as a check's handshake makes.
	if testing.Verbose() {
		for _, kp := range []struct{ name, key string }{{"P-256", p256Key}, {"RSA 4096", rsa4096Key}, {"RSA 6144", rsa6144Key}} {
			b, _ := pem.Decode([]byte(kp.key))
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			d := sha256.Sum256([]byte("handshake"))
			start := time.Now()
			if _, err := k.(crypto.Signer).Sign(rand.Reader, d[:], crypto.SHA256); err != nil {
				t.Fatal(err)
			}
			t.Logf("one signature with %s: %s", kp.name, time.Since(start))
		}
	}
}
