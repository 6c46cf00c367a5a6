package dns

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// KeyStore keeps the zones' signing keys in the replicated state, beside
// the certificates' keys (certs.Storage over consensus satisfies it):
// every host signs with the same key, and the key never leaves the store
// but to the hosts. Load returns fs.ErrNotExist for a key not stored; Lock
// excludes the other hosts until Unlock (two hosts starting at once must
// not both create a key).
type KeyStore interface {
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
}

// ErrNoKey: a signed zone's key is not loaded yet (its answers with DO
// get SERVFAIL until it is, so a resolver asks another host).
var ErrNoKey = errors.New("dnssec: the zone's key is not loaded yet")

// KeyPrefix leads the store keys of the zones' signing keys.
const KeyPrefix = "dnssec/"

// keyPath is where a zone's key lives in the KeyStore; nextPath the new
// key during a rollover; lockName the lock of both.
func keyPath(zone string) string  { return KeyPrefix + strings.TrimSuffix(zone, ".") + "/csk.pem" }
func nextPath(zone string) string { return KeyPrefix + strings.TrimSuffix(zone, ".") + "/next.pem" }
func lockName(zone string) string { return KeyPrefix + strings.TrimSuffix(zone, ".") }

// zoneKey is a zone's combined signing key (CSK: flags 257, ECDSA P-256,
// algorithm 13): it signs the DNSKEY RRset and every other RRset.
type zoneKey struct {
	zone   string
	priv   *ecdsa.PrivateKey
	dnskey *mdns.DNSKEY
	tag    uint16
}

func newZoneKey(zone string, priv *ecdsa.PrivateKey) *zoneKey {
	pub := make([]byte, 64)
	priv.PublicKey.X.FillBytes(pub[:32])
	priv.PublicKey.Y.FillBytes(pub[32:])
	k := &mdns.DNSKEY{
		Hdr:   mdns.RR_Header{Name: zone, Rrtype: mdns.TypeDNSKEY, Class: mdns.ClassINET, Ttl: uint32(InfraTTL / time.Second)},
		Flags: mdns.ZONE | mdns.SEP, Protocol: 3, Algorithm: mdns.ECDSAP256SHA256,
		PublicKey: base64.StdEncoding.EncodeToString(pub),
	}
	return &zoneKey{zone: zone, priv: priv, dnskey: k, tag: k.KeyTag()}
}

// DS is the record the operator publishes in the parent zone (SHA-256).
func (k *zoneKey) DS() *mdns.DS { return k.dnskey.ToDS(mdns.SHA256) }

// loadOrCreateKey returns the zone's key from the store, creating and
// storing one if there is none, under the store's lock.
func loadOrCreateKey(ctx context.Context, ks KeyStore, zone string) (*zoneKey, error) {
	lock := lockName(zone)
	if err := ks.Lock(ctx, lock); err != nil {
		return nil, fmt.Errorf("lock the key of %s: %w", zone, err)
	}
	defer func() { _ = ks.Unlock(context.WithoutCancel(ctx), lock) }()
	b, err := ks.Load(ctx, keyPath(zone))
	if err == nil {
		priv, err := parseKey(b)
		if err != nil {
			return nil, fmt.Errorf("the key of %s in the store: %w", zone, err)
		}
		return newZoneKey(zone, priv), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load the key of %s: %w", zone, err)
	}
	priv, b, err := generateKey(nil)
	if err != nil {
		return nil, fmt.Errorf("the key of %s: %w", zone, err)
	}
	if err := ks.Store(ctx, keyPath(zone), b); err != nil {
		return nil, fmt.Errorf("store the key of %s: %w", zone, err)
	}
	return newZoneKey(zone, priv), nil
}

// generateKey makes a P-256 key and its PEM form (with headers).
func generateKey(headers map[string]string) (*ecdsa.PrivateKey, []byte, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate: %w", err)
	}
	b, err := encodeKey(priv, headers)
	return priv, b, err
}

// encodeKey is the PEM form of priv (PKCS #8), with headers.
func encodeKey(priv *ecdsa.PrivateKey, headers map[string]string) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: headers, Bytes: der}), nil
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	k, _, err := parseKeyPEM(b)
	return k, err
}

// parseKeyPEM parses a stored key and returns its PEM headers too.
func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, map[string]string, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, errors.New("not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, nil, errors.New("not an ECDSA P-256 key")
	}
	return ec, blk.Headers, nil
}

// loadKeys loads (or creates) the key of every signed zone, retrying a
// zone whose store does not answer (no leader yet) until ctx ends.
func (sg *signer) loadKeys(ctx context.Context, ks KeyStore, logf func(msg string, args ...any)) {
	for zone := range sg.zones {
		go func() {
			wait := 250 * time.Millisecond
			for {
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				k, err := loadOrCreateKey(lctx, ks, zone)
				if err == nil {
					// With the key that may be rolling in.
					err = sg.reloadZone(lctx, ks, zone)
				}
				cancel()
				if err == nil {
					logf("DNSSEC key ready", "zone", zone, "key_tag", k.tag, "ds", dsText(k))
					return
				}
				sg.setKeyErr(zone, err)
				logf("DNSSEC key not loaded; retrying", "zone", zone, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				wait = min(wait*2, 30*time.Second)
			}
		}()
	}
}

// dsText is the DS record as a zone file line.
func dsText(k *zoneKey) string { return strings.ReplaceAll(k.DS().String(), "\t", " ") }
