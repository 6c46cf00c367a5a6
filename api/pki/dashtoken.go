package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// RoleDashboardRead is the only role a dashboard token carries: it opens
// the read-only dashboard of `serve --web-addr` and nothing else.
const RoleDashboardRead = "dashboard-read"

// Bounds of a dashboard token's lifetime.
const (
	MinDashboardTTL = time.Minute
	MaxDashboardTTL = 7 * 24 * time.Hour
)

// dashboardPrefix starts every dashboard token; the signature covers it
// with the claims, so a token cannot be replayed as another format.
const dashboardPrefix = "tlbd1"

// maxDashboardToken bounds what a verifier parses.
const maxDashboardToken = 1024

// Errors of dashboard tokens.
var (
	ErrTokenMalformed = errors.New("dashboard token is malformed")
	ErrTokenSignature = errors.New("dashboard token is not signed by this cluster's CA")
	ErrTokenExpired   = errors.New("dashboard token has expired")
	ErrTokenRole      = errors.New("dashboard token does not carry the dashboard-read role")
)

// DashboardClaims is what a dashboard token says.
type DashboardClaims struct {
	Role    string `json:"role"`
	ID      string `json:"id"`
	Issued  int64  `json:"iat"`
	Expires int64  `json:"exp"`
}

// ExpiresAt is the token's expiry.
func (c DashboardClaims) ExpiresAt() time.Time { return time.Unix(c.Expires, 0) }

// SignDashboardToken returns a read-only dashboard token valid for ttl
// from now, signed with the CA key: "tlbd1.CLAIMS.SIGNATURE", both parts
// base64url, the signature over "tlbd1.CLAIMS".
func SignDashboardToken(key crypto.Signer, now time.Time, ttl time.Duration) (string, DashboardClaims, error) {
	if key == nil {
		return "", DashboardClaims{}, errors.New("sign dashboard token: this host has no CA key")
	}
	if ttl < MinDashboardTTL || ttl > MaxDashboardTTL {
		return "", DashboardClaims{}, fmt.Errorf("dashboard token ttl %v: want between %v and %v", ttl, MinDashboardTTL, MaxDashboardTTL)
	}
	id := make([]byte, 12)
	if _, err := rand.Read(id); err != nil {
		return "", DashboardClaims{}, err
	}
	c := DashboardClaims{
		Role: RoleDashboardRead, ID: base64.RawURLEncoding.EncodeToString(id),
		Issued: now.Unix(), Expires: now.Add(ttl).Unix(),
	}
	tok, err := signClaims(key, c)
	return tok, c, err
}

func signClaims(key crypto.Signer, c DashboardClaims) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	signed := dashboardPrefix + "." + base64.RawURLEncoding.EncodeToString(body)
	var sig []byte
	switch key.Public().(type) {
	case ed25519.PublicKey:
		sig, err = key.Sign(rand.Reader, []byte(signed), crypto.Hash(0))
	default:
		sum := sha256.Sum256([]byte(signed))
		sig, err = key.Sign(rand.Reader, sum[:], crypto.SHA256)
	}
	if err != nil {
		return "", fmt.Errorf("sign dashboard token: %w", err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// VerifyDashboardToken checks tok's signature against the CA public key,
// its role and its expiry at now, and returns its claims.
func VerifyDashboardToken(pub crypto.PublicKey, tok string, now time.Time) (DashboardClaims, error) {
	var c DashboardClaims
	if len(tok) > maxDashboardToken {
		return c, ErrTokenMalformed
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || parts[0] != dashboardPrefix {
		return c, ErrTokenMalformed
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, ErrTokenMalformed
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return c, ErrTokenMalformed
	}
	signed := []byte(parts[0] + "." + parts[1])
	var ok bool
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(signed)
		ok = ecdsa.VerifyASN1(k, sum[:], sig)
	case ed25519.PublicKey:
		ok = ed25519.Verify(k, signed, sig)
	default:
		return c, fmt.Errorf("verify dashboard token: unsupported CA key %T", pub)
	}
	if !ok {
		return c, ErrTokenSignature
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return DashboardClaims{}, ErrTokenMalformed
	}
	if c.Role != RoleDashboardRead {
		return DashboardClaims{}, ErrTokenRole
	}
	if !now.Before(c.ExpiresAt()) {
		return DashboardClaims{}, ErrTokenExpired
	}
	return c, nil
}
