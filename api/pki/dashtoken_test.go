package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDashboardToken(t *testing.T) {
	ca, err := NewCA("c1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("c2")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	tok, claims, err := SignDashboardToken(ca.Key, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Role != RoleDashboardRead || claims.ExpiresAt() != now.Add(time.Hour) || claims.ID == "" {
		t.Fatalf("claims = %+v", claims)
	}
	wrongRole, err := signClaims(ca.Key, DashboardClaims{Role: RoleAdmin, ID: "x", Expires: now.Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	// Claims rewritten to last a year, with the original signature.
	longer := base64.RawURLEncoding.EncodeToString([]byte(`{"role":"dashboard-read","id":"` + claims.ID + `","iat":0,"exp":1900000000}`))
	// One bit of the signature flipped (in the decoded bytes, so the
	// token stays well-formed base64).
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	sig[len(sig)/2] ^= 1
	flipped := base64.RawURLEncoding.EncodeToString(sig)
	for _, tc := range []struct {
		name string
		pub  any
		tok  string
		at   time.Time
		want error
	}{
		{"valid", ca.Cert.PublicKey, tok, now.Add(59 * time.Minute), nil},
		{"expired", ca.Cert.PublicKey, tok, now.Add(time.Hour), ErrTokenExpired},
		{"other cluster", other.Cert.PublicKey, tok, now, ErrTokenSignature},
		{"wrong role", ca.Cert.PublicKey, wrongRole, now, ErrTokenRole},
		{"tampered claims", ca.Cert.PublicKey, parts[0] + "." + longer + "." + parts[2], now, ErrTokenSignature},
		{"tampered signature", ca.Cert.PublicKey, parts[0] + "." + parts[1] + "." + flipped, now, ErrTokenSignature},
		{"other prefix", ca.Cert.PublicKey, "x" + tok, now, ErrTokenMalformed},
		{"two parts", ca.Cert.PublicKey, parts[0] + "." + parts[1], now, ErrTokenMalformed},
		{"empty", ca.Cert.PublicKey, "", now, ErrTokenMalformed},
		{"huge", ca.Cert.PublicKey, tok + strings.Repeat("A", 2000), now, ErrTokenMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := VerifyDashboardToken(tc.pub, tc.tok, tc.at)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want == nil && got != claims {
				t.Fatalf("claims = %+v, want %+v", got, claims)
			}
		})
	}
}

func TestDashboardTokenKeys(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, signer := range map[string]struct {
		sign func() (string, error)
		pub  any
	}{
		"ed25519": {func() (string, error) { s, _, err := SignDashboardToken(edKey, now, time.Hour); return s, err }, edKey.Public()},
		"p384":    {func() (string, error) { s, _, err := SignDashboardToken(ecKey, now, time.Hour); return s, err }, ecKey.Public()},
	} {
		tok, err := signer.sign()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := VerifyDashboardToken(signer.pub, tok, now); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, _, err := SignDashboardToken(edKey, now, 30*time.Second); err == nil || !strings.Contains(err.Error(), "ttl") {
		t.Fatalf("short ttl: err = %v", err)
	}
	if _, _, err := SignDashboardToken(edKey, now, 8*24*time.Hour); err == nil {
		t.Fatal("ttl over the maximum was accepted")
	}
}
