package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestDefaultCertName(t *testing.T) {
	certFor := func(cn string, names ...string) []byte {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, DNSNames: names,
			NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	long := strings.Repeat("a", 60) + ".acme.example"
	tests := []struct {
		name string
		pem  []byte
		want string
	}{
		{"first SAN", certFor("x", "Shop.Acme.Example", "api.acme.example"), "shop-acme-example"},
		{"wildcard", certFor("x", "*.acme.example"), "wildcard-acme-example"},
		{"common name only", certFor("legacy.acme.example"), "legacy-acme-example"},
		{"long", certFor("x", long), strings.Repeat("a", 60) + "-ac"},
		{"not PEM", []byte("nope"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := defaultCertName(tc.pem)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q %v, want %q", got, err, tc.want)
			}
		})
	}
}
