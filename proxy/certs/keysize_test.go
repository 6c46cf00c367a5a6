package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// fixture reads a certificate and key made by openssl (RSA keys take
// seconds to generate): testdata/NAME.crt and .key, for shop.b.example.
func fixture(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	c, err := os.ReadFile("testdata/" + name + ".crt")
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile("testdata/" + name + ".key")
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// selfSignedWith returns a self-signed certificate for host with key, as
// PEM.
func selfSignedWith(t testing.TB, host string, key crypto.Signer) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}

// Every full handshake signs with an uploaded certificate's key: keys
// that cost the hosts much per handshake are refused at upload (the admin
// API's and the agents' alike go through CheckUpload), naming the field
// and the keys accepted, and so are chains longer than
// api.MaxCertificateChain and PEM past its bounds.
func TestCheckUploadBoundsTheKeyAndChain(t *testing.T) {
	t.Parallel()
	tenant := &pb.Tenant{Name: "b", Domains: []string{"b.example"}}
	now := time.Now()
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	p256Cert, p256Key := selfSignedWith(t, "shop.b.example", p256)
	p384Cert, p384Key := selfSignedWith(t, "shop.b.example", p384)
	p521Cert, p521Key := selfSignedWith(t, "shop.b.example", p521)
	edCert, edKeyPEM := selfSignedWith(t, "shop.b.example", edKey)
	rsa4096Cert, rsa4096Key := fixture(t, "rsa4096")
	rsa8192Cert, rsa8192Key := fixture(t, "rsa8192")
	long := bytes.Repeat(p256Cert, api.MaxCertificateChain) // the leaf and 8 more: 9
	long = append(long, p256Cert...)
	tests := []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"ECDSA P-256", p256Cert, p256Key, ""},
		{"ECDSA P-384", p384Cert, p384Key, ""},
		{"Ed25519", edCert, edKeyPEM, ""},
		{"RSA 4096", rsa4096Cert, rsa4096Key, ""},
		{"RSA 8192", rsa8192Cert, rsa8192Key, "cert: has an RSA key of 8192 bits; use an ECDSA P-256 or P-384, Ed25519, or RSA key of at most 4096 bits"},
		{"ECDSA P-521", p521Cert, p521Key, "cert: has an ECDSA key on curve P-521"},
		{"a chain of 9", long, p256Key, "cert: holds more than 8 certificates"},
		{"a long chain PEM", bytes.Repeat([]byte("x"), api.MaxCertificatePEMLen+1), p256Key, "cert: is 65537 bytes; at most 65536"},
		{"a long key PEM", p256Cert, bytes.Repeat([]byte("x"), api.MaxCertificateKeyPEMLen+1), "key: is 16385 bytes; at most 16384"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := CheckUpload(tenant, "shop", tc.cert, tc.key, now)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("got %v, want an invalid error with %q", err, tc.want)
			}
		})
	}
}

// A certificate stored before uploads were bounded is not served: the
// manager refuses to load an RSA key past api.MaxRSAKeyBits.
func TestStoredCostlyKeyIsNotLoaded(t *testing.T) {
	t.Parallel()
	c, _ := fixture(t, "rsa8192")
	if why := storedKeyProblem(c); !strings.Contains(why, "8192 bits") {
		t.Fatalf("storedKeyProblem = %q", why)
	}
	c, _ = fixture(t, "rsa4096")
	if why := storedKeyProblem(c); why != "" {
		t.Fatalf("storedKeyProblem(rsa4096) = %q", why)
	}
}
